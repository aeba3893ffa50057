"""HF Llama (``modeling_llama.py``) and the families that run its ops with other sizes and
options: Mistral (explicit head_dim, sliding window) and Qwen2 (q/k/v biases, sliding layers
from ``max_window_layers``). RMSNorm in fp32, RoPE, SwiGLU, GQA; attention dropout only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.spec.families.base import FamilyDef, HfConfig, Implementation
from memcalc.spec.model import Family, LayerType, ModelSpec
from memcalc.validate import FieldError

IMPL = Implementation()


def _common(c: HfConfig, family: Family) -> dict[str, Any]:
    return {
        "name": c.name(),
        "family": family,
        "vocab_size": c.require("vocab_size", "vocab_size"),
        "hidden_size": c.require("hidden_size", "hidden_size"),
        "num_layers": c.require("num_layers", "num_hidden_layers"),
        "num_heads": c.require("num_heads", "num_attention_heads"),
        "num_kv_heads": c.get("num_kv_heads", "num_key_value_heads"),
        "head_dim": c.get("head_dim", "head_dim"),
        "intermediate_size": c.require("intermediate_size", "intermediate_size"),
        "max_position_embeddings": c.get(
            "max_position_embeddings", "max_position_embeddings", 2048
        ),
        "activation": c.get("activation", "hidden_act", "silu"),
        "tie_embeddings": c.get("tie_embeddings", "tie_word_embeddings", False),
        "attention_dropout": c.get("attention_dropout", "attention_dropout", 0.0),
    }


def llama_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """LlamaConfig: ``attention_bias`` puts a bias on q/k/v and o, ``mlp_bias`` on the MLP."""
    c = HfConfig(cfg, source)
    bias = c.get("qkv_bias", "attention_bias", False)
    return c.spec(
        {
            **_common(c, Family.llama),
            "qkv_bias": bias,
            "out_bias": c.get("out_bias", "attention_bias", False),
            "mlp_bias": c.get("mlp_bias", "mlp_bias", False),
        }
    )


def mistral_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """MistralConfig: every layer attends within ``sliding_window`` when it is set."""
    c = HfConfig(cfg, source)
    window = c.get("sliding_window", "sliding_window")
    fields = _common(c, Family.mistral)
    if window is not None:
        fields |= {"sliding_window": window, "layer_pattern": (LayerType.sliding,)}
    return c.spec(fields)


def qwen2_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """Qwen2Config: q/k/v biases (no o bias); with ``use_sliding_window``, layers from
    ``max_window_layers`` on attend within ``sliding_window`` (``Qwen2Config.__init__``)."""
    c = HfConfig(cfg, source)
    fields = _common(c, Family.qwen2) | {"qkv_bias": True}
    if c.get("use_sliding_window", "use_sliding_window", False) is True:
        window = c.require("sliding_window", "sliding_window")
        first = c.get("first_layers", "max_window_layers", 0)
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise FieldError("max_window_layers", f"expected a layer count, got {first!r}", source)
        n = fields["num_layers"]
        full = min(first, n) if isinstance(n, int) else 0
        fields |= {
            "sliding_window": window,
            "first_layers": (LayerType.full,) * full,
            "layer_pattern": (LayerType.sliding,),
        }
    return c.spec(fields)


def _to_hf(spec: ModelSpec, model_type: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model_type": model_type,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.mlp_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "hidden_act": spec.activation.value,
        "tie_word_embeddings": spec.tie_embeddings,
        "attention_dropout": spec.attention_dropout,
        "use_cache": False,
    }
    if model_type == "llama":
        if spec.qkv_bias != spec.out_bias:
            raise MemcalcError(
                "--impl hf: LlamaConfig puts one attention_bias on q/k/v and o; q/k/v bias "
                "without an output bias is Qwen2 (family = qwen2)"
            )
        out |= {"attention_bias": spec.qkv_bias, "mlp_bias": spec.mlp_bias}
    if spec.sliding_window is not None:
        out["sliding_window"] = spec.sliding_window
        if model_type == "qwen2":
            out |= {"use_sliding_window": True, "max_window_layers": len(spec.first_layers)}
    return out


def _attention_dropout_only(spec: ModelSpec) -> None:
    if spec.embedding_dropout or spec.residual_dropout:
        raise FieldError(
            "residual_dropout",
            f"the {spec.family.value} implementation has attention dropout only; "
            "embedding_dropout and residual_dropout must be 0",
        )


def _family(family: Family, from_hf: Any, defaults: dict[str, Any]) -> FamilyDef:
    return FamilyDef(
        family=family,
        model_types=(family.value,),
        impl=IMPL,
        defaults=defaults,
        dropouts=("attention_dropout",),
        from_hf=from_hf,
        to_hf=lambda spec: _to_hf(spec, family.value),
        check=_attention_dropout_only,
    )


FAMILIES = (
    _family(Family.llama, llama_from_hf, {}),
    _family(Family.mistral, mistral_from_hf, {}),
    _family(Family.qwen2, qwen2_from_hf, {"qkv_bias": True}),
)
