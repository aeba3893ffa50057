"""The differential run's misses (issue 20), each shrunk to its smallest case and run for real
(the HF + PEFT + bitsandbytes step on the CPU, ``memcalc measure``'s code) against the
estimate: states exact, activations within 1%, peak within 2%. Each names the rule it pins
and the seed-0 draw it was found in (``benchmarks/differential.py --lora 300 --full 300``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("bitsandbytes")

from memcalc.measure.differential.cases import Case, LoraDraw  # noqa: E402
from memcalc.measure.differential.runner import run_case  # noqa: E402
from memcalc.measure.differential.summary import checks  # noqa: E402


def lora(
    rank: int = 4,
    targets: tuple[str, ...] = (),
    quantize: str = "none",
    *,
    kbit_prep: bool | None = None,
    input_grads: bool | None = None,
    modules_to_save: tuple[str, ...] = (),
    train_embeddings: bool = False,
) -> LoraDraw:
    kind = "explicit" if targets else "default"
    return LoraDraw(
        rank, 8.0, kind, targets, 0.0, quantize, kbit_prep, input_grads, modules_to_save,
        train_embeddings,
    )  # fmt: skip


def case(
    family: str,
    precision: str,
    recompute: str = "none",
    adapters: LoraDraw | None = None,
    *,
    every: int | None = None,
    optimizer: str = "adam",
    attention: str = "sdpa",
) -> Case:
    return Case(0, family, 2, 16, precision, attention, optimizer, recompute, every, 0.0, adapters)


CASES = {
    # measure ran Megatron's block method as full recompute (all 92 'block' draws missed)
    "block recompute, first k layers": case("llama", "bf16", "block", every=1),
    # a parameter already fp32 (PEFT's adapters) is its own master under -mixed
    "-mixed LoRA: fp32 adapters have no master copy": case(
        "mistral", "bf16-mixed", adapters=lora(), optimizer="sgd-momentum"
    ),
    # bitsandbytes quantizes only nn.Linear: the transformers-5 router stays 16-bit (#0)
    "quantized MoE: the router stays unquantized": case(
        "qwen2_moe", "bf16-mixed", adapters=lora(targets=("k_proj", "up_proj"), quantize="fp4")
    ),
    # transformers quantizes GPT-2's Conv1D (the hand-made replacement did not: #11)
    "GPT-2 Conv1D quantized by transformers": case(
        "gpt2", "bf16", adapters=lora(targets=("c_fc", "c_proj"), quantize="nf4-dq")
    ),
    # --train-embeddings trains GPT-NeoX's embed_in and its head (#9)
    "train-embeddings by the family's own names": case(
        "gpt_neox", "amp-bf16", adapters=lora(train_embeddings=True)
    ),
    # modules_to_save by the HF name (GPT-2's wte is the embed_tokens op, #126)
    "modules_to_save=wte": case(
        "gpt2", "fp16", "none", lora(rank=1, targets=("c_fc", "c_proj"), modules_to_save=("wte",))
    ),
    # a tied head in modules_to_save with the embedding trained in place (#1)
    "modules_to_save=lm_head + train-embeddings, tied": case(
        "opt", "amp-fp16", adapters=lora(modules_to_save=("lm_head",), train_embeddings=True)
    ),
    # the leaf enable_input_require_grads makes of the embedding output (OPT adds positions;
    # under full recompute the activations are exact, the peak still -6.4%: PEAK_OPEN)
    "input grads: the embedding output leaf": case(
        "opt", "fp16", "full", lora(rank=1, targets=("all-linear",), quantize="nf4")
    ),
    # GPT-NeoX's parallel MLP reads the layer input: nothing saved in layer 0 (#2)
    "parallel residual: a frozen MLP on a no-grad input": case(
        "gpt_neox", "fp32", adapters=lora(targets=("dense",), input_grads=False)
    ),
    # autocast caches only casts of weights that require grad: a frozen base's is gone
    # under a checkpoint
    "autocast LoRA under full recompute": case(
        "llama", "amp-bf16", "full", lora(input_grads=False)
    ),
    # CPU LLM.int8 under autocast returns 16 bits
    "int8 under autocast (CPU path)": case("llama", "amp-bf16", adapters=lora(quantize="int8")),
    # a 4-bit linear returns its input's dtype: fp32 under autocast, k-bit preparation or not
    "nf4 under autocast without k-bit preparation": case(
        "llama", "amp-bf16", adapters=lora(quantize="nf4", kbit_prep=False)
    ),
    # from_pretrained keeps DeepSeek's router in fp32 (_keep_in_fp32_modules_strict)
    "DeepSeek-V3 router kept in fp32": case("deepseek_v3", "bf16", optimizer="adamw"),
    # q, k and v of a fused projection are three casts under autocast (GPT-2's c_attn after a
    # 4-bit projection that returns fp32)
    "fused qkv views cast one by one": case("gpt2", "amp-bf16", adapters=lora(quantize="fp4")),
}
PEAK_OPEN = {"input grads: the embedding output leaf"}
"""Cases whose states and activations are exact now but whose peak still misses (a 4-bit
layer's backward transients under a checkpoint's recompute): checked without the peak."""


@pytest.mark.hf
@pytest.mark.parametrize("name", list(CASES))
def test_a_shrunk_miss_now_matches(name):
    c = CASES[name]
    outcome = run_case(c)
    assert outcome.status == "run", outcome.reason
    got = checks(outcome.estimate, outcome.measured)
    detail = (got.misses, outcome.estimate, outcome.measured, c.command())
    assert got.states_exact, detail
    assert got.activations_ok, detail
    assert got.peak_ok or name in PEAK_OPEN, detail
