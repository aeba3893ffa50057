"""The dense families of issue 8 (qwen3, gemma2, gemma3_text, phi3, gpt_neox, opt, olmo2, and
mistral with an explicit head_dim): config.json mappings, presets, and the analytic graph against
``memcalc trace`` of the same model, byte for byte.

The trace runs HF's own implementation under FakeTensorMode (CPU kernels: LayerNorm statistics in
the input dtype), so it is compared with ``lower(..., device="cpu")``. Tiny configs are the
research ones in tests/data/hf/tiny/ (traced as config.json files: HF reads them itself) and
variants of them built through ``to_hf`` (traced as specs), chosen so that the sequence is longer
than, equal to and shorter than the sliding windows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcalc.errors import MemcalcError
from memcalc.estimate import Options, estimate, estimate_graph
from memcalc.graph.lower import lower
from memcalc.params import count_params, param_tensors
from memcalc.profiles import load_profile
from memcalc.spec.families import spec_from_hf_config
from memcalc.spec.families.base import compress_layers
from memcalc.spec.loaders import load_model
from memcalc.spec.model import LayerType, ModelSpec
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute

HF = Path(__file__).parent / "data" / "hf"
TINY = HF / "tiny"
GPU = load_profile("h100-sxm-80gb")

PRESETS = {
    # preset: its published config.json in tests/data/hf
    "qwen3-8b": "qwen3-8b",
    "qwen3-32b": "qwen3-32b",
    "gemma-2-9b": "gemma-2-9b",
    "gemma-2-27b": "gemma-2-27b",
    "gemma-3-4b": "gemma-3-4b",
    "gemma-3-27b": "gemma-3-27b",
    "phi-3-mini": "phi-3-mini",
    "pythia-6.9b": "pythia-6.9b",
    "opt-6.7b": "opt-6.7b",
    "olmo-2-7b": "olmo-2-7b",
    "mistral-nemo-12b": "mistral-nemo-12b",
}
FAMILIES = ["qwen3", "gemma2", "gemma3_text", "phi3", "gpt_neox", "opt", "olmo2", "mistral"]

PEAK_TOLERANCE = 0.001
"""Step peak from the traced graph vs the lowered one: the traced ops' gradient sizes are an
approximation (twice the largest saved tensor), so the peaks may differ slightly; 0.1%."""


# ---------------------------------------------------------------------------------------------
# config.json -> ModelSpec, presets


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_published_config_reads_as_the_preset(name):
    spec = load_model(str(HF / f"{PRESETS[name]}.json"))
    assert spec.replace(name=name) == preset(name)


def test_mistral_nemo_has_an_explicit_head_dim_end_to_end():
    """Mistral-Nemo: 32 heads of 128 = 4096 != hidden 5120 (the error of issue 8 is gone)."""
    spec = preset("mistral-nemo-12b")
    assert (spec.q_size, spec.hidden_size) == (4096, 5120)
    shapes = {t.name: t.shape for t in param_tensors(spec)[:12]}
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (4096, 5120)
    assert shapes["model.layers.0.self_attn.o_proj.weight"] == (5120, 4096)
    graph = lower(spec, TrainingSetup(batch=1, seq=128, precision="bf16"))
    sdpa = next(op for op in graph.kinds[0].ops if op.name == "attn.sdpa")
    assert sdpa.saves[0].numel == 128 * 4096  # q: tokens x a*d


@pytest.mark.hf
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_parameters_are_hf_parameters_on_meta_device(name):
    """Every parameter tensor, by HF name and shape, of the model HF builds from the preset's
    ``to_hf`` config (so the config.json mapping goes both ways)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from memcalc.spec.families import hf_config_dict

    spec = preset(name)
    cfg = dict(hf_config_dict(spec))
    cfg = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    ours = {t.name: t.numel for t in param_tensors(spec)}
    assert ours == {n: p.numel() for n, p in model.named_parameters()}
    assert count_params(spec).tensors == len(list(model.parameters()))


