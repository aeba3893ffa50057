"""Fine-tuning with a frozen base: LoRA (PEFT) and quantized base weights (bitsandbytes).

Parameter counts equal PEFT's ``get_nb_trainable_parameters``; storage of quantized weights
equals what bitsandbytes allocates; the estimate equals a real CPU training step of the PEFT
model: parameters, gradients and optimizer states exactly, activations within
ACTIVATION_TOLERANCE and the peak within PEAK_TOLERANCE."""

from __future__ import annotations

import pytest

from memcalc.errors import MemcalcError
from memcalc.estimate import Options, estimate
from memcalc.params import count_params, setup_param_counts
from memcalc.profiles import load_profile
from memcalc.spec.finetune import LoraSpec, Quantize
from memcalc.spec.loaders import load_model
from memcalc.spec.model import ModelSpec
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute

ACTIVATION_TOLERANCE = 0.01
"""Issue 9: activations within 1% of the PEFT measurement."""
PEAK_TOLERANCE = 0.02
"""Issue 9: peak within 2% (the toy models' full-recompute peak is the known -1.4% case)."""

GPU = load_profile("h100")
LLAMA = ModelSpec(
    name="tiny-llama",
    family="llama",
    vocab_size=256,
    hidden_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=160,
)
GPT2 = ModelSpec(
    name="tiny-gpt2",
    family="gpt2",
    vocab_size=256,
    hidden_size=64,
    num_layers=3,
    num_heads=4,
    max_position_embeddings=64,
)
MIXTRAL = load_model("tests/data/hf/tiny/mixtral.json")
QWEN2_MOE = load_model("tests/data/hf/tiny/qwen2_moe.json")
QWEN3 = load_model("tests/data/hf/tiny/qwen3.json")
OLMO2 = load_model("tests/data/hf/tiny/olmo2.json")
DEEPSEEK_V3 = load_model("tests/data/hf/tiny/deepseek_v3.json")
"""q_norm / k_norm: on the first layer a frozen k_proj's output needs no grad, so k_norm saves
nothing there."""
"""MoE: the routed experts are fused nn.Parameters, which LoRA leaves frozen."""


def test_adapters_count_r_times_in_plus_out():
    spec = preset("llama-2-7b")
    setup = TrainingSetup(lora=LoraSpec(rank=16))  # PEFT's llama default: q_proj, v_proj
    counts = setup_param_counts(spec, setup)
    h = spec.hidden_size
    adapters = spec.num_layers * 2 * 16 * (h + spec.kv_size)
    assert counts.trainable == adapters
    assert counts.total == count_params(spec).total + adapters
    b = estimate(spec, setup, GPU)
    assert b.gradient_bytes == 4 * adapters  # fp32 adapters (autocast_adapter_dtype)
    assert b.optimizer_bytes == 8 * adapters  # AdamW m, v in the adapters' fp32


def test_quantized_storage_formulas():
    n = 4096 * 11008
    assert Quantize.nf4.storage_bytes(n, 4096) == n // 2 + 4 * n // 64 + 64
    dq = Quantize.nf4_dq.storage_bytes(n, 4096)
    assert dq == n // 2 + n // 64 + 64 + 4 * -(-n // 64 // 256) + 1024 + 4
    assert 0.515 < dq / n < 0.517  # QLoRA's "about 0.516 bytes per parameter"
    assert Quantize.int8.storage_bytes(n, 4096) == n + 4 * 4096


def test_qlora_8b_fits_a_24_gb_card_with_full_recompute():
    spec = preset("llama-3-8b")
    setup = TrainingSetup(seq=2048, lora=LoraSpec(rank=16), quantize="nf4")
    gpu = load_profile("4090")
    assert not estimate(spec, setup, gpu).fits
    assert estimate(spec, setup, gpu, Options(recompute=Recompute.full)).fits


def test_bad_targets_name_the_model_layers():
    setup = TrainingSetup(lora=LoraSpec(rank=8, targets=("query",)))
    with pytest.raises(MemcalcError, match="--lora-targets: no linear layer named query"):
        estimate(LLAMA, setup, GPU)
    with pytest.raises(MemcalcError, match="quantize: a quantized base is frozen"):
        TrainingSetup(quantize="nf4")


# ---- against PEFT and bitsandbytes (CPU) -------------------------------------------------


def _peft():
    pytest.importorskip("transformers")
    return pytest.importorskip("peft")


