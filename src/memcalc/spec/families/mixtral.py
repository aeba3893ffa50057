"""HF Mixtral (``modeling_mixtral.py``): Mistral's attention (GQA, RoPE, an optional sliding
window) with every MLP a mixture of experts -- ``MixtralTopKRouter`` (softmax in fp32, top-k,
always renormalised; the weights stay fp32) and ``MixtralExperts`` (SwiGLU experts of width
``intermediate_size``, fused 3-D weights, run by the ``grouped_mm`` experts implementation).
``output_router_logits`` adds the load-balancing loss (``load_balancing_loss_func``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.spec.families.base import (
    FamilyDef,
    HfConfig,
    Implementation,
    attention_dropout_only,
    attention_to_hf,
    llama_attention,
    require,
)
from memcalc.spec.model import Family, LayerType, ModelSpec, MoeSpec, QkNorm, Router
from memcalc.spec.peft_lora import MIXTRAL_LAYOUT

# peft utils/transformers_weight_conversion.py: _MODEL_TO_CONVERSION_PATTERN["mixtral"] = "mixtral"
IMPL = Implementation(peft_moe=MIXTRAL_LAYOUT)


def mixtral_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """MixtralConfig: ``num_local_experts`` experts of width ``intermediate_size``,
    ``num_experts_per_tok`` per token; ``sliding_window`` (when set) on every layer."""
    c = HfConfig(cfg, source)
    fields = llama_attention(c, Family.mixtral)
    width = c.require("intermediate_size", "intermediate_size")
    window = c.get("sliding_window", "sliding_window")
    moe = {
        "num_experts": c.require("moe.num_experts", "num_local_experts"),
        "top_k": c.get("moe.top_k", "num_experts_per_tok", 2),
        "expert_size": width,
        "norm_topk_prob": True,  # MixtralTopKRouter always renormalises
        "aux_loss": c.get("moe.aux_loss", "output_router_logits", False),
        "router_jitter": c.get("moe.router_jitter", "router_jitter_noise", 0.0),
    }
    kind = LayerType.sliding_moe if window is not None else LayerType.full_moe
    fields |= {"intermediate_size": width, "moe": moe, "layer_pattern": (kind,)}
    if window is not None:
        fields["sliding_window"] = window
    return c.spec(fields)


def mixtral_to_hf(spec: ModelSpec) -> dict[str, Any]:
    moe = spec.moe
    require(moe is not None, "mixtral", "no MoE")
    assert moe is not None
    types = set(spec.first_layers) | set(spec.layer_pattern)
    require(all(t.is_moe for t in types), "mixtral", "every layer is an MoE layer")
    require(len({t.is_sliding for t in types}) == 1, "mixtral", "one attention span for all")
    require(
        moe.shared_size == 0
        and moe.router is Router.softmax
        and moe.norm_topk_prob
        and not (moe.router_fp32 or moe.group_limited),
        "mixtral",
        "its router is softmax top-k, renormalised; no shared experts",
    )
    require(spec.qk_norm is QkNorm.none and not spec.qkv_bias, "mixtral", "no q/k norm or bias")
    out = attention_to_hf(spec, "mixtral") | {
        "intermediate_size": moe.expert_size,
        "num_local_experts": moe.num_experts,
        "num_experts_per_tok": moe.top_k,
        "output_router_logits": moe.aux_loss,
        "router_jitter_noise": moe.router_jitter,
        "sliding_window": spec.sliding_window if spec.layer_type(0).is_sliding else None,
    }
    return out


FAMILIES = (
    FamilyDef(
        family=Family.mixtral,
        model_types=("mixtral",),
        impl=IMPL,
        defaults={"layer_pattern": (LayerType.full_moe,)},
        dropouts=("attention_dropout",),
        from_hf=mixtral_from_hf,
        to_hf=mixtral_to_hf,
        check=attention_dropout_only,
        # transformers 5.24 configuration_mixtral.py MixtralConfig.attribute_map
        attribute_map={"num_experts": "num_local_experts"},
    ),
)


PRESETS = (
    # mistralai/Mixtral-8x7B-v0.1 config.json (tests/data/hf/mixtral-8x7b.json): 46.7B
    # parameters, 12.9B active (2 of 8 experts).
    ModelSpec(
        name="mixtral-8x7b",
        family=Family.mixtral,
        vocab_size=32000,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=14336,
        max_position_embeddings=32768,
        moe=MoeSpec(num_experts=8, top_k=2, expert_size=14336),
    ),
)
