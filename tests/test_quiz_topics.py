"""The generated topics of issue 14's "new topics": LoRA / QLoRA, tensor / sequence /
pipeline / context parallelism with ZeRO, mixtures of experts, and the FLOPs of sqrt(N)
checkpointing. Each answer is checked against an estimate computed here, independently of
the quiz, and against published figures where there are some; each kind has a sibling for
review, words in both languages, and the learner's own --lora-rank / --quantize reach it."""

from __future__ import annotations

import json
import re

import pytest

from memcalc.estimate import Options, estimate
from memcalc.profiles import load_profile
from memcalc.quiz.bank import Lang, Topic
from memcalc.quiz.draft import KINDS
from memcalc.quiz.figures import format_params, format_percent, format_share
from memcalc.quiz.generate import model_questions, variant_question
from memcalc.quiz.templates import LABELS, TEMPLATES
from memcalc.spec.finetune import LoraSpec, Quantize
from memcalc.spec.parallel import Parallelism
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.pipeline import in_flight
from memcalc.strategies.recompute import Recompute, sqrt_k
from quiz_helpers import isolated_state, quiz, shows

pytestmark = pytest.mark.usefixtures(isolated_state.__name__)

NEW_KINDS = {
    "sqrt-flops",
    "lora-trainable",
    "lora-states",
    "lora-activations",
    "qlora-base-bytes",
    "qlora-largest",
    "tp-activations",
    "zero-model-states",
    "pp-first-stage",
    "pp-bubble",
    "cp-per-rank",
    "moe-active",
    "moe-states",
}
GPU = "h100-sxm-80gb"
ARABIC = re.compile("[\u0600-\u06ff]")


def _questions(model: str, setup: TrainingSetup | None = None) -> dict:
    qs = model_questions(preset(model), setup or TrainingSetup(), load_profile(GPU))
    return {q.id.removeprefix("model-"): q for q in qs}


def _answer(q) -> str:
    return q.en.options[q.correct]


def _run(model: str, setup: TrainingSetup, options: Options | None = None):
    return estimate(preset(model), setup, load_profile(GPU), options or Options())


def test_every_new_kind_is_registered_with_words_in_both_languages():
    assert set(KINDS) >= NEW_KINDS
    for name in NEW_KINDS:
        assert set(TEMPLATES[name]) == set(Lang), name
        for lang in Lang:
            assert TEMPLATES[name][lang].prompt.strip(), (name, lang)
    topics = {KINDS[name].topic for name in NEW_KINDS}
    assert {Topic.lora, Topic.parallel, Topic.moe, Topic.sharding, Topic.recompute} <= topics


@pytest.mark.parametrize("model", ["gpt2", "llama-2-7b", "qwen2.5-0.5b", "mixtral-8x7b"])
def test_new_kinds_are_asked_for_each_model(model):
    """Dense models get every new kind but the MoE ones; an MoE gets every one (its routed
    experts stay frozen under LoRA, as PEFT leaves them)."""
    asked = set(_questions(model)) & NEW_KINDS
    moe = {"moe-active", "moe-states"}
    if preset(model).moe is None:
        assert asked == NEW_KINDS - moe
    else:
        assert asked == NEW_KINDS


@pytest.mark.parametrize("model", ["llama-2-7b", "mixtral-8x7b", "gpt2"])
def test_each_distractor_carries_its_own_mistake_in_both_languages(model):
    for name, q in _questions(model).items():
        if name not in NEW_KINDS:
            continue
        for lang in Lang:
            text = q.text(lang)
            wrong = [text.feedback[i] for i in range(4) if i != q.correct]
            assert all(w.strip() for w in wrong) and len(set(wrong)) == 3, (name, lang)
            if lang is Lang.ur:  # Urdu sentences, not English ones left untranslated
                for part in (text.prompt, text.explanation, *wrong):
                    assert len(ARABIC.findall(part)) > len(part) / 4, (name, part[:80])


# --- LoRA / QLoRA ----------------------------------------------------------------------------


