"""HF Qwen3 (``modeling_qwen3.py``): the Llama layer plus an RMSNorm over each head's d features
of q and of k, after the head view and before RoPE (``Qwen3Attention.forward``:
``q_norm(q_proj(x).view(b, s, a, d))``); an explicit head_dim (a*d need not be h: Qwen3-32B has
64 x 128 = 8192 for h = 5120); one ``attention_bias`` for q/k/v and o; sliding-window layers from
``layer_types``, else ``use_sliding_window`` with ``max_window_layers``
(``Qwen3Config.__post_init__``). Attention dropout only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.spec.families.base import (
    FamilyDef,
    HfConfig,
    Implementation,
    attention_dropout_only,
    compress_layers,
    hf_layer_types,
    llama_keys,
    llama_to_hf,
)
from memcalc.spec.model import Family, LayerType, ModelSpec, QkNorm

IMPL = Implementation()

DEFAULTS: dict[str, Any] = {"qk_norm": QkNorm.per_head}

HEAD_DIM = 128
"""Qwen3Config's head_dim when config.json leaves it out."""
MAX_WINDOW_LAYERS = 28
"""Qwen3Config's max_window_layers when config.json leaves it out."""
SLIDING_WINDOW = 4096
"""Qwen3Config's sliding_window when config.json leaves it out."""


def qwen_sliding_layers(c: HfConfig, num_layers: Any) -> dict[str, Any]:
    """The window and layer types of a Qwen2/Qwen3 config: ``layer_types`` when given, else
    layers ``max_window_layers`` and later slide -- both only with ``use_sliding_window``
    (otherwise HF sets ``sliding_window = None`` and every layer attends fully)."""
    if not isinstance(num_layers, int) or isinstance(num_layers, bool):
        return {}  # the spec names the bad num_hidden_layers
    use = c.flag("sliding_window", "use_sliding_window")
    window = c.get("sliding_window", "sliding_window", SLIDING_WINDOW) if use else None
    types = c.layer_types(num_layers)
    if window is None:
        if types is not None and LayerType.sliding in types:
            raise c.error(
                "layer_types",
                "sliding_attention layers need use_sliding_window: true and a sliding_window",
            )
        return {}
    if types is None:
        first = c.get("first_layers", "max_window_layers", MAX_WINDOW_LAYERS)
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise c.error("max_window_layers", f"expected a layer count, got {first!r}")
        types = tuple(LayerType.full if i < first else LayerType.sliding for i in range(num_layers))
    first_layers, pattern = compress_layers(types)
    return {"sliding_window": window, "first_layers": first_layers, "layer_pattern": pattern}


def from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """Qwen3Config keys (Llama's, ``head_dim`` 128 when absent, ``attention_bias``)."""
    c = HfConfig(cfg, source)
    fields = {
        **DEFAULTS,
        **llama_keys(c, Family.qwen3),
        "head_dim": c.get("head_dim", "head_dim", HEAD_DIM),
        "qkv_bias": c.get("qkv_bias", "attention_bias", False),
        "out_bias": c.get("out_bias", "attention_bias", False),
    }
    return c.spec(fields | qwen_sliding_layers(c, fields["num_layers"]))


def to_hf(spec: ModelSpec) -> dict[str, Any]:
    if spec.qkv_bias != spec.out_bias:
        raise MemcalcError(
            "--framework hf: Qwen3Config puts one attention_bias on q/k/v and o; "
            "qkv_bias and out_bias must be equal"
        )
    out = llama_to_hf(spec, "qwen3") | {"attention_bias": spec.qkv_bias}
    if spec.sliding_window is not None:
        out |= {"use_sliding_window": True, "layer_types": hf_layer_types(spec)}
    return out


def _check(spec: ModelSpec) -> None:
    attention_dropout_only(spec)


FAMILIES = (
    FamilyDef(
        family=Family.qwen3,
        model_types=("qwen3",),
        impl=IMPL,
        defaults=DEFAULTS,
        dropouts=("attention_dropout",),
        from_hf=from_hf,
        to_hf=to_hf,
        check=_check,
    ),
)


def _qwen3(
    name: str, hidden: int, layers: int, heads: int, intermediate: int, *, tied: bool = False
) -> ModelSpec:
    # Qwen/Qwen3-*: vocab 151936, 8 kv heads of 128, 40960 positions, no sliding window; the
    # models up to 4B tie their embeddings
    return ModelSpec(
        tie_embeddings=tied,
        name=name,
        family=Family.qwen3,
        vocab_size=151936,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=intermediate,
        max_position_embeddings=40960,
    )


PRESETS = (
    _qwen3("qwen3-0.6b", 1024, 28, 16, 3072, tied=True),
    _qwen3("qwen3-1.7b", 2048, 28, 16, 6144, tied=True),
    _qwen3("qwen3-4b", 2560, 36, 32, 9728, tied=True),
    _qwen3("qwen3-8b", 4096, 36, 32, 12288),
    _qwen3("qwen3-14b", 5120, 40, 40, 17408),
    _qwen3("qwen3-32b", 5120, 64, 64, 25600),
)
