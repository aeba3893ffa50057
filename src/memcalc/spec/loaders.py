"""Load a ModelSpec from a preset name, a memcalc TOML/JSON spec file, or an HF config.json.

Errors are MemcalcError with one line naming the file, the field and what is allowed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.spec.model import ModelSpec
from memcalc.spec.presets import PRESETS, preset
from memcalc.spec.training import TrainingSetup
from memcalc.validate import FieldError, parse

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HF_FAMILIES = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "llama"}
"""HF ``model_type`` values memcalc reads, and the family whose ops they follow."""


def read_data_file(path: Path) -> dict[str, Any]:
    """Parse a .toml or .json file into a dict; malformed files give a one-line error."""
    if not path.is_file():
        raise MemcalcError(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise MemcalcError(f"{path}: malformed {path.suffix.lstrip('.').upper()}: {e}") from None
    if not isinstance(data, dict):
        raise MemcalcError(f"{path}: expected a table/object at the top level")
    return data


def load_model(name_or_path: str) -> ModelSpec:
    """A preset by name, or a spec / HF config.json file by path."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if path.suffix not in (".toml", ".json"):
        return preset(name_or_path)  # raises the "unknown value; choose one of" error
    data = read_data_file(path)
    if "model_type" in data:
        return spec_from_hf_config(data, source=str(path))
    return parse(ModelSpec, {"name": path.stem, **data}, str(path))


def spec_from_hf_config(cfg: dict[str, Any], source: str = "config.json") -> ModelSpec:
    """Read the sizes an HF ``config.json`` of the GPT-2, Llama, Mistral or Qwen2 family gives.

    >>> spec_from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
    ...                      "vocab_size": 50257}).hidden_size
    768
    """
    model_type = cfg.get("model_type")
    if model_type not in HF_FAMILIES:
        raise MemcalcError(
            f"{source}: model_type: unsupported value {model_type!r}; "
            f"memcalc reads: {', '.join(HF_FAMILIES)} (use `memcalc trace` for others)"
        )
    family = HF_FAMILIES[model_type]
    name = (cfg.get("_name_or_path") or Path(source).parent.name or model_type) or model_type
    try:
        if family == "gpt2":
            act = cfg.get("activation_function", "gelu_new")
            fields: dict[str, Any] = dict(
                name=name,
                family="gpt2",
                vocab_size=cfg["vocab_size"],
                hidden_size=cfg["n_embd"],
                num_layers=cfg["n_layer"],
                num_heads=cfg["n_head"],
                intermediate_size=cfg.get("n_inner"),
                max_position_embeddings=cfg.get("n_positions", 1024),
                activation="gelu_new" if act == "gelu_new" else act,
                tie_embeddings=cfg.get("tie_word_embeddings", True),
                embedding_dropout=cfg.get("embd_pdrop", 0.1),
                attention_dropout=cfg.get("attn_pdrop", 0.1),
                residual_dropout=cfg.get("resid_pdrop", 0.1),
            )
        else:
            heads = cfg["num_attention_heads"]
            head_dim = cfg.get("head_dim")
            if head_dim is not None and head_dim * heads != cfg["hidden_size"]:
                raise MemcalcError(
                    f"{source}: head_dim: {head_dim} x {heads} heads != hidden_size "
                    f"{cfg['hidden_size']}; memcalc supports head_dim = hidden_size / heads"
                )
            qkv_bias = cfg.get("attention_bias", model_type == "qwen2")
            fields = dict(
                name=name,
                family="llama",
                vocab_size=cfg["vocab_size"],
                hidden_size=cfg["hidden_size"],
                num_layers=cfg["num_hidden_layers"],
                num_heads=heads,
                num_kv_heads=cfg.get("num_key_value_heads") or heads,
                intermediate_size=cfg["intermediate_size"],
                max_position_embeddings=cfg.get("max_position_embeddings", 2048),
                activation=cfg.get("hidden_act", "silu"),
                tie_embeddings=cfg.get("tie_word_embeddings", False),
                qkv_bias=qkv_bias,
                out_bias=cfg.get("attention_bias", False),
                mlp_bias=cfg.get("mlp_bias", False),
                attention_dropout=cfg.get("attention_dropout", 0.0),
            )
        return parse(ModelSpec, fields, source)
    except KeyError as e:
        raise MemcalcError(
            f"{source}: missing key {e.args[0]!r} for model_type {model_type}"
        ) from None


FLAGS = {"optimizer_foreach": "--foreach/--no-foreach"}
"""TrainingSetup fields whose command-line flag is not ``--`` + the field name."""


def training_setup(**fields: Any) -> TrainingSetup:
    """A TrainingSetup from command-line values; a bad value names its flag."""
    try:
        return parse(TrainingSetup, fields)
    except FieldError as e:
        flag = FLAGS.get(e.field, "--" + e.field.replace("_", "-"))
        raise FieldError(flag, e.problem) from None