def test_layer_types_compress_to_first_layers_and_a_pattern():
    s, f = LayerType.sliding, LayerType.full
    gemma3 = preset("gemma-3-4b")
    assert (gemma3.first_layers, gemma3.layer_pattern) == ((), (s,) * 5 + (f,))
    assert [gemma3.layer_type(i) for i in (4, 5, 33)] == [s, f, s]
    assert compress_layers([f, f, s, s, s]) == ((f, f), (s,))
    assert compress_layers([s, f] * 21) == ((), (s, f))
    assert compress_layers([f]) == ((), (f,))


def _tiny(name: str, **changes) -> dict:
    cfg = json.loads((TINY / f"{name}.json").read_text())
    return cfg | changes


def test_qwen3_sliding_layers_follow_max_window_layers_or_layer_types():
    cfg = _tiny(
        "qwen3", use_sliding_window=True, sliding_window=8, max_window_layers=1, num_hidden_layers=4
    )
    spec = spec_from_hf_config(cfg)
    assert (spec.first_layers, spec.layer_pattern, spec.sliding_window) == (
        (LayerType.full,),
        (LayerType.sliding,),
        8,
    )
    assert spec_from_hf_config(_tiny("qwen3")).sliding_window is None  # use_sliding_window off
    types = ["sliding_attention", "full_attention"] * 2
    spec = spec_from_hf_config(cfg | {"layer_types": types})
    assert spec.layer_pattern == (LayerType.sliding, LayerType.full)


def test_gemma3_pattern_key_and_sparse_config_defaults():
    spec = spec_from_hf_config({"model_type": "gemma3_text", "sliding_window_pattern": 2})
    assert (spec.num_layers, spec.num_heads, spec.head_size, spec.vocab_size) == (
        26,
        8,
        256,
        262208,
    )
    assert spec.layer_pattern == (LayerType.sliding, LayerType.full)
    assert spec.qk_norm.value == "per_head" and spec.attention_softcap is None


@pytest.mark.parametrize(
    "cfg,message",
    [
        (_tiny("opt", do_layer_norm_before=False), "do_layer_norm_before: False is not modelled"),
        (_tiny("opt", word_embed_proj_dim=32), "word_embed_proj_dim: 32 is not modelled"),
        (_tiny("opt", layerdrop=0.1), "layerdrop: 0.1 is not modelled"),
        (
            _tiny("gemma3_text", use_bidirectional_attention=True),
            "use_bidirectional_attention: True is not modelled",
        ),
        (_tiny("gemma2", layer_types=["global"] * 4), "layer_types: unknown layer type 'global'"),
        (_tiny("gemma2", layer_types=["full_attention"]), "layer_types: lists 1 layers"),
        (_tiny("gemma3_text", sliding_window_pattern=0), "sliding_window_pattern: expected"),
        (
            _tiny("qwen3", layer_types=["sliding_attention"] * 2),
            "layer_types: sliding_attention layers need use_sliding_window",
        ),
        (_tiny("gpt_neox", rotary_pct=1.5), "rotary_pct: must be at most 1"),
        (_tiny("phi3", partial_rotary_factor=0), "partial_rotary_factor: must be greater than 0"),
        (_tiny("olmo2", num_hidden_layers=0), "num_hidden_layers: must be at least 1"),
    ],
    ids=lambda x: x if isinstance(x, str) else x["model_type"],
)
def test_config_errors_are_one_line_and_name_the_key(cfg, message):
    with pytest.raises(MemcalcError) as err:
        spec_from_hf_config(cfg, "config.json")
    text = str(err.value)
    assert "\n" not in text and text.startswith("config.json: ") and message in text


def test_gemma2_sdpa_is_refused_with_the_reason():
    """HF Gemma 2 has no SDPA path (``_supports_sdpa = False``: SDPA cannot soft-cap), so an SDPA
    estimate would describe a run HF cannot do: eager (HF's choice without flash-attn) and flash
    (flash-attention 2, CUDA) are the estimates it offers."""
    spec = preset("gemma-2-9b")
    with pytest.raises(MemcalcError, match="--attention sdpa: the HF gemma2 implementation"):
        lower(spec, TrainingSetup(batch=1, seq=1024))
    for attention in ("eager", "flash"):
        assert lower(spec, TrainingSetup(batch=1, seq=1024, attention=attention)).saved_bytes


