"""HF Phi-3 (``modeling_phi3.py``): the Llama layer with one fused ``qkv_proj`` (q, k and v are
slices -- views -- of its output, so a saved v keeps the whole buffer alive:
``Phi3Attention.forward``), one fused ``gate_up_proj`` chunked into gate and up
(``Phi3MLP.forward``), partial rotary (``partial_rotary_factor``: RoPE on the first r dims of
each head, the rest passed through: ``apply_rotary_pos_emb``), dropout on each sublayer's output
(``resid_attn_dropout``, ``resid_mlp_dropout``: ``resid_pdrop``) and on the attention
probabilities; every layer slides when ``sliding_window`` is set (``Phi3Model.forward`` picks
``create_sliding_window_causal_mask`` whenever it is not None). ``embd_pdrop`` has no effect in
transformers 5.x (``Phi3Model`` applies no embedding dropout) and is not read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.spec.families.base import (
    LLAMA_NAMES,
    FamilyDef,
    HfConfig,
    Implementation,
    llama_keys,
)
from memcalc.spec.model import Family, LayerType, ModelSpec
from memcalc.validate import FieldError

IMPL = Implementation(
    # no "phi3" key in peft 0.21.2 utils/constants.py
    # TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    lora_targets=None,
    # Phi3Attention registers o_proj before qkv_proj
    module_order=("attn.o_proj", "attn.", "mlp.", "input_layernorm", "post_attention_layernorm"),
    names={**LLAMA_NAMES, "attn_dropout": "resid_attn_dropout", "mlp_dropout": "resid_mlp_dropout"},
    rotary_concat=True,
)

DEFAULTS: dict[str, Any] = {"fused_qkv": True, "fused_gate_up": True}


def rotary_fraction(c: HfConfig) -> Any:
    """``partial_rotary_factor``: in the rope dict (``rope_scaling``, else ``rope_parameters``)
    or at the top level (``Phi3Config.convert_rope_params_to_dict``), 1.0 when absent."""
    for key in ("rope_scaling", "rope_parameters"):
        rope = c.cfg.get(key)
        if isinstance(rope, dict) and rope.get("partial_rotary_factor") is not None:
            c.keys["rotary_fraction"] = f"{key}.partial_rotary_factor"
            return rope["partial_rotary_factor"]
        if isinstance(rope, dict):
            break
    return c.get("rotary_fraction", "partial_rotary_factor", 1.0)


def from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """Phi3Config keys: Llama's, ``partial_rotary_factor``, ``resid_pdrop``,
    ``sliding_window``."""
    c = HfConfig(cfg, source)
    fields = {
        **DEFAULTS,
        **llama_keys(c, Family.phi3),
        "rotary_fraction": rotary_fraction(c),
        "residual_dropout": c.get("residual_dropout", "resid_pdrop", 0.0),
    }
    window = c.get("sliding_window", "sliding_window")
    if window is not None:
        fields |= {"sliding_window": window, "layer_pattern": (LayerType.sliding,)}
    return c.spec(fields)


def to_hf(spec: ModelSpec) -> dict[str, Any]:
    return {
        "model_type": "phi3",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.mlp_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "original_max_position_embeddings": spec.max_position_embeddings,
        "partial_rotary_factor": spec.rotary_fraction,
        "hidden_act": spec.activation.value,
        "tie_word_embeddings": spec.tie_embeddings,
        "attention_dropout": spec.attention_dropout,
        "resid_pdrop": spec.residual_dropout,
        "embd_pdrop": 0.0,
        "sliding_window": spec.sliding_window,
        "pad_token_id": 0,
        "use_cache": False,
    }


def _check(spec: ModelSpec) -> None:
    if spec.embedding_dropout:
        raise FieldError(
            "embedding_dropout",
            "the phi3 implementation has no embedding dropout (Phi3Model ignores embd_pdrop); "
            "must be 0",
        )
    if not (spec.fused_qkv and spec.fused_gate_up):
        raise FieldError("fused_qkv", "Phi-3 fuses q/k/v and gate/up: must be true")
    if spec.sliding_window is not None and set(spec.layer_pattern) | set(spec.first_layers) != {
        LayerType.sliding
    }:
        raise MemcalcError("layer_pattern: Phi-3 slides in every layer when sliding_window is set")


FAMILIES = (
    FamilyDef(
        family=Family.phi3,
        model_types=("phi3",),
        impl=IMPL,
        defaults=DEFAULTS,
        dropouts=("attention_dropout", "residual_dropout"),
        from_hf=from_hf,
        to_hf=to_hf,
        check=_check,
    ),
)

PRESETS = (
    # microsoft/Phi-3-mini-4k-instruct: MHA, 4096 positions, a 2047-token window in every layer
    ModelSpec(
        name="phi-3-mini",
        family=Family.phi3,
        vocab_size=32064,
        hidden_size=3072,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        intermediate_size=8192,
        max_position_embeddings=4096,
        sliding_window=2047,
        layer_pattern=(LayerType.sliding,),
    ),
    # microsoft/phi-4: GQA (40 heads, 10 kv heads), 16384 positions, no sliding window, full
    # rotary, untied
    ModelSpec(
        name="phi-4",
        family=Family.phi3,
        vocab_size=100352,
        hidden_size=5120,
        num_layers=40,
        num_heads=40,
        num_kv_heads=10,
        intermediate_size=17920,
        max_position_embeddings=16384,
    ),
)
