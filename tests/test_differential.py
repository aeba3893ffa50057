"""The differential test (issue 20, ``memcalc.measure.differential``): the sampler draws the
same cases for a seed and every flag value over enough draws; a seed-fixed slice of drawn
cases that pass today is run for real against the estimate (unmarked, a few seconds); the
wider draw is ``-m slow``."""

from __future__ import annotations

import pytest

from memcalc.measure.differential.cases import case_from_record

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memcalc.measure.differential import sampler  # noqa: E402
from memcalc.measure.differential.runner import run_case  # noqa: E402
from memcalc.measure.differential.summary import checks, passes  # noqa: E402

SEED = 0
"""The seed of the recorded run (``benchmarks/differential.py --lora 300 --full 300 --seed 0``,
README "How accurate is it?" item 6)."""
PASSING_TODAY: tuple[int, ...] = (242, 159, 185, 219, 274, 241, 553, 530, 568, 539)
"""Indices, in that draw, of cases that passed every check on the recorded run (run 3, main
after the issue-20 fixes): 6 LoRA / QLoRA (gpt2, llama, gpt_neox, qwen3, olmo2 int8 full
recompute, opt fp4 block recompute) and 4 full fine-tuning ones (gpt2 every-k, phi3, opt full
recompute, llama), the quickest of those that passed, one per family."""


def test_the_same_seed_draws_the_same_cases():
    a = sampler.draw_cases(20, 10, seed=7)
    assert a == sampler.draw_cases(20, 10, seed=7)
    assert a != sampler.draw_cases(20, 10, seed=8)
    assert [c.kind for c in a] == ["lora"] * 20 + ["full"] * 10


def test_a_case_survives_its_json_record():
    for case in sampler.draw_cases(15, 5, seed=3):
        assert case_from_record(case.record()) == case


def test_every_flag_value_is_drawn():
    cases = sampler.draw_cases(600, 200, seed=1, every_value=True)
    seen = sampler.flag_values(cases)
    assert seen["family"] == set(sampler.FAMILIES)
    assert seen["precision"] == set(sampler.PRECISIONS)
    assert seen["optimizer"] == set(sampler.OPTIMIZERS)
    assert seen["attention"] == set(sampler.ATTENTIONS)
    assert seen["recompute"] == set(sampler.RECOMPUTES)
    assert seen["dropout"] == set(sampler.MODEL_DROPOUT)
    assert seen["rank"] == set(sampler.RANKS)
    assert seen["alpha"] == set(sampler.ALPHAS)
    assert seen["targets_kind"] == set(sampler.TARGET_KINDS)
    assert seen["lora_dropout"] == set(sampler.LORA_DROPOUT)
    assert seen["quantize"] == set(sampler.QUANTIZE)
    assert seen["kbit_prep"] == seen["input_grads"] == set(sampler.TRISTATE)
    assert seen["modules_to_save"] == seen["train_embeddings"] == {False, True}
    assert seen["batch"] == set(sampler.BATCHES) and seen["seq"] == set(sampler.SEQS)


def test_by_default_only_what_a_cpu_measure_runs_is_drawn():
    seen = sampler.flag_values(sampler.draw_cases(300, 100, seed=2))
    for flag, values in sampler.NOT_MEASURED.items():
        assert seen[flag].isdisjoint(values), flag
        assert seen[flag], flag


def test_explicit_targets_are_the_models_own_linears():
    from memcalc.measure.differential.linears import linears_of

    for case in sampler.draw_cases(200, 0, seed=4):
        names = set(linears_of(case.model).every)
        lora = case.lora
        assert lora is not None
        if lora.targets_kind in ("mlp", "attention", "explicit"):
            assert lora.targets and set(lora.targets) <= names, case


def test_the_command_line_names_every_drawn_flag():
    case = next(
        c for c in sampler.draw_cases(100, 0, seed=5) if c.lora and c.lora.quantize != "none"
    )
    command = case.command()
    assert command.startswith("memcalc measure --model tests/data/hf/tiny/")
    assert f"--quantize {case.lora.quantize}" in command
    assert f"--lora-rank {case.lora.rank}" in command


def _slice() -> list:
    cases = sampler.draw_cases(300, 300, seed=SEED)
    return [cases[i] for i in PASSING_TODAY]


@pytest.mark.parametrize("case", _slice() if PASSING_TODAY else [], ids=lambda c: f"#{c.index}")
def test_a_drawn_case_that_passes_today_still_passes(case):
    outcome = run_case(case)
    assert outcome.status == "run", outcome.reason
    c = checks(outcome.estimate, outcome.measured)
    assert c.states_exact, (c.misses, outcome.estimate, outcome.measured, case.command())
    assert c.activations_ok and c.peak_ok, (c.misses, case.command())
    assert passes(outcome), (outcome.peft, outcome.memcalc_trainable)


@pytest.mark.slow
@pytest.mark.xfail(reason="issue 20: the peak misses the README lists; strict once fixed")
def test_a_wider_draw_passes_or_is_refused_in_one_line():
    """Issue 20's 'done': every run case passes, every other is a one-line refusal."""
    outcomes = [run_case(c) for c in sampler.draw_cases(40, 40, seed=11)]
    failing = [o.case.command() for o in outcomes if o.status == "run" and not passes(o)]
    errors = [(o.case.command(), o.reason) for o in outcomes if o.status == "error"]
    assert not failing and not errors, (failing[:5], errors[:5])
