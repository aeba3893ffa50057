"""Questions generated from a model, over many configurations (presets, GPUs, batch and
sequence, precisions, optimizers, attention kernels, losses, LoRA / QLoRA of the learner's
own; every kind, the LoRA, parallel and MoE ones included): four distinct options, a correct
index, every distractor naming its mistake in both languages, options at least 5% apart, and
every sum an explanation writes out adding up as printed. Then the wording defects of issue
14, one test each, reading their numbers from the estimate."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcalc.errors import MemcalcError
from memcalc.estimate import DEFAULT_MFU, Options, estimate
from memcalc.plan import added_seconds, cheapest_fit
from memcalc.profiles import list_profiles, load_profile
from memcalc.quiz.bank import NUM_OPTIONS, Lang, load_bank
from memcalc.quiz.draft import KINDS
from memcalc.quiz.figures import MARGIN, relative_gap
from memcalc.quiz.generate import model_questions, strategy_label
from memcalc.quiz.templates import LABELS
from memcalc.spec.finetune import ALL_LINEAR, LoraSpec, Quantize
from memcalc.spec.presets import PRESETS, preset
from memcalc.spec.training import Attention, Loss, OptimizerKind, Precision, TrainingSetup
from memcalc.strategies.recompute import Recompute
from memcalc.strategies.selection import default_strategies
from quiz_helpers import size_of

PROPERTY_EXAMPLES = 60
"""Configurations per run of the property test (about 0.15 s each on a 2-core machine);
``MEMCALC_SLOW_TESTS=1 pytest -m slow`` runs 400 more."""

_NUMBER = re.compile(r"^\+?([\d,]*\.?\d+)\s*(GiB|MiB|KiB|bytes|%|بائٹس)?(.*)$")
_SIZE = r"[\d,]+(?:\.\d+)? (?:GiB|MiB|KiB|bytes)"
_TERM = rf"(?:[a-z][a-z-]* )*(?:[\d,]+ × )?{_SIZE}"
_WRITTEN_SUM = re.compile(
    rf"(?P<lhs>{_TERM}(?: [+−] {_TERM})+|(?:[\d,]+ × ){_SIZE}) = (?P<rhs>{_SIZE})"
)

configs = st.fixed_dictionaries(
    {
        "model": st.sampled_from(sorted(PRESETS)),
        "gpu": st.sampled_from(sorted(list_profiles())),
        "batch": st.sampled_from([1, 2, 3, 4, 8, 16]),
        "seq": st.sampled_from([128, 256, 1000, 1024, 2048, 4096, 8192]),
        "precision": st.sampled_from([p for p in Precision if not p.is_fsdp_policy]),  # FSDP2 only
        "optimizer": st.sampled_from(list(OptimizerKind)),
        "attention": st.sampled_from(list(Attention)),
        "loss": st.sampled_from(list(Loss)),
        "foreach": st.booleans(),
        # the learner's own LoRA / QLoRA (None: full training; the LoRA, QLoRA, parallel
        # and MoE kinds then ask "what if" about the same model)
        "lora": st.sampled_from([None, None, 4, 16, 64]),
        "lora_targets": st.sampled_from([(), (ALL_LINEAR,)]),
        "quantize": st.sampled_from(list(Quantize)),
    }
)


def _questions(config: dict) -> list:
    setup = TrainingSetup(
        batch=config["batch"],
        seq=config["seq"],
        precision=config["precision"],
        optimizer=config["optimizer"],
        attention=config["attention"],
        loss=config["loss"],
        optimizer_foreach=config["foreach"],
    )
    if config.get("lora") is not None:
        setup = setup.replace(
            lora=LoraSpec(rank=config["lora"], targets=config["lora_targets"]),
            quantize=config["quantize"],
        )
    try:
        return model_questions(preset(config["model"]), setup, load_profile(config["gpu"]))
    except MemcalcError as e:  # e.g. fp8 on a GPU without fp8 tensor cores: a fair refusal
        assert "--precision" in str(e) or "--attention" in str(e) or "lora" in str(e), str(e)
        return []


def _number(option: str) -> tuple[float, str] | None:
    """The number an option states in its unit, and what follows (a verdict)."""
    m = _NUMBER.match(option)
    if not m:
        return None
    value = float(m.group(1).replace(",", ""))
    unit = m.group(2) or ""
    if unit in ("GiB", "MiB", "KiB", "bytes", "بائٹس"):
        value = size_of(option.split(":")[0])[0]
        unit = "bytes"
    return value, unit + "|" + m.group(3)


_UNIT_BYTES = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "bytes": 1}


def _check_sums(text: str, where: str) -> int:
    """Every ``a + b = c`` written with sizes adds up exactly on the printed numbers; a
    product that changes unit (``P × 4 bytes = 474.7 MiB``) is right to the last digit."""
    checked = 0
    for m in _WRITTEN_SUM.finditer(text):
        total = Decimal(0)
        units = set()
        for sign, term in re.findall(rf"(^|[+−]) ?({_TERM})", m.group("lhs")):
            factor = re.match(r"(?:[a-z][a-z-]* )*(?:([\d,]+) × )?", term)
            mult = Decimal(factor.group(1).replace(",", "")) if factor and factor.group(1) else 1
            number, unit = re.search(_SIZE, term).group(0).rsplit(" ", 1)
            units.add(unit)
            value = Decimal(number.replace(",", "")) * _UNIT_BYTES[unit]
            total += (-1 if sign == "−" else 1) * mult * value
        rhs_number, rhs_unit = m.group("rhs").rsplit(" ", 1)
        rhs = Decimal(rhs_number.replace(",", ""))
        if units == {rhs_unit}:
            assert total / _UNIT_BYTES[rhs_unit] == rhs, (where, m.group(0))
        else:
            assert len(units) == 1 and "+" not in m.group("lhs"), (where, m.group(0))
            digits = len(rhs_number.partition(".")[2])
            half_ulp = Decimal(5).scaleb(-digits - 1) * _UNIT_BYTES[rhs_unit]
            assert abs(total - rhs * _UNIT_BYTES[rhs_unit]) <= half_ulp, (where, m.group(0))
        checked += 1
    return checked


def check_question(q) -> None:
    """The invariants every generated question keeps."""
    assert 0 <= q.correct < NUM_OPTIONS
    for lang in Lang:
        text = q.text(lang)
        options = [o.strip() for o in text.options]
        assert len(options) == NUM_OPTIONS and len(set(options)) == NUM_OPTIONS, (q.id, lang)
        assert text.feedback is not None and text.feedback[q.correct] == ""
        assert all(text.feedback[i].strip() for i in range(NUM_OPTIONS) if i != q.correct), q.id
        assert "{" not in text.prompt + text.explanation + "".join(text.feedback), q.id
        _check_sums(text.explanation, f"{q.id} {lang.value}")
    numbers = [_number(o) for o in q.en.options]
    if all(n is not None for n in numbers):
        for i in range(NUM_OPTIONS):
            for j in range(i + 1, NUM_OPTIONS):
                (a, group_a), (b, group_b) = numbers[i], numbers[j]
                if group_a == group_b:
                    assert relative_gap(a, b) >= MARGIN - 1e-9, (q.id, q.en.options)
    if q.numeric is not None:  # what --typed accepts is what the correct option says
        value, _ = numbers[q.correct]
        unit = q.numeric.unit.value
        scale = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "bytes": 1}.get(unit, 1)
        assert value == pytest.approx(q.numeric.value * scale, rel=1e-9), q.id


@settings(
    max_examples=PROPERTY_EXAMPLES,
    deadline=None,
    derandomize=True,  # the same configurations every run
    database=None,  # nothing written to .hypothesis/
    suppress_health_check=[HealthCheck.too_slow],
)
@given(configs)
def test_every_generated_question_keeps_its_invariants(config):
    for q in _questions(config):
        check_question(q)


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("MEMCALC_SLOW_TESTS"), reason="set MEMCALC_SLOW_TESTS=1 (about a minute)"
)
@settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(configs)
def test_every_generated_question_keeps_its_invariants_many(config):
    for q in _questions(config):
        check_question(q)


def test_the_sum_checker_catches_the_old_rounding():
    """The issue's example, two-decimal GiB on a small model, does not add up as printed."""
    with pytest.raises(AssertionError):
        _check_sums("12 × 0.04 GiB + 0.20 GiB = 0.71 GiB", "example")
    assert _check_sums("12 × 42 MiB + 204 MiB = 708 MiB", "example") == 1