def test_lora_answers_equal_the_estimate_of_the_lora_setup():
    """r = 16 on PEFT's default Llama targets (q_proj, v_proj): 32 layers x 2 matrices x
    16 x (4096 + 4096) = 8,388,608 trained parameters (Hu et al. 2021, sec. 4.1)."""
    qs = _questions("llama-2-7b")
    lora_setup = TrainingSetup(lora=LoraSpec(rank=16))
    lora = _run("llama-2-7b", lora_setup)
    full = _run("llama-2-7b", TrainingSetup())
    assert lora.params.trainable == 32 * 2 * 16 * (4096 + 4096) == 8_388_608
    assert _answer(qs["lora-trainable"]) == format_share(lora.params.trainable / lora.params.total)
    assert "q_proj, v_proj" in qs["lora-trainable"].en.prompt
    assert shows(_answer(qs["lora-states"]), lora.gradient_bytes + lora.optimizer_bytes)
    # fp32 adapters under bf16-mixed: 4 (gradient) + 8 (m, v) bytes each, no master copy
    assert lora.gradient_bytes + lora.optimizer_bytes == 12 * 8_388_608
    assert shows(_answer(qs["lora-activations"]), lora.activation_bytes)
    assert 0.8 * full.activation_bytes < lora.activation_bytes <= full.activation_bytes


def _linear_weights_7b() -> list[int]:
    """Llama 2 7B's linear weights: 32 x (q, k, v, o of 4096 x 4096; gate, up, down of
    4096 x 11008), the LM head left out (bitsandbytes does not quantize it)."""
    return 32 * ([4096 * 4096] * 4 + [4096 * 11008] * 3)


