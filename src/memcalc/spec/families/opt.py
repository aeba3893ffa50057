"""HF OPT (``modeling_opt.py``): pre-LN blocks of biased LayerNorms (``self_attn_layer_norm``,
``final_layer_norm``), separate q/k/v/out projections with biases (``enable_bias``; q is scaled
after its projection, ``q_proj(x) * scaling``, a new tensor that replaces it), a ReLU MLP
(``fc1 -> relu -> fc2``: ReLU saves its result, which fc2 saves too), learned positions with
2 extra rows (``OPTLearnedPositionalEmbedding``, offset 2) indexed by per-sequence position ids
(b x s, ``cumsum`` of an all-ones mask, which the layers also get), ``dropout`` on each
sublayer's output and ``attention_dropout`` on the probabilities, the LM head tied to the token
embedding.

Not modelled, refused with the key named: post-LN blocks (``do_layer_norm_before: false``,
OPT-350m), a projected embedding (``word_embed_proj_dim`` != hidden_size, OPT-350m),
``_remove_final_layer_norm``, LayerNorms without weights (``layer_norm_elementwise_affine:
false``) and ``layerdrop`` (layers skipped at random). ``activation_dropout`` has no effect in
transformers 5.x (``OPTDecoderLayer`` applies none) and is not read; nor is there embedding
dropout."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcalc.spec.families.base import LLAMA_NAMES, FamilyDef, HfConfig, Implementation
from memcalc.spec.model import Activation, Family, Mlp, ModelSpec, Norm, Positions
from memcalc.validate import FieldError

IMPL = Implementation(
    # OPTDecoderLayer: self_attn (k, v, q, out_proj), self_attn_layer_norm, fc1, fc2,
    # final_layer_norm
    module_order=(
        "attn.k_proj",
        "attn.v_proj",
        "attn.q_proj",
        "attn.",
        "self_attn_layer_norm",
        "fc1",
        "fc2",
        "final_layer_norm",
    ),
    names={
        **LLAMA_NAMES,
        "attn_norm": "self_attn_layer_norm",
        "mlp_norm": "final_layer_norm",
        "o": "attn.out_proj",
        "attn_dropout": "attn.dropout",
        "up": "fc1",
        "act": "mlp.act",
        "down": "fc2",
        "mlp_dropout": "mlp.dropout",
        "final_norm": "decoder.final_layer_norm",
    },
    position_ids_batched=True,
    param_prefix="model.decoder.layers.{layer}.",
    outside_names={
        "embed_tokens.weight": "model.decoder.embed_tokens.weight",
        "embed_positions.weight": "model.decoder.embed_positions.weight",
        "decoder.final_layer_norm.weight": "model.decoder.final_layer_norm.weight",
        "decoder.final_layer_norm.bias": "model.decoder.final_layer_norm.bias",
    },
)

DEFAULTS: dict[str, Any] = {
    "norm": Norm.layer_norm,
    "norm_bias": True,
    "positions": Positions.learned,
    "position_offset": 2,
    "mlp": Mlp.plain,
    "activation": Activation.relu,
    "qkv_bias": True,
    "out_bias": True,
    "mlp_bias": True,
    "tie_embeddings": True,
}

REFUSED = {
    # key: (the value memcalc models, why another is not)
    "do_layer_norm_before": (True, "post-LN OPT blocks"),
    "_remove_final_layer_norm": (False, "an OPT without its final LayerNorm"),
    "layer_norm_elementwise_affine": (True, "LayerNorms without weight and bias"),
}


def from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """OPTConfig keys: hidden_size, ffn_dim, num_hidden_layers, num_attention_heads,
    max_position_embeddings, activation_function, enable_bias, dropout, attention_dropout."""
    c = HfConfig(cfg, source)
    for key, (modelled, what) in REFUSED.items():
        value = c.flag(key, key, modelled)
        if value is not modelled:
            raise c.refuse(key, value, f"memcalc models {key} = {modelled!r}, not {what}")
    hidden = c.require("hidden_size", "hidden_size")
    proj = cfg.get("word_embed_proj_dim")
    if proj is not None and proj != hidden:
        raise c.refuse(
            "word_embed_proj_dim",
            proj,
            f"embeddings projected in and out of hidden_size {hidden} (project_in/out)",
        )
    layerdrop = cfg.get("layerdrop") or 0
    if layerdrop:
        raise c.refuse("layerdrop", layerdrop, "layers skipped at random in training")
    bias = c.get("qkv_bias", "enable_bias", True)
    return c.spec(
        {
            **DEFAULTS,
            "name": c.name(),
            "family": Family.opt,
            "vocab_size": c.require("vocab_size", "vocab_size"),
            "hidden_size": hidden,
            "num_layers": c.require("num_layers", "num_hidden_layers"),
            "num_heads": c.require("num_heads", "num_attention_heads"),
            "intermediate_size": c.require("intermediate_size", "ffn_dim"),
            "max_position_embeddings": c.get(
                "max_position_embeddings", "max_position_embeddings", 2048
            ),
            "activation": c.get("activation", "activation_function", "relu"),
            "qkv_bias": bias,
            "out_bias": c.get("out_bias", "enable_bias", True),
            "mlp_bias": c.get("mlp_bias", "enable_bias", True),
            "tie_embeddings": c.get("tie_embeddings", "tie_word_embeddings", True),
            "residual_dropout": c.get("residual_dropout", "dropout", 0.1),
            "attention_dropout": c.get("attention_dropout", "attention_dropout", 0.0),
        }
    )


def to_hf(spec: ModelSpec) -> dict[str, Any]:
    return {
        "model_type": "opt",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "word_embed_proj_dim": spec.hidden_size,
        "ffn_dim": spec.mlp_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "activation_function": spec.activation.value,
        "enable_bias": spec.qkv_bias,
        "tie_word_embeddings": spec.tie_embeddings,
        "dropout": spec.residual_dropout,
        "attention_dropout": spec.attention_dropout,
        "do_layer_norm_before": True,
        "use_cache": False,
    }


def _check(spec: ModelSpec) -> None:
    if spec.embedding_dropout:
        raise FieldError(
            "embedding_dropout", "the opt implementation has no embedding dropout; must be 0"
        )
    if not spec.qkv_bias == spec.out_bias == spec.mlp_bias:
        raise FieldError(
            "qkv_bias", "OPT has one enable_bias for every projection: the biases must agree"
        )
    if spec.num_kv_heads not in (None, spec.num_heads) or spec.head_dim not in (
        None,
        spec.hidden_size // spec.num_heads,
    ):
        raise FieldError("num_kv_heads", "OPT has multi-head attention with d = h / heads")
    if spec.position_offset != 2:
        raise FieldError("position_offset", "OPT's position table has 2 extra rows: must be 2")


FAMILIES = (
    FamilyDef(
        family=Family.opt,
        model_types=("opt",),
        impl=IMPL,
        defaults=DEFAULTS,
        dropouts=("attention_dropout", "residual_dropout"),
        from_hf=from_hf,
        to_hf=to_hf,
        check=_check,
    ),
)

PRESETS = (
    # facebook/opt-6.7b: dropout 0.1 on both sublayers' outputs, 2048 (+2) positions, tied
    ModelSpec(
        name="opt-6.7b",
        family=Family.opt,
        vocab_size=50272,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        intermediate_size=16384,
        max_position_embeddings=2048,
        residual_dropout=0.1,
    ),
)