@pytest.mark.parametrize(
    "spec,lora",
    [
        (LLAMA, LoraSpec(rank=8)),
        (LLAMA, LoraSpec(rank=4, targets=("all-linear",))),
        (LLAMA, LoraSpec(rank=16, targets=("gate_proj", "down_proj"))),
        (GPT2, LoraSpec(rank=8)),
        (GPT2, LoraSpec(rank=8, targets=("c_attn", "c_fc"), modules_to_save=("lm_head",))),
        (MIXTRAL, LoraSpec(rank=8, targets=("q_proj", "v_proj"))),
        (MIXTRAL, LoraSpec(rank=8, targets=("all-linear",))),
        (QWEN2_MOE, LoraSpec(rank=8, targets=("all-linear",))),
    ],
    ids=[
        "llama-default",
        "llama-all-linear",
        "llama-mlp",
        "gpt2-default",
        "gpt2-save-head",
        "mixtral-qv",
        "mixtral-all-linear",
        "qwen2-moe-all-linear",
    ],
)
def test_trainable_parameters_equal_pefts(spec, lora):
    torch = pytest.importorskip("torch")
    _peft()
    from memcalc.measure.build import Impl, build_model
    from memcalc.measure.finetune import apply_finetune

    setup = TrainingSetup(seq=32, precision="bf16", lora=lora)
    model = apply_finetune(build_model(spec, setup, Impl.hf, torch.device("cpu")), spec, setup)
    trainable, total = model.get_nb_trainable_parameters()
    counts = setup_param_counts(spec, setup)
    assert (counts.trainable, counts.total) == (trainable, total)


