"""HF Llama (``modeling_llama.py``) and the families that run its ops with other sizes and
options: Mistral (explicit head_dim, sliding window) and Qwen2 (q/k/v biases, sliding layers
from ``max_window_layers``). RMSNorm in fp32, RoPE, SwiGLU, GQA; attention dropout only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.spec.families.base import (
    FamilyDef,
    HfConfig,
    Implementation,
    attention_dropout_only,
    llama_keys,
    llama_to_hf,
)
from memcalc.spec.model import Family, LayerType, ModelSpec
from memcalc.validate import FieldError

IMPL = Implementation()


def llama_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """LlamaConfig: ``attention_bias`` puts a bias on q/k/v and o, ``mlp_bias`` on the MLP."""
    c = HfConfig(cfg, source)
    bias = c.get("qkv_bias", "attention_bias", False)
    return c.spec(
        {
            **llama_keys(c, Family.llama),
            "qkv_bias": bias,
            "out_bias": c.get("out_bias", "attention_bias", False),
            "mlp_bias": c.get("mlp_bias", "mlp_bias", False),
        }
    )


def mistral_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """MistralConfig: every layer attends within ``sliding_window`` when it is set."""
    c = HfConfig(cfg, source)
    window = c.get("sliding_window", "sliding_window")
    fields = llama_keys(c, Family.mistral)
    if window is not None:
        fields |= {"sliding_window": window, "layer_pattern": (LayerType.sliding,)}
    return c.spec(fields)


def qwen2_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """Qwen2Config: q/k/v biases (no o bias); with ``use_sliding_window``, layers from
    ``max_window_layers`` on attend within ``sliding_window`` (``Qwen2Config.__init__``)."""
    c = HfConfig(cfg, source)
    fields = llama_keys(c, Family.qwen2) | {"qkv_bias": True}
    if c.flag("use_sliding_window", "use_sliding_window"):
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


def _family(family: Family, from_hf: Any, defaults: dict[str, Any]) -> FamilyDef:
    return FamilyDef(
        family=family,
        model_types=(family.value,),
        impl=IMPL,
        defaults=defaults,
        dropouts=("attention_dropout",),
        from_hf=from_hf,
        to_hf=lambda spec: llama_to_hf(spec, family.value),
        check=attention_dropout_only,
    )


FAMILIES = (
    _family(Family.llama, llama_from_hf, {}),
    _family(Family.mistral, mistral_from_hf, {}),
    _family(Family.qwen2, qwen2_from_hf, {"qkv_bias": True}),
)

PRESETS = (
    # mistralai/Mistral-Nemo-Base-2407: head_dim 128 with 32 heads, so q_proj is 5120 -> 4096
    # and o_proj 4096 -> 5120 (a*d != h); no sliding window
    ModelSpec(
        name="mistral-nemo-12b",
        family=Family.mistral,
        vocab_size=131072,
        hidden_size=5120,
        num_layers=40,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        max_position_embeddings=1024000,
    ),
    # mistralai/Mistral-Small-24B-Base-2501 (Mistral Small 3): head_dim 128 with 32 heads
    # (4096 != hidden 5120), no sliding window, 32768 positions
    ModelSpec(
        name="mistral-small-24b",
        family=Family.mistral,
        vocab_size=131072,
        hidden_size=5120,
        num_layers=40,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=32768,
        max_position_embeddings=32768,
    ),
)
