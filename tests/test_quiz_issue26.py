"""The smaller defects of issue 26, one test each, with their numbers read from the estimate:
non-Adam optimizers explained with their own bytes, QLoRA on a mixture of experts naming its
unquantized experts, the decimal slip in the options' unit, no factor-of-2 distractors on
shares, the sqrt(N) FLOPs distractor, frozen weights without the adapters, strategies an
estimate refuses left out."""

from __future__ import annotations

import re

import pytest

from memcalc.estimate import estimate
from memcalc.profiles import load_profile
from memcalc.quiz.bank import Lang
from memcalc.quiz.facts import weight_parts
from memcalc.quiz.generate import model_questions
from memcalc.spec.finetune import LoraSpec, Quantize
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup
from quiz_helpers import shows

H100 = load_profile("h100-sxm-80gb")


def _kinds(model: str, gpu=H100, **setup) -> dict:
    return {
        q.id.removeprefix("model-"): q
        for q in model_questions(preset(model), TrainingSetup(**setup), gpu)
    }


def _all_text(q, lang: Lang = Lang.en) -> str:
    t = q.text(lang)
    return " ".join([t.prompt, t.explanation, *t.options, *(t.feedback or [])])


@pytest.mark.parametrize("optimizer", ["sgd", "sgd-momentum", "lion", "adamw-8bit", "adafactor"])
def test_non_adam_optimizers_are_explained_with_their_own_bytes(optimizer):
    q = _kinds("llama-2-7b", optimizer=optimizer)["bytes-per-param"]
    text = _all_text(q)
    assert "Megatron" not in text and "ZeRO paper" not in text  # Adam-only counts
    assert "its states in fp32" not in text
    if optimizer == "adamw-8bit":
        assert "m and v in 8 bits, 1 byte each" in q.en.explanation
    if optimizer == "sgd":
        assert "no state at all" in q.en.explanation and "states in" not in q.en.explanation
    if optimizer == "sgd-momentum":
        assert "one momentum buffer in fp32 (4)" in q.en.explanation
    adam = _kinds("llama-2-7b")["bytes-per-param"]
    assert "20 is 16-bit gradients plus an fp32 copy" in adam.en.explanation
    assert "an extra fp32 copy of the gradients makes 20" not in adam.en.explanation


def test_bytes_per_param_figures_add_up_for_8bit_adam():
    spec, setup = preset("llama-2-7b"), TrainingSetup(optimizer="adamw-8bit")
    b = estimate(spec, setup, H100)
    q = _kinds("llama-2-7b", optimizer="adamw-8bit")["bytes-per-param"]
    p = b.params.total
    states = b.optimizer_detail.state_bytes / p
    assert f"({states:.2f})" in q.en.explanation  # the 8-bit states' own bytes
    n = (b.parameter_bytes + b.gradient_bytes + b.optimizer_bytes) / p
    assert q.en.options[q.correct] == f"{n:.2f} bytes"


def test_qlora_on_a_mixture_of_experts_names_the_unquantized_experts():
    spec = preset("mixtral-8x7b")
    qs = _kinds("mixtral-8x7b")
    largest = qs["qlora-largest"]
    assert largest.en.options[largest.correct] == (
        "The routed experts' weights (fused, left unquantized)"
    )
    assert "(embeddings, norms, LM head)" not in largest.en.options[largest.correct]
    # PEFT refuses mixtral's default targets under transformers 5: the quiz names the
    # family's mapped ones (q_proj, v_proj), which leave the fused experts frozen
    setup = TrainingSetup(
        lora=LoraSpec(rank=16, targets=("q_proj", "v_proj")), quantize=Quantize.nf4
    )
    parts = weight_parts(spec, setup)
    assert parts.frozen_routed_bytes > 0.99 * (parts.frozen_bytes - 2 * 131072000 * 4)
    assert shows(
        largest.en.explanation.split("routed experts' weights ")[1], parts.frozen_routed_bytes
    )
    assert "PEFT's LoRA leaves them frozen unless a target names them" in largest.en.explanation
    base = qs["qlora-base-bytes"].en.explanation
    assert "Not quantized: the routed experts" in base
    dense = _kinds("llama-2-7b")["qlora-largest"]
    assert "routed experts" not in _all_text(dense)


def test_decimal_slip_is_in_the_unit_the_options_print():
    qs = _kinds("gpt2")
    mib = [q for q in qs.values() if q.numeric is not None and q.numeric.unit.value == "MiB"]
    assert mib
    for q in mib:
        feedback = " ".join(q.en.feedback or [])
        assert "decimal GB" not in feedback, q.id
    gib = [q for q in _kinds("llama-2-7b").values() if q.numeric and q.numeric.unit.value == "GiB"]
    assert any("decimal GB" in " ".join(q.en.feedback or []) for q in gib)  # still there


def test_no_factor_of_two_distractors_on_shares_or_percentages():
    for model in ("llama-2-7b", "gpt2", "mixtral-8x7b"):
        for kind, q in _kinds(model).items():
            if not re.search(r"%$", q.en.options[q.correct]):
                continue
            for sentence in q.en.feedback or []:
                assert "factor of 2" not in sentence, (model, kind, sentence)


def test_sqrt_flops_distractor_describes_k_plus_one_over_two():
    q = _kinds("llama-2-7b")["sqrt-flops"]
    text = " ".join(q.en.feedback or [])
    assert "6(6 + 1)/2 block forwards" in text and "(6 + 1)/2 times the real cost" in text
    assert "rebuilds the segment once for each of its blocks" not in text


def test_frozen_weights_leave_out_the_adapters():
    spec = preset("llama-2-70b")
    setup = TrainingSetup(lora=LoraSpec(rank=16))
    b = estimate(spec, setup, H100)
    parts = weight_parts(spec, setup)
    q = _kinds("llama-2-70b", lora=LoraSpec(rank=16))["lora-states"]
    frozen = q.en.explanation.split("The frozen weights themselves still take ")[1]
    assert shows(frozen, b.parameter_bytes - parts.trained_bytes)
    assert parts.trained_bytes > 0


def test_strategies_the_gpu_cannot_run_are_left_out_of_cheapest_fit():
    """A V100 profile has no local NVMe: estimate refuses optimizer=nvme there; the question
    is still asked, over the strategies it can run."""
    qs = _kinds("gpt2-xl", load_profile("v100-sxm2-16gb"), precision="fp16-mixed")
    q = qs["cheapest-fit"]
    assert "optimizer states to NVMe" not in _all_text(q)
    assert "optimizer states to NVMe" in _all_text(_kinds("gpt2-xl")["cheapest-fit"])


def test_cheapest_fit_in_urdu_says_what_was_done_before_even():
    q = _kinds("mixtral-8x7b", load_profile("a100-sxm-80gb"), batch=4)["cheapest-fit"]
    if "کے بعد" in q.ur.explanation:
        assert "CPU پر کے" not in q.ur.explanation
    assert "smaller micro-batch" in q.en.explanation or "micro-batch is already 1" not in (
        q.en.explanation
    )
