"""HF GPT-NeoX / Pythia (``modeling_gpt_neox.py``): LayerNorm with bias, one fused
``query_key_value`` projection laid out (b, s, a, 3d) and chunked into q, k, v -- views of one
buffer, so a v saved unrepeated keeps all of it alive (``GPTNeoXAttention.forward``) -- partial
rotary on the first ``rotary_pct`` of each head's dims (``apply_rotary_pos_emb``: the rotated and
passed-through dims concatenated), the parallel residual ``x + attn(ln1(x)) + mlp(ln2(x))`` by
default (``use_parallel_residual``; both norms read the same x), a plain GELU MLP with biases,
untied ``embed_out``/``lm_head``, and ``hidden_dropout`` on the embeddings and on both sublayers'
outputs (``emb_dropout``, ``post_attention_dropout``, ``post_mlp_dropout``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.spec.families.base import LLAMA_NAMES, FamilyDef, HfConfig, Implementation
from memcalc.spec.model import Activation, Family, Mlp, ModelSpec, Norm
from memcalc.validate import FieldError

IMPL = Implementation(
    # peft 0.21.2 utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING["gpt_neox"]
    lora_targets=("query_key_value",),
    # GPTNeoXLayer registers both norms, then attention and mlp
    module_order=("input_layernorm", "post_attention_layernorm", "attn.", "mlp."),
    names={
        **LLAMA_NAMES,
        "qkv": "attn.query_key_value",
        "o": "attn.dense",
        "attn_dropout": "post_attention_dropout",
        "mlp_dropout": "post_mlp_dropout",
        "up": "mlp.dense_h_to_4h",
        "down": "mlp.dense_4h_to_h",
        "embed_tokens": "embed_in",
        "embed_dropout": "emb_dropout",
        "final_norm": "final_layer_norm",
    },
    rotary_concat=True,
    param_prefix="gpt_neox.layers.{layer}.",
    param_renames={"attn.": "attention."},
    outside_names={
        "embed_in.weight": "gpt_neox.embed_in.weight",
        "final_layer_norm.weight": "gpt_neox.final_layer_norm.weight",
        "final_layer_norm.bias": "gpt_neox.final_layer_norm.bias",
        "lm_head.weight": "lm_head.weight",
    },
)

DEFAULTS: dict[str, Any] = {
    "norm": Norm.layer_norm,
    "norm_bias": True,
    "parallel_residual": True,
    "rotary_fraction": 0.25,
    "fused_qkv": True,
    "mlp": Mlp.plain,
    "activation": Activation.gelu,
    "qkv_bias": True,
    "out_bias": True,
    "mlp_bias": True,
}

ROTARY_PCT = 0.25
"""GPTNeoXConfig's rotary_pct when config.json leaves it out."""


def _rotary_fraction(c: HfConfig) -> Any:
    """``rope_scaling`` / ``rope_parameters``' ``partial_rotary_factor``, else ``rotary_pct``
    (``GPTNeoXConfig.convert_rope_params_to_dict``)."""
    for key in ("rope_scaling", "rope_parameters"):
        rope = c.cfg.get(key)
        if isinstance(rope, dict) and rope.get("partial_rotary_factor") is not None:
            c.keys["rotary_fraction"] = f"{key}.partial_rotary_factor"
            return rope["partial_rotary_factor"]
        if isinstance(rope, dict):
            break
    return c.get("rotary_fraction", "rotary_pct", ROTARY_PCT)


def from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """GPTNeoXConfig keys: hidden_size, num_hidden_layers, num_attention_heads,
    intermediate_size, hidden_act, rotary_pct, use_parallel_residual, attention_bias (q/k/v and
    dense; the MLP always has biases), hidden_dropout, attention_dropout."""
    c = HfConfig(cfg, source)
    bias = c.get("qkv_bias", "attention_bias", True)
    dropout = c.get("residual_dropout", "hidden_dropout", 0.0)
    return c.spec(
        {
            **DEFAULTS,
            "name": c.name(),
            "family": Family.gpt_neox,
            "vocab_size": c.require("vocab_size", "vocab_size"),
            "hidden_size": c.require("hidden_size", "hidden_size"),
            "num_layers": c.require("num_layers", "num_hidden_layers"),
            "num_heads": c.require("num_heads", "num_attention_heads"),
            "intermediate_size": c.require("intermediate_size", "intermediate_size"),
            "max_position_embeddings": c.get(
                "max_position_embeddings", "max_position_embeddings", 2048
            ),
            "activation": c.get("activation", "hidden_act", "gelu"),
            "rotary_fraction": _rotary_fraction(c),
            "parallel_residual": c.get("parallel_residual", "use_parallel_residual", True),
            "qkv_bias": bias,
            "out_bias": c.get("out_bias", "attention_bias", True),
            "tie_embeddings": c.get("tie_embeddings", "tie_word_embeddings", False),
            "embedding_dropout": dropout,
            "residual_dropout": c.get("residual_dropout", "hidden_dropout", 0.0),
            "attention_dropout": c.get("attention_dropout", "attention_dropout", 0.0),
        }
    )


def to_hf(spec: ModelSpec) -> dict[str, Any]:
    return {
        "model_type": "gpt_neox",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.mlp_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "hidden_act": spec.activation.value,
        "rotary_pct": spec.rotary_fraction,
        "use_parallel_residual": spec.parallel_residual,
        "attention_bias": spec.qkv_bias,
        "tie_word_embeddings": spec.tie_embeddings,
        "hidden_dropout": spec.residual_dropout,
        "attention_dropout": spec.attention_dropout,
        "use_cache": False,
    }


def _check(spec: ModelSpec) -> None:
    if spec.embedding_dropout != spec.residual_dropout:
        raise FieldError(
            "embedding_dropout",
            "GPT-NeoX applies one hidden_dropout to the embeddings and to both sublayers: "
            f"must equal residual_dropout ({spec.residual_dropout})",
        )
    if spec.qkv_bias != spec.out_bias or not spec.mlp_bias:
        raise FieldError(
            "qkv_bias",
            "GPT-NeoX puts one attention_bias on query_key_value and dense, and biases on "
            "the MLP: qkv_bias must equal out_bias, mlp_bias must be true",
        )
    if spec.num_kv_heads not in (None, spec.num_heads) or spec.head_dim not in (
        None,
        spec.hidden_size // spec.num_heads,
    ):
        raise FieldError("num_kv_heads", "GPT-NeoX has multi-head attention with d = h / heads")


FAMILIES = (
    FamilyDef(
        family=Family.gpt_neox,
        model_types=("gpt_neox",),
        impl=IMPL,
        defaults=DEFAULTS,
        dropouts=("embedding_dropout", "attention_dropout", "residual_dropout"),
        from_hf=from_hf,
        to_hf=to_hf,
        check=_check,
    ),
)

PRESETS = (
    # EleutherAI/pythia-6.9b: 50432 rows (50254 tokens padded), untied embed_out
    ModelSpec(
        name="pythia-6.9b",
        family=Family.gpt_neox,
        vocab_size=50432,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        intermediate_size=16384,
        max_position_embeddings=2048,
    ),
)
