"""HF GPT-2 (``modeling_gpt2.py``): LayerNorm with bias, learned positions, one fused Conv1D for
q/k/v, GELU MLP (``gelu_new`` by default), dropout on embeddings, attention and residuals,
tied embeddings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.spec.families.base import LLAMA_NAMES, FamilyDef, HfConfig, Implementation
from memcalc.spec.model import Activation, Family, Mlp, ModelSpec, Norm, Positions

IMPL = Implementation(
    module_order=(),  # GPT2Block registers ln_1, attn, ln_2, mlp: the forward order
    names={
        **LLAMA_NAMES,
        "attn_norm": "ln_1",
        "mlp_norm": "ln_2",
        "qkv": "attn.c_attn",
        "o": "attn.c_proj",
        "up": "mlp.c_fc",
        "down": "mlp.c_proj",
        "final_norm": "ln_f",
    },
    softmax_in_fp32=False,  # eager: softmax in the scores' dtype
    probs_to_query_dtype=False,  # probabilities cast to v's (the activation) dtype
    checkpoint_keeps_position_ids=False,
    lora_targets=("c_attn",),
    param_prefix="transformer.h.{layer}.",
    param_renames={},
    outside_names={
        "embed_tokens.weight": "transformer.wte.weight",
        "embed_positions.weight": "transformer.wpe.weight",
        "ln_f.weight": "transformer.ln_f.weight",
        "ln_f.bias": "transformer.ln_f.bias",
        "lm_head.weight": "lm_head.weight",
    },
)

DEFAULTS: dict[str, Any] = {
    "norm": Norm.layer_norm,
    "norm_bias": True,
    "positions": Positions.learned,
    "fused_qkv": True,
    "mlp": Mlp.plain,
    "activation": Activation.gelu_new,
    "qkv_bias": True,
    "out_bias": True,
    "mlp_bias": True,
    "tie_embeddings": True,
}


def from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """GPT2Config keys: n_embd, n_layer, n_head, n_inner, n_positions, activation_function,
    embd/attn/resid_pdrop (0.1 when absent, as GPT2Config)."""
    c = HfConfig(cfg, source)
    return c.spec(
        {
            **DEFAULTS,
            "name": c.name(),
            "family": Family.gpt2,
            "vocab_size": c.require("vocab_size", "vocab_size"),
            "hidden_size": c.require("hidden_size", "n_embd"),
            "num_layers": c.require("num_layers", "n_layer"),
            "num_heads": c.require("num_heads", "n_head"),
            "intermediate_size": c.get("intermediate_size", "n_inner"),
            "max_position_embeddings": c.get("max_position_embeddings", "n_positions", 1024),
            "activation": c.get("activation", "activation_function", "gelu_new"),
            "tie_embeddings": c.get("tie_embeddings", "tie_word_embeddings", True),
            "embedding_dropout": c.get("embedding_dropout", "embd_pdrop", 0.1),
            "attention_dropout": c.get("attention_dropout", "attn_pdrop", 0.1),
            "residual_dropout": c.get("residual_dropout", "resid_pdrop", 0.1),
        }
    )


def to_hf(spec: ModelSpec) -> dict[str, Any]:
    return {
        "model_type": "gpt2",
        "vocab_size": spec.vocab_size,
        "n_embd": spec.hidden_size,
        "n_layer": spec.num_layers,
        "n_head": spec.num_heads,
        "n_inner": spec.intermediate_size,
        "n_positions": spec.max_position_embeddings,
        "activation_function": spec.activation.value,
        "tie_word_embeddings": spec.tie_embeddings,
        "embd_pdrop": spec.embedding_dropout,
        "attn_pdrop": spec.attention_dropout,
        "resid_pdrop": spec.residual_dropout,
        "use_cache": False,
    }


FAMILIES = (
    FamilyDef(
        family=Family.gpt2,
        model_types=("gpt2",),
        impl=IMPL,
        defaults=DEFAULTS,
        dropouts=("embedding_dropout", "attention_dropout", "residual_dropout"),
        from_hf=from_hf,
        to_hf=to_hf,
        # transformers 5.24 configuration_gpt2.py GPT2Config.attribute_map
        attribute_map={
            "hidden_size": "n_embd",
            "max_position_embeddings": "n_positions",
            "num_attention_heads": "n_head",
            "num_hidden_layers": "n_layer",
        },
    ),
)