@pytest.mark.parametrize("how", ["nf4", "nf4-dq", "fp4", "int8"])
def test_quantized_storage_equals_bitsandbytes(how):
    """A linear quantized by transformers' own bitsandbytes loading (measure's ``_quantize``)
    stores what ``Quantize.storage_bytes`` says."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("transformers")

    from memcalc.measure.build import Impl, build_model
    from memcalc.measure.finetune import _quantize, quant_state_tensors

    spec = load_model("tests/data/hf/tiny/llama.json")
    model = build_model(spec, TrainingSetup(precision="bf16"), Impl.hf, torch.device("cpu"))
    model = _quantize(model, Quantize(how))
    layer = model.model.layers[0].mlp.gate_proj  # (intermediate x hidden)
    assert type(layer).__name__ == ("Linear8bitLt" if how == "int8" else "Linear4bit")
    # the first forward moves LLM.int8's scales to the module's state (init_8bit_state)
    model(torch.zeros(1, 4, dtype=torch.long))
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in [*layer.parameters(), *quant_state_tensors(layer)]
    }
    out, n_in = spec.intermediate_size, spec.hidden_size
    assert sum(storages.values()) == Quantize(how).storage_bytes(out * n_in, out)


MEASURED = [
    (LLAMA, "bf16", "sdpa", LoraSpec(rank=8), {}, Recompute.none),
    (LLAMA, "bf16", "eager", LoraSpec(rank=4, targets=("all-linear",)), {}, Recompute.none),
    (LLAMA, "fp32", "sdpa", LoraSpec(rank=8, dropout=0.1), {}, Recompute.none),
    (LLAMA, "bf16", "sdpa", LoraSpec(rank=8), {"input_grads": True}, Recompute.none),
    (LLAMA, "bf16", "sdpa", LoraSpec(rank=8), {}, Recompute.full),
    (GPT2, "bf16", "eager", LoraSpec(rank=8), {}, Recompute.none),
    (GPT2, "fp32", "sdpa", LoraSpec(rank=16, targets=("c_attn", "c_fc")), {}, Recompute.none),
    (LLAMA, "bf16", "sdpa", LoraSpec(rank=8), {"quantize": "nf4"}, Recompute.none),
    (LLAMA, "bf16", "sdpa", LoraSpec(rank=8), {"quantize": "nf4-dq"}, Recompute.full),
    (MIXTRAL, "bf16", "sdpa", LoraSpec(rank=8, targets=("q_proj", "v_proj")), {}, Recompute.none),
    (MIXTRAL, "bf16", "sdpa", LoraSpec(rank=8, targets=("all-linear",)), {}, Recompute.full),
    (QWEN2_MOE, "fp32", "eager", LoraSpec(rank=8, targets=("all-linear",)), {}, Recompute.none),
    (QWEN3, "bf16", "sdpa", LoraSpec(rank=8), {}, Recompute.none),
    (DEEPSEEK_V3, "fp32", "sdpa", LoraSpec(rank=8, targets=("all-linear",)), {}, Recompute.none),
    (OLMO2, "fp32", "eager", LoraSpec(rank=8, targets=("q_proj", "v_proj")), {}, Recompute.none),
]


@pytest.mark.parametrize(
    "spec,precision,attention,lora,extra,recompute",
    MEASURED,
    ids=[
        "llama-bf16-sdpa",
        "llama-eager-all-linear",
        "llama-fp32-dropout",
        "llama-input-grads",
        "llama-full",
        "gpt2-eager",
        "gpt2-fp32-attn-mlp",
        "llama-qlora-nf4",
        "llama-qlora-dq-full",
        "mixtral-frozen-experts",
        "mixtral-all-linear-param-wrapper-full",
        "qwen2-moe-all-linear-frozen-experts",
        "qwen3-qk-norm",
        "deepseek-v3-all-linear-param-wrapper-fp32",
        "olmo2-post-norm-first-layer",
    ],
)
def test_estimate_equals_the_peft_training_step(spec, precision, attention, lora, extra, recompute):
    pytest.importorskip("torch")
    _peft()
    if "quantize" in extra:
        pytest.importorskip("bitsandbytes")
    from memcalc.measure.build import Impl
    from memcalc.measure.compare import compare, estimate_for
    from memcalc.measure.runner import measure

    setup = TrainingSetup(
        batch=2, seq=32, precision=precision, attention=attention, dropout=0.0, lora=lora, **extra
    )
    m = measure(spec, setup, impl=Impl.hf, recompute=recompute, device="cpu")
    rows = {
        r.component: r
        for r in compare(estimate_for(spec, setup, GPU, Options(recompute=recompute), m.device), m)
    }
    for exact in ("parameters", "gradients", "optimizer states"):
        assert rows[exact].estimate_bytes == rows[exact].measured_bytes, exact
    assert abs(rows["stored activations"].error) <= ACTIVATION_TOLERANCE
    assert abs(rows["peak of the step"].error) <= PEAK_TOLERANCE


def test_lora_on_moe_leaves_the_experts_frozen():
    """The analytic side of the MoE cases above, at full size: Mixtral-8x7B under LoRA trains
    the q/v adapters only, and its experts save no input for a weight gradient."""
    spec = preset("mixtral-8x7b")
    qv = LoraSpec(rank=16, targets=("q_proj", "v_proj"))
    lora = setup_param_counts(spec, TrainingSetup(seq=1024, lora=qv))
    full = setup_param_counts(spec, TrainingSetup(seq=1024))
    assert lora.trainable == 32 * 16 * ((4096 + 4096) + (4096 + 1024))  # q_proj, v_proj A + B
    assert lora.total - lora.trainable == full.total
    a = estimate(spec, TrainingSetup(seq=1024, lora=qv), GPU)
    b = estimate(spec, TrainingSetup(seq=1024), GPU)
    assert a.gradient_bytes < 10**8 < b.gradient_bytes


def test_all_linear_on_mixtral_wraps_the_fused_experts_and_the_router():
    """PEFT 0.21.2 under transformers 5 (``_convert_peft_config_moe``): all-linear on
    Mixtral-8x7B adapts q/k/v/o, and with ``lora.ParamWrapper`` the router weight (r x h +
    E x r), gate_up_proj at rank 2r (2r*E x h + 2m x 2r*E) and down_proj (r*E x m + h x r*E)."""
    spec = preset("mixtral-8x7b")
    r, h, kv, m, E = 16, 4096, 1024, 14336, 8
    setup = TrainingSetup(seq=1024, lora=LoraSpec(rank=r, targets=("all-linear",)))
    per_layer = r * (2 * (h + h) + 2 * (h + kv))  # q, o; k, v
    per_layer += r * (h + E) + 2 * r * E * (h + 2 * m) + r * E * (m + h)
    assert setup_param_counts(spec, setup).trainable == 32 * per_layer


def test_targets_peft_refuses_are_a_one_line_error(capsys):
    """PEFT refuses half of a fused pair (DeepSeek-V3's gate_proj without up_proj): the
    measure says so in one line, exit 2, instead of an internal error."""
    pytest.importorskip("torch")
    _peft()
    from memcalc.cli import main

    argv = ["measure", "--model", "tests/data/hf/tiny/deepseek_v3.json", "--framework", "hf"]
    argv += ["--batch", "1", "--seq", "8", "--lora-rank", "4", "--lora-targets", "gate_proj"]
    assert main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --lora-targets: PEFT refuses") and "\n" not in err, err