def test_nf4_is_half_a_byte_plus_a_sixteenth_and_double_quant_0_127_bits():
    """bitsandbytes ``functional.quantize_4bit``: 4-bit codes (two per byte), one fp32
    absmax per 64 weights, a 16-entry fp32 code table; with ``compress_statistics`` the
    absmax is quantized by ``quantize_blockwise(absmax, blocksize=256)`` to uint8 with one
    fp32 scale per 256 blocks, a 256-entry code table and an fp32 offset. QLoRA (Dettmers
    et al. 2023, sec. 3): the constants cost 32/64 = 0.5 bits per weight, 8/64 + 32/(64 x
    256) = 0.127 bits with double quantization."""
    weights = _linear_weights_7b()
    n = sum(weights)
    assert n == 6_476_005_376
    nf4 = sum(w // 2 + 4 * (w // 64) + 64 for w in weights)
    dq = sum(w // 2 + w // 64 + 4 * -(-(w // 64) // 256) + 1024 + 4 + 64 for w in weights)
    assert nf4 / n == pytest.approx(0.5 + 1 / 16, rel=1e-5)
    assert dq / n == pytest.approx(0.5 + 1 / 64 + 4 / (64 * 256), rel=1e-4)
    assert 8 * (dq / n - 0.5) == pytest.approx(0.127, abs=5e-4)
    for quant, expected, words in (
        (Quantize.nf4, nf4, "0.5 + 1/16 = 0.5625 bytes per weight"),
        (Quantize.nf4_dq, dq, "0.127 bits per weight"),
    ):
        setup = TrainingSetup(lora=LoraSpec(rank=16), quantize=quant)
        q = _questions("llama-2-7b", setup)["qlora-base-bytes"]
        assert shows(_answer(q), expected), (quant, _answer(q))
        assert words in q.en.explanation
        assert f"{n:,} weights" in q.en.prompt and quant.value in q.en.prompt
    q = _questions("llama-2-7b")["qlora-base-bytes"]  # no --quantize: NF4 is asked about
    assert shows(_answer(q), nf4)
    wrong = dict(zip(q.en.options, q.en.feedback, strict=True))
    assert any("4-bit codes alone" in w for w in wrong.values())


def test_qlora_largest_part_is_read_from_the_estimate():
    setup = TrainingSetup(lora=LoraSpec(rank=16), quantize=Quantize.nf4)
    b = _run("llama-2-7b", setup)
    q = _questions("llama-2-7b")["qlora-largest"]
    assert b.activation_bytes > b.parameter_bytes  # 7.7 GiB of activations, 4.4 GiB weights
    assert _answer(q) == LABELS[Lang.en]["qlora.activations"]
    checkpointed = _run("llama-2-7b", setup, Options(recompute=Recompute.full))
    assert f"{checkpointed.activation_bytes / 2**30:.2f} GiB" in q.en.explanation


def test_lora_and_quantize_flags_reach_the_quiz():
    result = quiz(
        "--model", "llama-2-7b", "--lora-rank", "8", "--quantize", "nf4-dq", "--topic", "lora",
        "--source", "model", "--reveal", "--format", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    questions = {q["id"].removeprefix("model-"): q for q in json.loads(result.stdout)["questions"]}
    assert "r = 8" in questions["lora-trainable"]["prompt"]
    assert "nf4-dq" in questions["qlora-base-bytes"]["prompt"]
    lora = _run("llama-2-7b", TrainingSetup(lora=LoraSpec(rank=8), quantize=Quantize.nf4_dq))
    answer = questions["lora-trainable"]
    assert answer["options"][ord(answer["correct"]) - ord("a")] == format_share(
        lora.params.trainable / lora.params.total
    )
    # the learner's own setup is QLoRA: activations are more than full fine-tuning's
    assert "more than full fine-tuning's" in questions["lora-activations"]["explanation"]


# --- several GPUs ----------------------------------------------------------------------------


def test_tensor_parallel_divides_attention_and_mlp_but_not_the_rest():
    """Korthikanti et al. 2022: sbh(10 + 24/t + 5as/(ht)) per layer without sequence
    parallelism, sbh(34/t + 5as/(ht)) with it. The one-GPU figure runs the tp layouts' model
    code (Megatron-core's, their default framework), as the question does."""
    base = _run("llama-2-7b", TrainingSetup(framework="megatron"))
    t = 8
    no_sp = _run("llama-2-7b", TrainingSetup(parallel=Parallelism(tp=t, sp=False)))
    sp = _run("llama-2-7b", TrainingSetup(parallel=Parallelism(tp=t)))
    q = _questions("llama-2-7b")["tp-activations"]
    assert f"t = {t}" in q.en.prompt
    assert shows(_answer(q), no_sp.activation_bytes)
    assert base.activation_bytes / t < no_sp.activation_bytes < base.activation_bytes / 2
    assert sp.activation_bytes == pytest.approx(base.activation_bytes / t, rel=0.02)
    assert no_sp.parameter_bytes == pytest.approx(base.parameter_bytes / t, rel=0.01)
    assert f"{sp.activation_bytes / 2**30:.2f} GiB" in q.en.explanation


def test_zero_stages_shard_states_gradients_then_weights():
    qs = _questions("llama-2-7b")
    states = {}
    for z in range(4):
        b = _run("llama-2-7b", TrainingSetup(parallel=Parallelism(dp=8, zero=z)))
        states[z] = b.parameter_bytes + b.gradient_bytes + b.optimizer_bytes
    assert states[0] > states[1] > states[2] > states[3]
    q = qs["zero-model-states"]
    assert shows(_answer(q), states[2])
    for z in (0, 1, 3):
        assert any(shows(o, states[z]) for o in q.en.options)


def test_1f1b_first_stage_holds_p_micro_batches():
    """Stage i of a 1F1B pipeline runs p - i forwards before its first backward (Narayanan
    et al. 2021); the first stage holds p micro-batches (Korthikanti et al. 2022, 4.2.3)."""
    p, m = 4, 8
    par = Parallelism(pp=p, microbatches=m)
    assert [in_flight(i, par)[0] for i in range(p)] == [4, 3, 2, 1]
    b = _run("llama-2-7b", TrainingSetup(parallel=par))
    q = _questions("llama-2-7b")["pp-first-stage"]
    assert shows(_answer(q), b.stages[0].activation_bytes)
    assert b.stages[0].activation_bytes > b.stages[-1].activation_bytes
    one = b.stages[0].activation_bytes / p
    wrong = dict(zip(q.en.options, q.en.feedback, strict=True))
    assert any(shows(o, one) and "1F1B runs p = 4" in w for o, w in wrong.items())
    assert any(shows(o, m * one) and "GPipe" in w for o, w in wrong.items())


def test_pipeline_bubble_is_p_minus_1_over_m_plus_p_minus_1():
    q = _questions("llama-2-7b")["pp-bubble"]
    assert _answer(q) == format_share(3 / 11) == "27.3%"
    assert "3 / 11" in q.en.explanation


def test_context_parallel_splits_activations_not_the_model():
    base = _run("llama-2-7b", TrainingSetup())
    cp = _run("llama-2-7b", TrainingSetup(parallel=Parallelism(cp=4)))
    q = _questions("llama-2-7b")["cp-per-rank"]
    states = base.parameter_bytes + base.gradient_bytes + base.optimizer_bytes
    assert cp.activation_bytes == pytest.approx(base.activation_bytes / 4, rel=0.05)
    acts, model = re.match(r"activations (.*), model states (.*)", _answer(q)).groups()
    assert shows(acts, cp.activation_bytes) and shows(model, states)


# --- mixtures of experts ---------------------------------------------------------------------


def test_moe_active_and_total_parameters_of_mixtral():
    """Mixtral 8x7B: 46.7 B parameters, 12.9 B active per token (Mistral AI, "Mixtral of
    experts", 2023; Jiang et al. 2024, sec. 2)."""
    qs = _questions("mixtral-8x7b")
    b = _run("mixtral-8x7b", TrainingSetup())
    assert format_params(b.params.total) == "46.70 B"
    assert _answer(qs["moe-active"]) == format_params(b.params.active) == "12.88 B"
    states = b.parameter_bytes + b.gradient_bytes + b.optimizer_bytes
    assert shows(_answer(qs["moe-states"]), states)  # memory sees every expert
    assert states == 18 * b.params.total  # bf16-mixed AdamW: 18 bytes per parameter, all


# --- sqrt(N) checkpointing -------------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt2", "llama-2-7b"])
def test_sqrt_checkpointing_costs_the_same_flops_as_full_recompute(model):
    n = preset(model).num_layers
    sq = _run(model, TrainingSetup(), Options(recompute=Recompute.every_k, every=sqrt_k(n)))
    full = _run(model, TrainingSetup(), Options(recompute=Recompute.full))
    q = _questions(model)["sqrt-flops"]
    assert _answer(q) == format_percent(sq.extra_flops_fraction)
    assert sq.extra_flops_fraction == pytest.approx(full.extra_flops_fraction)
    # which one is lighter at backward's worst moment is read from the estimate
    lighter = sq.activation_plan.peak_activation_bytes > full.activation_plan.peak_activation_bytes
    assert ("full recompute is the lighter one" in q.en.explanation) is lighter


# --- siblings --------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["llama-2-7b", "mixtral-8x7b"])
def test_every_new_kind_has_a_sibling_for_review(model):
    """A miss brings the same kind back for a varied setup (``Kind.variation``)."""
    spec, setup, gpu = preset(model), TrainingSetup(), load_profile(GPU)
    asked = {q.id.removeprefix("model-"): q for q in model_questions(spec, setup, gpu)}
    for name in NEW_KINDS & set(asked):
        sibling = variant_question(KINDS[name], spec, setup, gpu)
        assert sibling is not None, name
        assert sibling.concept == asked[name].concept
        assert sibling.en.prompt != asked[name].en.prompt, name


# --- audit of issue 14's checklist -----------------------------------------------------------


def test_adamw_step_counters_are_host_memory_unless_fused_in_estimate_and_quiz():
    """torch ``optim/adam.py`` ``_init_group`` (``adamw.py`` carries the same lines before
    AdamW became a subclass of Adam): ``state["step"] = torch.zeros((), ...,
    device=p.device) if group["capturable"] or group["fused"] else torch.tensor(0.0, ...)``,
    "Deliberately host `step` on CPU if both capturable and fused are off". Llama 2 7B has
    32 x 9 + 3 = 291 parameter tensors, so 1,164 bytes of 4-byte step scalars: on the CPU
    for the default AdamW, on the GPU for the fused one."""
    spec, gpu = preset("llama-2-7b"), load_profile("a100-sxm-80gb")
    default = estimate(spec, TrainingSetup(), gpu)
    fused = estimate(spec, TrainingSetup(optimizer_fused=True), gpu)
    d = default.optimizer_detail
    assert d.step_tensor_bytes == 4 * (32 * 9 + 3) == 1_164
    assert default.optimizer_bytes == d.state_bytes + d.master_weight_bytes
    assert fused.optimizer_bytes == default.optimizer_bytes + 1_164
    for flag, b, words in (
        ((), default, "keeps each step as a CPU tensor"),
        (("--fused",), fused, "only for fused or capturable Adam"),
    ):
        result = quiz(
            "--model", "llama-2-7b", "--gpu", "a100-sxm-80gb", *flag, "--source", "model",
            "--topic", "optimizer", "--reveal", "--format", "json",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        (q,) = [q for q in json.loads(result.stdout)["questions"] if "optimizer-states" in q["id"]]
        assert words in q["explanation"]
        assert shows(q["options"][ord(q["correct"]) - ord("a")], b.optimizer_bytes)


def test_setup_flags_reach_the_questions_through_the_command_line():
    """--optimizer, --attention, --precision and --gpu, as typed: the computed questions
    name them and their answers are the estimate of that setup."""
    args = ("--model", "gpt2", "--gpu", "t4-16gb", "--precision", "fp32")
    args += ("--optimizer", "sgd-momentum", "--attention", "eager")
    result = quiz(*args, "--source", "model", "--count", "40", "--reveal", "--format", "json")
    assert result.exit_code == 0, result.output
    qs = {q["id"].removeprefix("model-"): q for q in json.loads(result.stdout)["questions"]}
    gpu = load_profile("t4-16gb")
    setup = TrainingSetup(precision="fp32", optimizer="sgd-momentum", attention="eager")
    b = estimate(preset("gpt2"), setup, gpu)

    def answer(name: str) -> str:
        return qs[name]["options"][ord(qs[name]["correct"]) - ord("a")]

    assert "sgd-momentum" in qs["optimizer-states"]["prompt"]
    assert shows(answer("optimizer-states"), b.optimizer_bytes)
    assert "eager attention" in qs["activations"]["prompt"]
    assert shows(answer("activations"), b.activation_bytes)
    assert shows(answer("weights"), 4 * b.params.total)  # fp32 weights
    assert gpu.display_name in qs["fits"]["prompt"]


@pytest.mark.parametrize("model", ["llama-2-7b", "mixtral-8x7b"])
def test_new_topics_in_urdu_read_right_to_left(model):
    from test_quiz_urdu import _check_rtl

    result = quiz(
        "--model", model, "--lang", "ur", "--source", "model", "--topic", "lora,parallel,moe",
        "--count", "20", "--reveal",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert _check_rtl(result.stdout) > 30
    assert "پیرالل ازم" in result.stdout


def test_the_new_topics_never_import_torch():
    """Generating every kind (LoRA variants, layouts, MoE) stays in the torch-free core."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from memcalc.quiz.generate import model_questions\n"
        "from memcalc.profiles import load_profile\n"
        "from memcalc.spec.presets import preset\n"
        "from memcalc.spec.training import TrainingSetup\n"
        "for m in ('llama-2-7b', 'mixtral-8x7b'):\n"
        "    model_questions(preset(m), TrainingSetup(), load_profile('h100-sxm-80gb'))\n"
        "sys.exit('torch' in sys.modules or 'transformers' in sys.modules)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
