"""config.json keys as current transformers writes them (issue 25): every config class's
``attribute_map`` read both ways (the alias and the canonical name), files written by
transformers 5.24's own config classes (``XConfig(...).to_json_file``) for every family, and
boolean keys that take JSON true / false only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcalc.errors import MemcalcError
from memcalc.spec.families import family_modules, hf_config_dict, spec_from_hf_config
from memcalc.spec.model import Family, ModelSpec
from memcalc.spec.presets import PRESETS

HF = Path(__file__).parent / "data" / "hf"
TINY = HF / "tiny"


def _same(a: ModelSpec, b: ModelSpec) -> bool:
    """Equal but for the name, and an explicit head_dim equal to hidden / heads."""
    return a.replace(name="x", head_dim=a.head_size) == b.replace(name="x", head_dim=b.head_size)


def _family_defs():
    return [fam for m in family_modules() for fam in m.FAMILIES]


def _one_preset_per_family() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, spec in sorted(PRESETS.items()):
        out.setdefault(spec.family.value, name)
    return out


def test_every_family_has_a_preset_to_write():
    assert set(_one_preset_per_family()) == {f.value for f in Family}


@pytest.mark.hf
@pytest.mark.parametrize("fam", _family_defs(), ids=lambda f: f.family.value)
def test_attribute_maps_are_the_config_classes(fam):
    transformers = pytest.importorskip("transformers")
    for model_type in fam.model_types:
        cls = transformers.CONFIG_MAPPING[model_type]
        assert dict(fam.attribute_map) == dict(cls.attribute_map), model_type


def _write_with_transformers(spec: ModelSpec, path: Path) -> dict:
    transformers = pytest.importorskip("transformers")
    cfg = dict(hf_config_dict(spec))
    cls = transformers.CONFIG_MAPPING[cfg.pop("model_type")]
    cls(**cfg).to_json_file(str(path))
    return json.loads(path.read_text())


@pytest.mark.hf
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_config_written_by_transformers_reads_as_the_preset(name, tmp_path):
    spec = PRESETS[name]
    written = _write_with_transformers(spec, tmp_path / "config.json")
    assert _same(spec_from_hf_config(written, "config.json"), spec)


@pytest.mark.hf
@pytest.mark.parametrize("path", sorted(TINY.glob("*.json")), ids=lambda p: p.stem)
def test_tiny_config_rewritten_by_transformers_reads_the_same(path, tmp_path):
    """The research tiny configs (sliding windows, dense-first layers, shared experts), read,
    written back by the config class and read again."""
    spec = spec_from_hf_config(json.loads(path.read_text()), str(path))
    written = _write_with_transformers(spec, tmp_path / "config.json")
    assert _same(spec_from_hf_config(written, "config.json"), spec)


@pytest.mark.hf
def test_qwen3_moe_written_by_transformers_says_num_local_experts(tmp_path):
    """The case of the issue: Qwen3MoeConfig.to_json_file writes the canonical name."""
    written = _write_with_transformers(PRESETS["qwen3-30b-a3b"], tmp_path / "config.json")
    assert written["num_local_experts"] == 128 and "num_experts" not in written


ALIASES = [
    # (published config, alias in it, canonical name)
    ("qwen3-30b-a3b", "num_experts", "num_local_experts"),
    ("mixtral-8x7b", "num_local_experts", "num_experts"),
    ("deepseek-v3", "n_routed_experts", "num_local_experts"),
    ("deepseek-v2-lite", "n_routed_experts", "num_experts"),
]


@pytest.mark.parametrize(("name", "key", "other"), ALIASES)
def test_either_spelling_reads_the_same(name, key, other):
    cfg = json.loads((HF / f"{name}.json").read_text())
    spec = spec_from_hf_config(cfg, "config.json")
    renamed = {other if k == key else k: v for k, v in cfg.items()}
    assert spec_from_hf_config(renamed, "config.json") == spec
    assert spec.moe is not None and spec.moe.num_experts == cfg[key]


def test_gpt2_reads_the_canonical_names_too():
    short = {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12}
    canonical = {
        "model_type": "gpt2",
        "vocab_size": 50257,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "max_position_embeddings": 1024,
    }
    assert spec_from_hf_config(canonical, "c.json") == spec_from_hf_config(short, "c.json")
    assert spec_from_hf_config(canonical, "gpt2.json") == PRESETS["gpt2"]


def test_errors_name_the_key_as_the_file_spells_it():
    cfg = json.loads((HF / "qwen3-30b-a3b.json").read_text())
    canonical = {("num_local_experts" if k == "num_experts" else k): v for k, v in cfg.items()}
    with pytest.raises(MemcalcError, match=r"^config.json: num_local_experts: must be at least 1"):
        spec_from_hf_config(canonical | {"num_local_experts": 0}, "config.json")
    without = {k: v for k, v in canonical.items() if k != "num_local_experts"}
    with pytest.raises(
        MemcalcError, match=r"^config.json: num_experts \(or num_local_experts\): missing"
    ):
        spec_from_hf_config(without, "config.json")


BOOLEAN_KEYS = [
    # (config, a boolean key the family reads)
    ("llama-2-7b-config", "attention_bias"),
    ("tiny/qwen3", "attention_bias"),
    ("tiny/qwen3", "use_sliding_window"),
    ("tiny/qwen3_moe", "use_sliding_window"),
    ("tiny/qwen2_moe", "use_sliding_window"),
    ("tiny/gemma3_text", "use_bidirectional_attention"),
    ("tiny/olmo2", "attention_bias"),
    ("tiny/gpt_neox", "use_parallel_residual"),
    ("tiny/opt", "do_layer_norm_before"),
    ("tiny/opt", "enable_bias"),
    ("tiny/deepseek_v3", "output_router_logits"),
    ("tiny/deepseek_v2", "norm_topk_prob"),
    ("tiny/mixtral", "output_router_logits"),
]


def _config(name: str) -> dict:
    base = HF if name.startswith("tiny/") else HF.parent
    return json.loads((base / f"{name}.json").read_text())


@pytest.mark.parametrize(("name", "key"), BOOLEAN_KEYS)
@pytest.mark.parametrize("value", [1.5, -1, 1, "yes"])
def test_boolean_keys_take_true_or_false_only(name, key, value):
    with pytest.raises(MemcalcError, match=rf"^config.json: {key}: expected true or false"):
        spec_from_hf_config(_config(name) | {key: value}, "config.json")


def test_a_vision_language_config_reads_its_language_model():
    """gemma3 / mistral3 checkpoints nest the language model under text_config."""
    text = json.loads((HF / "gemma-3-4b.json").read_text())
    text = text.get("text_config", text)
    nested = {"model_type": "gemma3", "text_config": text, "vision_config": {"hidden_size": 1}}
    assert _same(spec_from_hf_config(nested, "config.json"), PRESETS["gemma-3-4b"])


@pytest.mark.hf
def test_llama_31_config_with_llama3_rope_scaling_reads_as_the_preset(tmp_path):
    """meta-llama/Llama-3.1-8B's config.json: rope_scaling of rope_type llama3 (factor 8 over
    8192 original positions) changes the rotary frequencies only, so it reads as the preset."""
    transformers = pytest.importorskip("transformers")
    cfg = dict(hf_config_dict(PRESETS["llama-3.1-8b"]))
    del cfg["model_type"]
    rope = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_theta": 500000.0,
    }
    path = tmp_path / "config.json"
    transformers.LlamaConfig(**cfg, rope_parameters=rope).to_json_file(str(path))
    written = json.loads(path.read_text())
    assert "llama3" in json.dumps(written)
    assert _same(spec_from_hf_config(written, str(path)), PRESETS["llama-3.1-8b"])


@pytest.mark.hf
@pytest.mark.parametrize("name", sorted(_one_preset_per_family().values()))
def test_config_saved_by_save_pretrained_reads_as_the_preset(name, tmp_path):
    """``save_pretrained`` writes only the keys that differ from the class defaults
    (``to_json_file(use_diff=True)``), in canonical names: one preset per family reads back
    the same."""
    transformers = pytest.importorskip("transformers")
    spec = PRESETS[name]
    cfg = dict(hf_config_dict(spec))
    transformers.CONFIG_MAPPING[cfg.pop("model_type")](**cfg).save_pretrained(str(tmp_path))
    written = json.loads((tmp_path / "config.json").read_text())
    assert _same(spec_from_hf_config(written, "config.json"), spec)