def test_gemma2_flash_saves_what_a_fused_kernel_saves():
    """flash-attention 2 takes the soft-cap and the window in the kernel (no mask, k and v not
    repeated). Per token and layer, bf16: four ``1 + w`` norms 4 x (8h + 4), q/k/v and MLP
    inputs 2h + 2h, q 2ad + k 2gd + v 2gd + out 2ad + logsumexp 4a, the GeGLU 8m; per layer the
    four fp32 ``1 + w`` vectors 16h (families.md, gemma2)."""
    spec = spec_from_hf_config(_tiny("gemma2"))
    b, s = 2, 32  # s > window (8)
    h, a, g, d, m = 64, 4, 2, 32, 128
    blk = lower(spec, TrainingSetup(batch=b, seq=s, precision="bf16", attention="flash")).kinds
    per_token = 4 * (8 * h + 4) + 4 * h + 4 * a * d + 4 * g * d + 4 * a + 8 * m
    assert {k.saved_bytes for k in blk} == {b * s * per_token + 16 * h}


def test_sequence_equal_to_the_window_gets_a_mask():
    """HF keeps the sliding mask once kv_length >= the window (``_ignore_causal_mask_sdpa``):
    at s == window SDPA saves an additive (b, 1, s, s) mask and GQA is done by repeat_kv."""
    spec = spec_from_hf_config(
        _tiny("qwen3", use_sliding_window=True, sliding_window=8, max_window_layers=0)
    )

    def layer(seq: int) -> int:
        return lower(spec, TrainingSetup(batch=2, seq=seq, precision="bf16")).kinds[0].saved_bytes

    per_token = (layer(8) / 8 - layer(7) / 7) * 2  # the two differ only by the mask and repeats
    assert per_token > 0
    setup = TrainingSetup(batch=2, seq=8, precision="bf16")
    extra = lower(spec, setup).checkpoint_extra_inputs
    assert {t.name: t.nbytes for t in extra}["sdpa_sliding_mask"] == 8 * 8


# ---------------------------------------------------------------------------------------------
# The analytic graph against the trace of HF's implementation


def _cases():
    """(family, variant, precision, attention, b, s, slow): per family both kernels in bf16, one
    in fp32 and autocast; variants at a sequence above, at and below their windows. The rest of
    the grid (fp32 eager, odd shapes) is marked slow."""
    out = []
    for fam in FAMILIES:
        attentions = ["eager"] if fam == "gemma2" else ["eager", "sdpa"]
        fused = attentions[-1]
        for attention in attentions:
            out.append((fam, None, "bf16", attention, 2, 16, False))
            out.append((fam, None, "fp32", attention, 2, 16, attention != fused))
            out.append((fam, None, "bf16", attention, 3, 5, True))
        out.append((fam, None, "amp-bf16", fused, 1, 24, False))
    variants = {
        # sliding from layer 1, window 8: s above, at and below the window
        "qwen3-sliding": ("qwen3", {"use_sliding_window": True, "sliding_window": 8,
                                    "max_window_layers": 1, "num_hidden_layers": 3}),
        # MHA with every dropout: v pins the qkv buffer (SDPA) or is copied (eager matmul)
        "phi3-mha-dropout": ("phi3", {"num_key_value_heads": 4, "resid_pdrop": 0.1,
                                      "attention_dropout": 0.1, "partial_rotary_factor": 1.0}),
        "neox-sequential-dropout": ("gpt_neox", {"use_parallel_residual": False,
                                                 "hidden_dropout": 0.1,
                                                 "attention_dropout": 0.1}),
        "mistral-window": ("mistral", {"sliding_window": 8}),
        "gemma3-long": ("gemma3_text", {}),
    }  # fmt: skip
    for name, (fam, changes) in variants.items():
        for precision, attention, b, s, slow in [
            ("bf16", "sdpa", 2, 16, False),
            ("bf16", "sdpa", 2, 8, False),
            ("bf16", "eager", 2, 16, False),
            ("bf16", "sdpa", 1, 7, True),
            ("amp-bf16", "sdpa", 2, 32, True),
        ]:
            out.append((fam, (name, changes), precision, attention, b, s, slow))
    return [
        pytest.param(*case[:-1], marks=[pytest.mark.slow] if case[-1] else [], id=_id(case))
        for case in out
    ]


