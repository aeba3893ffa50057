"""Exact parameter counts: every preset equals the published model, as an integer."""

import json
from pathlib import Path

import pytest

from memcalc.params import count_params, param_tensors
from memcalc.spec.families import hf_config_dict
from memcalc.spec.presets import PRESETS

# Published totals (HF model cards / `sum(p.numel() for p in model.parameters())`).
EXPECTED = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "tinyllama-1.1b": 1_100_048_384,
    "llama-3.2-1b": 1_235_814_400,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-7b": 7_615_616_512,
    # the models of 2026 (issue 25): the totals of the published checkpoints (model cards'
    # parameter counts; tied embeddings once, as model.parameters() yields them)
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.2-3b": 3_212_749_824,
    "llama-3.3-70b": 70_553_706_496,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-3b": 3_085_938_688,
    "qwen2.5-14b": 14_770_033_664,
    "qwen2.5-32b": 32_763_876_352,
    "qwen2.5-72b": 72_706_203_648,
    "qwen3-0.6b": 596_049_920,
    "qwen3-1.7b": 1_720_574_976,  # tied: the 2.03B of its safetensors hold the head twice
    "qwen3-4b": 4_022_468_096,
    "qwen3-14b": 14_768_307_200,
    "qwen3-235b-a22b": 235_093_634_560,
    "gemma-3-270m": 268_098_176,
    "gemma-3-1b": 999_885_952,
    "gemma-3-12b": 11_766_034_176,  # the language model of google/gemma-3-12b-pt
    "mistral-small-24b": 23_572_403_200,
    "phi-4": 14_659_507_200,
    "olmo-2-1b": 1_484_916_736,
    "olmo-2-13b": 13_716_198_400,
    "olmo-2-32b": 32_234_279_936,
}


HF_COUNTS = json.loads((Path(__file__).parent / "data/hf/param_counts.json").read_text())["presets"]
"""Exact totals of the published configs' HF models on the meta device
(tests/data/hf/make_param_counts.py)."""
PINNED = EXPECTED | {name: c["total"] for name, c in HF_COUNTS.items()}


def test_every_preset_is_pinned():
    assert set(PRESETS) <= set(PINNED)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_parameter_count_is_exact(name):
    assert count_params(PRESETS[name]).total == PINNED[name]


@pytest.mark.hf
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_matches_hf_implementation_on_meta_device(name):
    """Build the HF model from the same sizes on the meta device and count its parameters
    and parameter tensors (tied weights once, as ``model.parameters()`` yields them)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    spec = PRESETS[name]
    cfg = dict(hf_config_dict(spec))
    cfg = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    params = list(model.parameters())
    counts = count_params(spec)
    assert sum(p.numel() for p in params) == counts.total
    assert len(params) == counts.tensors
    # Tensor by tensor: the same names and element counts as the HF implementation.
    ours = {t.name: t.numel for t in param_tensors(spec)}
    theirs = {name: p.numel() for name, p in model.named_parameters()}
    assert ours == theirs
