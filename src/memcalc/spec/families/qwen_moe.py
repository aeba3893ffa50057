"""HF Qwen2-MoE (``modeling_qwen2_moe.py``) and Qwen3-MoE (``modeling_qwen3_moe.py``).

Both: layer i is an MoE layer iff ``i not in mlp_only_layers and num_experts > 0 and
(i + 1) % decoder_sparse_step == 0`` (``*DecoderLayer.__init__``), else a dense SwiGLU of
``intermediate_size``; the router's softmax runs in fp32, ``norm_topk_prob`` renormalises the
top-k, and the weights are cast back to the logits' dtype (``*TopKRouter.forward``); experts of
width ``moe_intermediate_size``.

* Qwen2-MoE: Qwen2's attention (q/k/v bias, ``qkv_bias``); a shared expert of width
  ``shared_expert_intermediate_size`` run first, gated by ``sigmoid(shared_expert_gate(x))``
  (``Qwen2MoeSparseMoeBlock.forward``); with ``use_sliding_window``, layer i attends within
  ``sliding_window`` iff ``(i + 1) % 2 and i < max_window_layers`` (``Qwen2MoeConfig``), or as
  ``layer_types`` lists.
* Qwen3-MoE: Qwen3's attention (per-head q/k RMSNorm, explicit ``head_dim``,
  ``attention_bias`` on q/k/v/o); no shared expert; ``use_sliding_window`` puts every layer in
  the window.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.spec.families.base import (
    LLAMA_NAMES,
    FamilyDef,
    HfConfig,
    Implementation,
    attention_dropout_only,
    attention_to_hf,
    layer_types,
    llama_attention,
    require,
    split_layers,
)
from memcalc.spec.model import Family, LayerType, ModelSpec, MoeSpec, QkNorm, Router
from memcalc.spec.peft_lora import QWEN2_MOE_LAYOUT

QWEN2_MOE = Implementation(
    names={**LLAMA_NAMES, "shared_experts": "mlp.shared_expert"},
    router_weights_to_logits_dtype=True,
    shared_expert_first=True,
    # no "qwen2_moe" key in PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, and no
    # MoE conversion (qwen2_moe is no key of _MODEL_TO_CONVERSION_PATTERN): all-linear adapts
    # the nn.Linear shared expert and its gate, not the fused experts or the router
    lora_targets=None,
)
QWEN3_MOE = Implementation(
    router_weights_to_logits_dtype=True,
    lora_targets=None,
    peft_moe=QWEN2_MOE_LAYOUT,  # transformers conversion_mapping.py: "qwen3_moe": "qwen2_moe"
)


def _index_list(c: HfConfig, key: str) -> set[int]:
    value = c.get(key, key, [])
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise c.error(key, f"expected a list of layer indices, got {value!r}")
    return set(value)


def _positive(c: HfConfig, key: str, default: int) -> int:
    value = c.get(key, key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise c.error(key, f"expected a positive integer, got {value!r}")
    return value


def _layers(c: HfConfig, n: int, sliding: list[bool] | None, regular_from: int) -> dict[str, Any]:
    """Layer types from decoder_sparse_step / mlp_only_layers (and per-layer sliding)."""
    step = _positive(c, "decoder_sparse_step", 1)
    dense = _index_list(c, "mlp_only_layers")
    experts = c.cfg.get("num_experts") or 0
    kinds = []
    for i in range(n):
        moe = i not in dense and experts > 0 and (i + 1) % step == 0
        window = sliding[i] if sliding is not None else False
        kinds.append(
            (LayerType.sliding_moe if moe else LayerType.sliding)
            if window
            else (LayerType.full_moe if moe else LayerType.full)
        )
    head = max([regular_from, *(i + 1 for i in dense if i < n)])
    return split_layers(kinds, head, step)


def _moe(c: HfConfig) -> dict[str, Any]:
    return {
        "num_experts": c.require("moe.num_experts", "num_experts"),
        "top_k": c.get("moe.top_k", "num_experts_per_tok", 4),
        "expert_size": c.require("moe.expert_size", "moe_intermediate_size"),
        "norm_topk_prob": c.get("moe.norm_topk_prob", "norm_topk_prob", False),
        "aux_loss": c.get("moe.aux_loss", "output_router_logits", False),
    }


def _num_layers(c: HfConfig) -> int:
    return _positive(c, "num_hidden_layers", 1)


def qwen2_moe_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    c = HfConfig(cfg, source)
    fields = llama_attention(c, Family.qwen2_moe)
    n = _num_layers(c)
    sliding: list[bool] | None = None
    regular_from = 0
    if c.flag("use_sliding_window", "use_sliding_window"):
        listed = c.cfg.get("layer_types")
        if listed is not None:
            allowed = {"full_attention": False, "sliding_attention": True}
            if (
                not isinstance(listed, list)
                or len(listed) != n
                or any(t not in allowed for t in listed)
            ):
                raise c.error(
                    "layer_types",
                    f"expected {n} of full_attention / sliding_attention, got {listed!r}",
                )
            sliding, regular_from = [allowed[t] for t in listed], n
        else:
            window_layers = c.get("max_window_layers", "max_window_layers", 28)
            if not isinstance(window_layers, int) or isinstance(window_layers, bool):
                raise c.error("max_window_layers", f"expected a layer count, got {window_layers!r}")
            sliding = [bool((i + 1) % 2) and i < window_layers for i in range(n)]
            regular_from = max(0, window_layers)
        if any(sliding):
            fields["sliding_window"] = c.require("sliding_window", "sliding_window")
    shared = c.get("moe.shared_expert_size", "shared_expert_intermediate_size", 5632)
    moe = _moe(c) | {
        "shared_experts": 1,
        "shared_expert_size": shared,
        "shared_expert_gate": True,
    }
    fields |= {
        "intermediate_size": c.require("intermediate_size", "intermediate_size"),
        "qkv_bias": c.get("qkv_bias", "qkv_bias", True),
        "moe": moe,
        **_layers(c, n, sliding, regular_from),
    }
    return c.spec(fields)


def qwen3_moe_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    c = HfConfig(cfg, source)
    fields = llama_attention(c, Family.qwen3_moe)
    n = _num_layers(c)
    window = None
    if c.flag("use_sliding_window", "use_sliding_window"):
        window = c.require("sliding_window", "sliding_window")
    bias = c.get("qkv_bias", "attention_bias", False)
    fields |= {
        "intermediate_size": c.require("intermediate_size", "intermediate_size"),
        "qkv_bias": bias,
        "out_bias": c.get("out_bias", "attention_bias", False),
        "moe": _moe(c),
        **_layers(c, n, [True] * n if window is not None else None, 0),
    }
    if window is not None:
        fields["sliding_window"] = window
    return c.spec(fields)


def _moe_to_hf(spec: ModelSpec, model_type: str) -> dict[str, Any]:
    moe = spec.moe
    require(moe is not None, model_type, "no MoE")
    assert moe is not None
    require(
        moe.router is Router.softmax and not (moe.router_fp32 or moe.group_limited),
        model_type,
        "its router is a softmax top-k",
    )
    return attention_to_hf(spec, model_type) | {
        "intermediate_size": spec.mlp_size,
        "num_experts": moe.num_experts,
        "num_experts_per_tok": moe.top_k,
        "moe_intermediate_size": moe.expert_size,
        "norm_topk_prob": moe.norm_topk_prob,
        "output_router_logits": moe.aux_loss,
        **_sparse_layers(spec),
    }


def _sparse_layers(spec: ModelSpec) -> dict[str, Any]:
    """decoder_sparse_step and mlp_only_layers for the spec's layers: a step when the MoE
    layers are every step-th (its own pattern), else step 1 and the dense layers listed."""
    pattern = [t.is_moe for t in spec.layer_pattern]
    if not spec.first_layers and pattern == [False] * (len(pattern) - 1) + [True]:
        return {"decoder_sparse_step": len(pattern), "mlp_only_layers": []}
    kinds = layer_types(spec)
    return {
        "decoder_sparse_step": 1,
        "mlp_only_layers": [i for i, t in enumerate(kinds) if not t.is_moe],
    }


def qwen2_moe_to_hf(spec: ModelSpec) -> dict[str, Any]:
    out = _moe_to_hf(spec, "qwen2_moe")
    moe = spec.moe
    assert moe is not None
    require(
        moe.shared_expert_gate and moe.shared_size > 0,
        "qwen2_moe",
        "one gated shared expert",
    )
    require(not spec.out_bias and spec.qk_norm is QkNorm.none, "qwen2_moe", "no o bias, q/k norm")
    kinds = layer_types(spec)
    out |= {
        "shared_expert_intermediate_size": moe.shared_size,
        "qkv_bias": spec.qkv_bias,
        "use_sliding_window": any(t.is_sliding for t in kinds),
    }
    if out["use_sliding_window"]:
        out |= {
            "sliding_window": spec.sliding_window,
            "max_window_layers": spec.num_layers,
            "layer_types": [
                "sliding_attention" if t.is_sliding else "full_attention" for t in kinds
            ],
        }
    return out


def qwen3_moe_to_hf(spec: ModelSpec) -> dict[str, Any]:
    out = _moe_to_hf(spec, "qwen3_moe")
    moe = spec.moe
    assert moe is not None
    require(moe.shared_size == 0, "qwen3_moe", "no shared experts")
    require(spec.qkv_bias == spec.out_bias, "qwen3_moe", "one attention_bias on q/k/v and o")
    require(spec.qk_norm is QkNorm.per_head, "qwen3_moe", "per-head q/k norms")
    sliding = {t.is_sliding for t in layer_types(spec)}
    require(len(sliding) == 1, "qwen3_moe", "one attention span for all layers")
    out |= {"attention_bias": spec.qkv_bias, "use_sliding_window": sliding == {True}}
    if sliding == {True}:
        out["sliding_window"] = spec.sliding_window
    return out


FAMILIES = (
    FamilyDef(
        family=Family.qwen2_moe,
        model_types=("qwen2_moe",),
        impl=QWEN2_MOE,
        defaults={"qkv_bias": True},
        dropouts=("attention_dropout",),
        from_hf=qwen2_moe_from_hf,
        to_hf=qwen2_moe_to_hf,
        check=attention_dropout_only,
    ),
    FamilyDef(
        family=Family.qwen3_moe,
        model_types=("qwen3_moe",),
        impl=QWEN3_MOE,
        defaults={"qk_norm": QkNorm.per_head},
        dropouts=("attention_dropout",),
        from_hf=qwen3_moe_from_hf,
        to_hf=qwen3_moe_to_hf,
        check=attention_dropout_only,
        # transformers 5.24 configuration_qwen3_moe.py Qwen3MoeConfig.attribute_map: the
        # published Qwen3-MoE files say num_experts, to_json_file writes num_local_experts
        attribute_map={"num_experts": "num_local_experts"},
    ),
)


PRESETS = (
    # Qwen/Qwen3-30B-A3B config.json (tests/data/hf/qwen3-30b-a3b.json): 30.5B parameters,
    # 3.3B active (8 of 128 experts); every layer an MoE layer.
    ModelSpec(
        name="qwen3-30b-a3b",
        family=Family.qwen3_moe,
        vocab_size=151936,
        hidden_size=2048,
        num_layers=48,
        num_heads=32,
        num_kv_heads=4,
        head_dim=128,
        intermediate_size=6144,
        max_position_embeddings=40960,
        layer_pattern=(LayerType.full_moe,),
        moe=MoeSpec(num_experts=128, top_k=8, expert_size=768, norm_topk_prob=True),
    ),
    # Qwen/Qwen1.5-MoE-A2.7B config.json (tests/data/hf/qwen1.5-moe-a2.7b.json): 14.3B
    # parameters, 2.7B active (4 of 60 experts + the gated shared expert).
    ModelSpec(
        name="qwen1.5-moe-a2.7b",
        family=Family.qwen2_moe,
        vocab_size=151936,
        hidden_size=2048,
        num_layers=24,
        num_heads=16,
        num_kv_heads=16,
        intermediate_size=5632,
        max_position_embeddings=32768,
        layer_pattern=(LayerType.full_moe,),
        moe=MoeSpec(
            num_experts=60,
            top_k=4,
            expert_size=1408,
            shared_experts=1,
            shared_expert_size=5632,
            shared_expert_gate=True,
            norm_topk_prob=False,
        ),
    ),
    # Qwen/Qwen3-235B-A22B config.json: 235.1B parameters, 22B active (8 of 128 experts);
    # every layer an MoE layer.
    ModelSpec(
        name="qwen3-235b-a22b",
        family=Family.qwen3_moe,
        vocab_size=151936,
        hidden_size=4096,
        num_layers=94,
        num_heads=64,
        num_kv_heads=4,
        head_dim=128,
        intermediate_size=12288,
        max_position_embeddings=40960,
        layer_pattern=(LayerType.full_moe,),
        moe=MoeSpec(num_experts=128, top_k=8, expert_size=1536, norm_topk_prob=True),
    ),
)