def shows_total(q, num_bytes) -> bool:
    """True when the question's correct option is ``num_bytes``, rounded."""
    value, half = size_of(q.en.options[q.correct])
    return abs(value - num_bytes) <= half


def _one(model="gpt2", gpu="h100-sxm-80gb", **setup):
    spec, profile, training = preset(model), load_profile(gpu), TrainingSetup(**setup)
    qs = {q.id.removeprefix("model-"): q for q in model_questions(spec, training, profile)}
    return qs, estimate(spec, training, profile), spec, training, profile


# --- the defects, one test each ------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt2", "llama-2-7b", "llama-2-70b", "qwen2.5-0.5b"])
def test_flops_question_agrees_with_the_bank_about_33_percent(model):
    """The bank says "about +33%"; the computed question names +33.3% as a mistake only
    when the model's real figure is clearly off it, and says why it differs."""
    qs, *_ = _one(model)
    q = qs["full-recompute-flops"]
    value = float(q.en.options[q.correct].strip("+%"))
    close = relative_gap(value, 100 / 3) < MARGIN
    assert ("+33.3%" in q.en.options) is (not close)
    if close:
        assert "close to the textbook +33%" in q.en.explanation
    else:
        i = q.en.options.index("+33.3%")
        assert "textbook +33.3%" in q.en.feedback[i] and "not" in q.en.feedback[i]
        assert "so the real figure is" in q.en.explanation
    assert "نصابی" in q.ur.explanation and "کتابی" not in q.ur.explanation
    bank = {b.id: b for b in load_bank()}["recomp-full-flops-overhead"]
    assert "+33%" in bank.en.options[bank.correct]
    assert "a real model lands a little lower" in bank.en.explanation
    assert "+24% for GPT-2 small" in bank.en.explanation  # memcalc's own figure for gpt2
    gpt2 = _one("gpt2")[0]["full-recompute-flops"]
    assert gpt2.en.options[gpt2.correct] == "+24.3%"