def _id(case):
    fam, variant, precision, attention, b, s = case[:6]
    return f"{variant[0] if variant else fam}-{precision}-{attention}-b{b}s{s}"


CASES = _cases()


@pytest.mark.hf
@pytest.mark.parametrize("fam,variant,precision,attention,b,s", CASES)
def test_traced_hf_graph_equals_the_lowering(fam, variant, precision, attention, b, s):
    pytest.importorskip("transformers")
    from memcalc.measure.build import Impl
    from memcalc.measure.trace import trace_spec, trace_target

    setup = TrainingSetup(batch=b, seq=s, precision=precision, attention=attention)
    if variant is None:
        path = str(TINY / f"{fam}.json")
        spec, trace = load_model(path), trace_target(path, setup)
    else:
        spec = spec_from_hf_config(_tiny(fam, **variant[1]))
        trace = trace_spec(spec, setup, Impl.hf)
    want, got = lower(spec, setup, device="cpu"), trace.graph
    assert trace.dead_branch_bytes == 0
    assert got.num_layers == want.num_layers == spec.num_layers
    assert got.prologue_saved_bytes == want.prologue_saved_bytes
    assert got.epilogue_saved_bytes == want.epilogue_saved_bytes
    for i, (g, w) in enumerate(zip(got.per_layer(), want.per_layer(), strict=True)):
        assert g.saved_bytes == w.saved_bytes, f"layer {i}"
        assert g.input.nbytes == w.input.nbytes
        assert g.selective_saved_bytes == w.selective_saved_bytes, f"layer {i}"
        assert g.bytes_by_component() == w.bytes_by_component(), f"layer {i}"
    assert (got.logits.numel, got.logits.dtype) == (want.logits.numel, want.logits.dtype)
    extra = sorted((t.numel, t.dtype) for t in got.checkpoint_extra_inputs)
    assert extra == sorted((t.numel, t.dtype) for t in want.checkpoint_extra_inputs)
    assert trace.counts == count_params(spec)
    for rc in (Recompute.none, Recompute.selective, Recompute.full):
        options = Options(recompute=rc)
        traced = estimate_graph(spec.name, got, trace.counts, setup, GPU, options)
        lowered = estimate(spec, setup, GPU, options, graph=want)
        assert traced.activation_bytes == lowered.activation_bytes, rc
        peak, expected = traced.peak.total_bytes, lowered.peak.total_bytes
        assert abs(peak - expected) <= PEAK_TOLERANCE * expected, (rc, peak, expected)


# ---------------------------------------------------------------------------------------------
# The estimate of every published config.json, torch-free


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_estimate_of_the_published_config(name, capsys):
    from memcalc.cli import main

    args = ["estimate", "--model", str(HF / f"{PRESETS[name]}.json"), "--format", "json"]
    if name.startswith("gemma-2"):
        # SDPA asked for explicitly is refused as HF refuses it; by default eager runs, said
        code = main([*args, "--attention", "sdpa"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "--attention sdpa" in err[0]
        assert main(args) == 0
        captured = capsys.readouterr()
        assert "note: --attention: using eager" in captured.err
        assert json.loads(captured.out)["attention"] == "eager"
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["parameter_count"] == count_params(preset(name)).total


def test_spec_file_of_a_new_family_takes_its_defaults():
    spec = ModelSpec(
        name="toy-neox", family="gpt_neox", vocab_size=128, hidden_size=64, num_layers=2,
        num_heads=4, intermediate_size=256,
    )  # fmt: skip
    assert spec.parallel_residual and spec.rotary_dim == 4 and spec.norm.value == "layer_norm"
