"""HF OLMo 2 (``modeling_olmo2.py``): the Llama layer with its norms moved after the sublayers
and no pre-norm -- ``x + post_attention_layernorm(attn(x))``, ``x + post_feedforward_layernorm(
mlp(x))`` (``Olmo2DecoderLayer.forward``) -- an RMSNorm that multiplies by its weight in fp32
(``Olmo2RMSNorm``: ``(weight * x_fp32).to(dtype)``), RMSNorms on the whole q and k projections
before the head view (``q_norm(q_proj(x))``, over a*d and g*d features), cos/sin kept in fp32
(``Olmo2RotaryEmbedding.forward``) and RoPE's output cast back to q's dtype. Attention dropout
only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.spec.families.base import (
    FamilyDef,
    HfConfig,
    Implementation,
    attention_dropout_only,
    llama_keys,
    llama_to_hf,
)
from memcalc.spec.model import Family, ModelSpec, Norm, NormPlacement, QkNorm

IMPL = Implementation(
    rotary_tables_fp32=True,
    rotary_keeps_q_dtype=True,
    # no "olmo2" key in peft 0.21.2 utils/constants.py
    # TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    lora_targets=None,
)

DEFAULTS: dict[str, Any] = {
    "norm": Norm.rms_norm_fp32_weight,
    "norm_placement": NormPlacement.post,
    "qk_norm": QkNorm.whole,
}


def from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """Olmo2Config keys: Llama's and ``attention_bias`` (q/k/v and o)."""
    c = HfConfig(cfg, source)
    return c.spec(
        {
            **DEFAULTS,
            **llama_keys(c, Family.olmo2),
            "qkv_bias": c.get("qkv_bias", "attention_bias", False),
            "out_bias": c.get("out_bias", "attention_bias", False),
        }
    )


def to_hf(spec: ModelSpec) -> dict[str, Any]:
    if spec.qkv_bias != spec.out_bias:
        raise MemcalcError(
            "--framework hf: Olmo2Config puts one attention_bias on q/k/v and o; "
            "qkv_bias and out_bias must be equal"
        )
    return llama_to_hf(spec, "olmo2") | {"attention_bias": spec.qkv_bias}


FAMILIES = (
    FamilyDef(
        family=Family.olmo2,
        model_types=("olmo2",),
        impl=IMPL,
        defaults=DEFAULTS,
        dropouts=("attention_dropout",),
        from_hf=from_hf,
        to_hf=to_hf,
        check=attention_dropout_only,
    ),
)


def _olmo2(name: str, hidden: int, layers: int, heads: int, kv: int, width: int) -> ModelSpec:
    # allenai/OLMo-2-*: vocab 100352, 4096 positions, untied
    return ModelSpec(
        name=name,
        family=Family.olmo2,
        vocab_size=100352,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        intermediate_size=width,
        max_position_embeddings=4096,
    )


PRESETS = (
    _olmo2("olmo-2-1b", 2048, 16, 16, 16, 8192),  # allenai/OLMo-2-0425-1B
    _olmo2("olmo-2-7b", 4096, 32, 32, 32, 11008),  # allenai/OLMo-2-1124-7B
    _olmo2("olmo-2-13b", 5120, 40, 40, 40, 13824),  # allenai/OLMo-2-1124-13B
    _olmo2("olmo-2-32b", 5120, 64, 40, 8, 27648),  # allenai/OLMo-2-0325-32B: GQA
)