@pytest.mark.parametrize(
    "setup",
    [
        {},
        {"precision": "fp32"},
        {"optimizer": "sgd-momentum", "precision": "bf16-mixed"},
        {"optimizer": "adamw-8bit"},
    ],
    ids=["adamw-bf16-mixed", "adamw-fp32", "sgd-momentum", "adamw-8bit"],
)
def test_optimizer_question_reads_the_step_counters_from_the_breakdown(setup):
    """Whatever ``optimizer_detail.step_tensor_bytes`` says, and wherever the estimate puts
    them, the wording matches: default Adam keeps its step counters on the CPU."""
    qs, base, *_ = _one("llama-2-7b", **setup)
    q = qs["optimizer-states"]
    detail = base.optimizer_detail
    step = detail.step_tensor_bytes
    on_gpu = base.optimizer_bytes - detail.state_bytes - detail.master_weight_bytes
    text = q.en.explanation
    assert shows_total(q, base.optimizer_bytes)
    if step == 0:
        assert "step counter" not in text
    else:
        assert f"{step:,} bytes of per-tensor step counters" in text
        assert f"{step:,} بائٹس" in q.ur.explanation
        if on_gpu == step:
            assert "only for fused or capturable Adam" in text
        else:
            assert on_gpu == 0 and "keeps each step as a CPU tensor" in text
            assert "CPU ٹینسر" in q.ur.explanation


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp-bf16"])
def test_bytes_per_param_without_master_weights_never_speaks_of_them(precision):
    qs, *_ = _one("llama-2-7b", precision=precision)
    q = qs["bytes-per-param"]
    for text in (q.en.prompt, q.en.explanation):
        assert "master" not in text and "Megatron" not in text and "18" not in text
    assert "ماسٹر" not in q.ur.explanation and "Megatron" not in q.ur.explanation
    mixed = _one("llama-2-7b", precision="bf16-mixed")[0]["bytes-per-param"]
    assert "master" in mixed.en.prompt and "Megatron-LM's 18" in mixed.en.explanation


@pytest.mark.parametrize(
    "model, gpu, precision",
    [("gpt2", "t4-16gb", "fp16-mixed"), ("llama-2-7b", "a100-sxm-80gb", "bf16-mixed")],
)
def test_fits_question_shows_overhead_and_optimizer_temporaries(model, gpu, precision):
    qs, base, *_ = _one(model, gpu, precision=precision)
    q = qs["fits"]
    value, half = size_of(q.en.options[q.correct])
    unit = q.en.options[q.correct].split(" ")[1].rstrip(":")
    for num_bytes in (base.overhead_bytes, base.optimizer_detail.step_temporary_bytes):
        shown = [m for m in re.findall(rf"([\d,]+(?:\.\d+)? {unit})", q.en.prompt)]
        assert any(abs(size_of(x)[0] - num_bytes) <= half for x in shown), (num_bytes, shown)
    assert "runtime overhead" in q.en.prompt and "temporaries" in q.en.prompt
    assert abs(value - base.peak_bytes) <= half


def test_small_model_sums_add_up_as_printed():
    """The issue's example: GPT-2 small's activations, written as a sum."""
    qs, base, *_ = _one("gpt2", "t4-16gb", precision="fp32", batch=4)
    for q in qs.values():
        for lang in Lang:
            _check_sums(q.text(lang).explanation, q.id)
    assert _check_sums(qs["activations"].en.explanation, "activations") >= 1
    assert _check_sums(qs["fits"].en.explanation, "fits") >= 1


