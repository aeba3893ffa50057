"""HF DeepSeek-V2 (``modeling_deepseek_v2.py``) and DeepSeek-V3 (``modeling_deepseek_v3.py``):
multi-head latent attention (``*Attention``: q/kv low-rank projections, decoupled rotary
dims), the first ``first_k_dense_replace`` layers dense (``*DecoderLayer.__init__``), the rest
MoE with ``n_shared_experts`` shared experts added ungated (``*MoE.forward``) and a router that
computes in fp32 (``*TopkRouter``).

* V2: softmax scores, ``topk_method`` greedy or group_limited_greedy (``n_group`` /
  ``topk_group``), times ``routed_scaling_factor``; no renormalisation (the router does not
  read ``norm_topk_prob``); rotary as a complex64 ``freqs_cis``.
* V3: sigmoid scores, the choice among the ``topk_group`` best of ``n_group`` groups by
  ``scores + e_score_correction_bias`` (a buffer: not a parameter), the weights gathered from
  the unbiased scores, renormalised (``norm_topk_prob``) and scaled; rotary cos/sin
  (``rope_interleave``).

Not modelled, on purpose: DeepSeek-V3's published ``quantization_config`` (fp8 blocks): the
estimate is of bf16 training, as the HF model built without it (same shapes, no scale
tensors; ``tests/data/hf/make_param_counts.py`` drops it too). ``num_nextn_predict_layers``:
HF builds no multi-token-prediction layer (671B, not 685B). The router weight is modelled in
the model's dtype, as after ``model.to(bf16)`` (``memcalc measure``); ``from_pretrained``
would keep it in fp32 (``_keep_in_fp32_modules_strict``), E x h x 2 more bytes per MoE layer.
Remote-code keys (``aux_loss_alpha``, ``seq_aux``, ``ep_size``, ``auto_map``) are ignored:
transformers' own implementation does not read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.spec.families.base import (
    FamilyDef,
    HfConfig,
    Implementation,
    attention_dropout_only,
    attention_to_hf,
    require,
    split_layers,
)
from memcalc.spec.model import MAX_LAYERS, Family, LayerType, MlaSpec, ModelSpec, MoeSpec, Router
from memcalc.spec.peft_lora import QWEN2_MOE_LAYOUT
from memcalc.validate import FieldError

# transformers conversion_mapping.py _MODEL_TO_CONVERSION_PATTERN: "deepseek_v2" / "deepseek_v3":
# "qwen2_moe"; neither is a key of PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
V2 = Implementation(
    complex_rotary=True, lora_targets=None, peft_moe=QWEN2_MOE_LAYOUT, router_weight_fp32=True
)
V3 = Implementation(lora_targets=None, peft_moe=QWEN2_MOE_LAYOUT, router_weight_fp32=True)


def _common(c: HfConfig, family: Family) -> dict[str, Any]:
    n = c.require("num_layers", "num_hidden_layers")
    dense = c.get("first_layers", "first_k_dense_replace", 0)
    if not isinstance(dense, int) or isinstance(dense, bool) or dense < 0:
        raise c.error("first_k_dense_replace", f"expected a layer count, got {dense!r}")
    freq = c.cfg.get("moe_layer_freq", 1)
    if freq != 1:
        raise c.error(
            "moe_layer_freq",
            f"{freq!r} is not modelled: transformers' DeepSeek makes every layer from "
            "first_k_dense_replace on an MoE layer (it does not read moe_layer_freq)",
        )
    if c.flag("moe.aux_loss", "output_router_logits"):
        raise c.error(
            "output_router_logits",
            "true is not modelled: transformers' DeepSeek computes no load-balancing loss",
        )
    rope = c.require("mla.qk_rope_head_dim", "qk_rope_head_dim")
    layers: dict[str, Any] = {}
    if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_LAYERS:
        kinds = [LayerType.full] * min(dense, n) + [LayerType.full_moe] * max(0, n - dense)
        layers = split_layers(kinds, min(dense, n), 1)
    return {
        "name": c.name(),
        "family": family,
        "vocab_size": c.require("vocab_size", "vocab_size"),
        "hidden_size": c.require("hidden_size", "hidden_size"),
        "num_layers": n,
        "num_heads": c.require("num_heads", "num_attention_heads"),
        "num_kv_heads": c.get("num_kv_heads", "num_key_value_heads"),
        "head_dim": rope,  # as DeepseekV3Config.__post_init__: head_dim = qk_rope_head_dim
        "intermediate_size": c.require("intermediate_size", "intermediate_size"),
        "max_position_embeddings": c.get(
            "max_position_embeddings", "max_position_embeddings", 2048
        ),
        "activation": c.get("activation", "hidden_act", "silu"),
        "tie_embeddings": c.get("tie_embeddings", "tie_word_embeddings", False),
        "attention_dropout": c.get("attention_dropout", "attention_dropout", 0.0),
        "qkv_bias": c.get("qkv_bias", "attention_bias", False),
        "out_bias": c.get("out_bias", "attention_bias", False),
        "mla": {
            "q_lora_rank": c.get("mla.q_lora_rank", "q_lora_rank"),
            "kv_lora_rank": c.require("mla.kv_lora_rank", "kv_lora_rank"),
            "qk_nope_head_dim": c.require("mla.qk_nope_head_dim", "qk_nope_head_dim"),
            "qk_rope_head_dim": rope,
            "v_head_dim": c.require("mla.v_head_dim", "v_head_dim"),
        },
        **layers,
    }


def _moe(c: HfConfig) -> dict[str, Any]:
    return {
        "num_experts": c.require("moe.num_experts", "n_routed_experts"),
        "top_k": c.require("moe.top_k", "num_experts_per_tok"),
        "expert_size": c.require("moe.expert_size", "moe_intermediate_size"),
        "shared_experts": c.get("moe.shared_experts", "n_shared_experts", 0),
        "router_fp32": True,
        "routed_scaling": c.get("moe.routed_scaling", "routed_scaling_factor", 1.0),
    }


def _expect(c: HfConfig, key: str, allowed: tuple[object, ...], why: str) -> object:
    value = c.cfg.get(key)
    if value is not None and value not in allowed:
        choices = ", ".join(repr(a) for a in allowed)
        raise c.error(key, f"{value!r} is not modelled ({why}); memcalc reads: {choices}")
    return value


def v2_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    c = HfConfig(cfg, source)
    fields = _common(c, Family.deepseek_v2)
    _expect(c, "scoring_func", ("softmax",), "DeepseekV2TopkRouter always takes a softmax")
    method = _expect(
        c,
        "topk_method",
        ("greedy", "group_limited_greedy"),
        "the methods DeepseekV2TopkRouter has",
    )
    if c.flag("moe.norm_topk_prob", "norm_topk_prob"):
        raise c.error(
            "norm_topk_prob",
            "true is not modelled: DeepseekV2TopkRouter does not renormalise (it ignores the key)",
        )
    moe = _moe(c) | {"norm_topk_prob": False}
    if method == "group_limited_greedy":
        moe |= {
            "group_limited": True,
            "groups": c.require("moe.groups", "n_group"),
            "topk_groups": c.require("moe.topk_groups", "topk_group"),
        }
    fields |= {"mlp_bias": c.get("mlp_bias", "mlp_bias", False), "moe": moe}
    return c.spec(fields)


def v3_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    c = HfConfig(cfg, source)
    fields = _common(c, Family.deepseek_v3)
    _expect(c, "scoring_func", ("sigmoid",), "DeepseekV3TopkRouter always takes a sigmoid")
    _expect(c, "topk_method", ("noaux_tc",), "DeepseekV3TopkRouter always runs noaux_tc")
    if c.flag("mlp_bias", "mlp_bias"):
        raise c.error("mlp_bias", "true is not modelled: DeepseekV3MLP has no biases")
    moe = _moe(c) | {
        "router": Router.sigmoid,
        "group_limited": True,
        "groups": c.get("moe.groups", "n_group", 8),
        "topk_groups": c.get("moe.topk_groups", "topk_group", 4),
        "norm_topk_prob": c.get("moe.norm_topk_prob", "norm_topk_prob", True),
    }
    fields["moe"] = moe
    fields["mla"]["rope_interleave"] = c.get("mla.rope_interleave", "rope_interleave", True)
    return c.spec(fields)


def _to_hf(spec: ModelSpec, model_type: str) -> dict[str, Any]:
    moe, mla = spec.moe, spec.mla
    require(moe is not None and mla is not None, model_type, "MoE layers and MLA")
    assert moe is not None and mla is not None
    dense = len(spec.first_layers)
    require(
        spec.first_layers == (LayerType.full,) * dense
        and spec.layer_pattern == (LayerType.full_moe,),
        model_type,
        "dense layers first, then MoE layers",
    )
    require(
        moe.shared_size == moe.shared_experts * moe.expert_size and not moe.shared_expert_gate,
        model_type,
        "shared experts of the routed experts' width, ungated",
    )
    require(moe.router_fp32, model_type, "its router computes in fp32")
    require(spec.qkv_bias == spec.out_bias, model_type, "one attention_bias")
    out = attention_to_hf(spec, model_type) | {
        "intermediate_size": spec.mlp_size,
        "moe_intermediate_size": moe.expert_size,
        "n_routed_experts": moe.num_experts,
        "num_experts_per_tok": moe.top_k,
        "n_shared_experts": moe.shared_experts,
        "first_k_dense_replace": dense,
        "routed_scaling_factor": moe.routed_scaling,
        "q_lora_rank": mla.q_lora_rank,
        "kv_lora_rank": mla.kv_lora_rank,
        "qk_nope_head_dim": mla.qk_nope_head_dim,
        "qk_rope_head_dim": mla.qk_rope_head_dim,
        "v_head_dim": mla.v_head_dim,
        "attention_bias": spec.qkv_bias,
    }
    del out["head_dim"]  # DeepSeek configs derive it (qk_rope_head_dim)
    return out


def v2_to_hf(spec: ModelSpec) -> dict[str, Any]:
    out = _to_hf(spec, "deepseek_v2")
    moe = spec.moe
    assert moe is not None
    require(
        moe.router is Router.softmax and not moe.norm_topk_prob,
        "deepseek_v2",
        "a softmax router without renormalisation",
    )
    out |= {
        "mlp_bias": spec.mlp_bias,
        "scoring_func": "softmax",
        "norm_topk_prob": False,
        "topk_method": "group_limited_greedy" if moe.group_limited else "greedy",
        "n_group": moe.groups,
        "topk_group": moe.topk_groups,
    }
    return out


def v3_to_hf(spec: ModelSpec) -> dict[str, Any]:
    out = _to_hf(spec, "deepseek_v3")
    moe, mla = spec.moe, spec.mla
    assert moe is not None and mla is not None
    require(moe.router is Router.sigmoid, "deepseek_v3", "a sigmoid router")
    require(not spec.mlp_bias, "deepseek_v3", "no MLP biases")
    out |= {
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "norm_topk_prob": moe.norm_topk_prob,
        "n_group": moe.groups,
        "topk_group": moe.topk_groups,
        "rope_interleave": mla.rope_interleave,
    }
    return out


def _check(spec: ModelSpec) -> None:
    attention_dropout_only(spec)
    if spec.mla is None:
        raise FieldError("mla", f"{spec.family.value} runs multi-head latent attention")
    if any(t.is_sliding for t in (*spec.first_layers, *spec.layer_pattern)):
        raise FieldError("layer_pattern", f"{spec.family.value} has no sliding-window layers")


ATTRIBUTE_MAPS: dict[Family, dict[str, str]] = {
    # transformers 5.24 DeepseekV2Config / DeepseekV3Config.attribute_map
    Family.deepseek_v2: {"num_experts": "n_routed_experts"},
    Family.deepseek_v3: {
        "num_local_experts": "n_routed_experts",
        "num_mtp_layers": "num_nextn_predict_layers",
    },
}


def _family(family: Family, impl: Implementation, from_hf: Any, to_hf: Any) -> FamilyDef:
    return FamilyDef(
        attribute_map=ATTRIBUTE_MAPS[family],
        family=family,
        model_types=(family.value,),
        impl=impl,
        defaults={},
        dropouts=("attention_dropout",),
        from_hf=from_hf,
        to_hf=to_hf,
        check=_check,
    )


FAMILIES = (
    _family(Family.deepseek_v2, V2, v2_from_hf, v2_to_hf),
    _family(Family.deepseek_v3, V3, v3_from_hf, v3_to_hf),
)


PRESETS = (
    # deepseek-ai/DeepSeek-V2-Lite config.json (tests/data/hf/deepseek-v2-lite.json): 15.7B
    # parameters, 2.7B active (6 of 64 experts + 2 shared); layer 0 dense.
    ModelSpec(
        name="deepseek-v2-lite",
        family=Family.deepseek_v2,
        vocab_size=102400,
        hidden_size=2048,
        num_layers=27,
        num_heads=16,
        num_kv_heads=16,
        head_dim=64,
        intermediate_size=10944,
        max_position_embeddings=163840,
        first_layers=(LayerType.full,),
        layer_pattern=(LayerType.full_moe,),
        mla=MlaSpec(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
        moe=MoeSpec(
            num_experts=64,
            top_k=6,
            expert_size=1408,
            shared_experts=2,
            router_fp32=True,
            norm_topk_prob=False,
        ),
    ),
    # deepseek-ai/DeepSeek-V3 config.json (tests/data/hf/deepseek-v3.json): 671.0B parameters
    # (no MTP layer in HF), 37.6B active (8 of 256 experts + 1 shared); layers 0-2 dense.
    ModelSpec(
        name="deepseek-v3",
        family=Family.deepseek_v3,
        vocab_size=129280,
        hidden_size=7168,
        num_layers=61,
        num_heads=128,
        num_kv_heads=128,
        head_dim=64,
        intermediate_size=18432,
        max_position_embeddings=163840,
        first_layers=(LayerType.full,) * 3,
        layer_pattern=(LayerType.full_moe,),
        mla=MlaSpec(
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
        ),
        moe=MoeSpec(
            num_experts=256,
            top_k=8,
            expert_size=2048,
            shared_experts=1,
            router=Router.sigmoid,
            router_fp32=True,
            group_limited=True,
            groups=8,
            topk_groups=4,
            routed_scaling=2.5,
        ),
    ),
)