@pytest.mark.parametrize(
    "model, gpu, setup",
    [
        ("llama-2-7b", "a100-sxm-80gb", {}),
        ("llama-2-13b", "h100-sxm-80gb", {"seq": 4096}),
        ("gpt2-xl", "t4-16gb", {"precision": "fp16-mixed"}),
        ("llama-3-8b", "h100-sxm-80gb", {"seq": 8192}),
    ],
)
def test_cheapest_fit_never_offers_a_tie_and_says_how_ties_break(model, gpu, setup):
    qs, _, spec, training, profile = _one(model, gpu, **setup)
    q = qs["cheapest-fit"]
    assert "When two strategies add the same time" in q.en.prompt
    candidates = [  # at the quiz's one utilisation (its --mfu default)
        estimate(spec, training, profile, replace(o, mfu=DEFAULT_MFU))
        for o in default_strategies(spec.num_layers, training)
    ]
    answer = cheapest_fit(candidates)
    if answer is None:
        return
    labels = {strategy_label(b.options, Lang.en): b for b in candidates}
    for i, option in enumerate(q.en.options):
        b = labels.get(option)
        if i == q.correct or b is None or not b.fits:
            continue
        assert relative_gap(added_seconds(b), added_seconds(answer)) >= MARGIN, option
    ties = [
        b
        for b in candidates
        if b.fits
        and b is not answer
        and relative_gap(added_seconds(b), added_seconds(answer)) < MARGIN
    ]
    for b in ties[:3]:  # named in the explanation instead (the first three; the rest counted)
        assert strategy_label(b.options, Lang.en) in q.en.explanation
    if len(ties) > 3:
        assert f"and {len(ties) - 3} more" in q.en.explanation


def test_cheapest_fit_names_the_equal_cost_strategies():
    """Llama-2-7B on an H100: offloading the parameters with the optimizer adds about the time
    offloading the optimizer alone adds (within the margin); it is named, not offered."""
    qs, *_ = _one("llama-2-7b", "h100-sxm-80gb")
    q = qs["cheapest-fit"]
    tied = "parameters to CPU + optimizer states to CPU"
    assert q.en.options[q.correct] == "optimizer states to CPU"
    assert tied not in q.en.options
    assert "About the same time, so not among the options: " in q.en.explanation
    assert f"{tied} (" in q.en.explanation


def test_setup_flags_reach_the_questions():
    qs, base, *_ = _one(
        "llama-2-7b", "a100-sxm-80gb", optimizer="sgd-momentum", attention="eager", precision="fp32"
    )
    assert "sgd-momentum" in qs["optimizer-states"].en.prompt
    assert "eager attention" in qs["activations"].en.prompt
    assert shows_total(qs["activations"], base.activation_bytes)
    assert shows_total(qs["weights"], 4 * base.params.total)


def test_every_k_placement_questions():
    """Two every-k kinds: the memory at backward's worst moment for k = 4, and which k of
    four is best (with the sqrt(N × input / block) rule of thumb)."""
    qs, base, spec, training, profile = _one("llama-2-7b")
    peak = qs["every-k-peak"]
    plan = estimate(
        spec, training, profile, Options(recompute=Recompute.every_k, every=4)
    ).activation_plan
    assert shows_total(peak, plan.stored_bytes + plan.rebuild_bytes)
    assert "--every 4" in peak.en.prompt and _check_sums(peak.en.explanation, "every-k") == 1
    best = qs["every-k-best"]
    assert all(o.startswith("k = ") for o in best.en.options)
    assert "sqrt(N × input / block)" in best.en.explanation
    assert {k.concept for k in KINDS.values() if k.name.startswith("every-k")} == {
        "every-k-checkpoint-segment-size"
    }


def test_dominant_component_is_left_out_when_two_components_tie():
    """Pure bf16 Lion: weights, gradients and states are all 2 bytes per parameter."""
    qs, *_ = _one("llama-2-7b", precision="bf16", optimizer="lion")
    assert "dominant-component" not in qs


def test_templates_and_labels_have_both_languages():
    from memcalc.quiz.templates import MISTAKES, TEMPLATES

    assert set(TEMPLATES) == set(KINDS)
    for kind, by_lang in TEMPLATES.items():
        assert set(by_lang) == set(Lang), kind
        assert set(by_lang[Lang.en].parts) == set(by_lang[Lang.ur].parts), kind
    assert set(MISTAKES[Lang.en]) == set(MISTAKES[Lang.ur])
    assert set(LABELS[Lang.en]) == set(LABELS[Lang.ur])
