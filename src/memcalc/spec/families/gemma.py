"""HF Gemma 2 and Gemma 3 text (``modeling_gemma2.py``, ``modeling_gemma3.py``).

Both: the ``1 + w`` RMSNorm (``Gemma2RMSNorm``: fp32 throughout, ``(1 + weight.float())``) in
four places per layer (``input_layernorm``, ``post_attention_layernorm`` before the residual
add, ``pre_feedforward_layernorm``, ``post_feedforward_layernorm``), GeGLU (``hidden_activation``,
``gelu_pytorch_tanh``), embeddings scaled by sqrt(h) (``*TextScaledWordEmbedding``), tied LM
head, and local (sliding-window) / global layers from ``layer_types``.

Gemma 2: local and global layers alternate (``Gemma2Config.__post_init__``), attention logits
are soft-capped in eager attention (``attn_logit_softcapping``: ``tanh(w / cap) * cap``) and so
are the output logits (``final_logit_softcapping``, ``Gemma2ForCausalLM.forward``); HF refuses
SDPA for it (``_supports_sdpa = False``), so the estimate takes ``--attention eager`` or
``flash`` (flash-attention 2 on CUDA: soft-capping and the window inside the kernel, which saves
q, k, v, out and the logsumexp like any fused kernel) and names the reason for ``sdpa``.

Gemma 3: a per-head ``1 + w`` RMSNorm on q and k after the head view (``Gemma3Attention``),
five local layers to one global by default (``sliding_window_pattern`` 6), one rotary table per
layer type (local theta 10^4, global 10^6: ``Gemma3RotaryEmbedding``), SDPA supported, no
attention soft-capping (``Gemma3Attention`` never passes ``attn_logit_softcapping`` on, so the key
has no effect and is not read). Published Gemma 3 text configs are sparse (google/gemma-3-4b's
names six keys): every key left out takes its ``Gemma3TextConfig`` default, as HF does.
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
    compress_layers,
    hf_layer_types,
)
from memcalc.spec.model import (
    Activation,
    Family,
    LayerType,
    ModelSpec,
    NormPlacement,
    QkNorm,
)
from memcalc.spec.model import Norm as NormKind
from memcalc.validate import FieldError

NAMES = {**LLAMA_NAMES, "mlp_norm": "pre_feedforward_layernorm"}
"""Gemma's four norms: input, post-attention, pre- and post-feedforward."""

GEMMA2_IMPL = Implementation(
    names=NAMES,
    sdpa_refused="it soft-caps the attention logits, which SDPA cannot; "
    "Gemma2PreTrainedModel._supports_sdpa = False",
)
GEMMA3_IMPL = Implementation(names=NAMES, rotary_per_span=True)

COMMON: dict[str, Any] = {
    "norm": NormKind.rms_norm_unit_offset,
    "norm_placement": NormPlacement.sandwich,
    "activation": Activation.gelu_pytorch_tanh,
    "tie_embeddings": True,
    "embedding_scale": True,
}
GEMMA2_DEFAULTS: dict[str, Any] = {**COMMON, "attention_softcap": 50.0, "final_softcap": 30.0}
GEMMA3_DEFAULTS: dict[str, Any] = {**COMMON, "qk_norm": QkNorm.per_head}

GEMMA3_CONFIG: dict[str, Any] = {
    # Gemma3TextConfig's defaults, which HF gives every key a config.json leaves out
    "vocab_size": 262_208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
}


def _sizes(c: HfConfig, family: Family, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The keys Gemma 2 and 3 share; ``defaults`` stands in for those a file leaves out."""

    def read(field: str, key: str) -> Any:
        if key in defaults:
            return c.get(field, key, defaults[key])
        return c.require(field, key)

    if c.flag("use_bidirectional_attention", "use_bidirectional_attention"):
        raise c.refuse("use_bidirectional_attention", True, "memcalc models causal language models")
    return {
        "name": c.name(),
        "family": family,
        "vocab_size": read("vocab_size", "vocab_size"),
        "hidden_size": read("hidden_size", "hidden_size"),
        "num_layers": read("num_layers", "num_hidden_layers"),
        "num_heads": read("num_heads", "num_attention_heads"),
        "num_kv_heads": read("num_kv_heads", "num_key_value_heads"),
        "head_dim": read("head_dim", "head_dim"),
        "intermediate_size": read("intermediate_size", "intermediate_size"),
        "max_position_embeddings": c.get(
            "max_position_embeddings",
            "max_position_embeddings",
            defaults.get("max_position_embeddings", 8192),
        ),
        "activation": c.get("activation", "hidden_activation", "gelu_pytorch_tanh"),
        "tie_embeddings": c.get("tie_embeddings", "tie_word_embeddings", True),
        "qkv_bias": c.get("qkv_bias", "attention_bias", False),
        "out_bias": c.get("out_bias", "attention_bias", False),
        "attention_dropout": c.get("attention_dropout", "attention_dropout", 0.0),
    }


def _layers(c: HfConfig, n: Any, default: tuple[LayerType, ...], window: Any) -> dict[str, Any]:
    """``layer_types`` (or ``default``, one type per layer) as first_layers + layer_pattern."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return {"sliding_window": window}  # the spec names the bad num_hidden_layers
    types = c.layer_types(n) or default
    if window is None and LayerType.sliding in types:
        raise c.error("sliding_window", "missing (required for sliding_attention layers)")
    first, pattern = compress_layers(types)
    return {"sliding_window": window, "first_layers": first, "layer_pattern": pattern}


def gemma2_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """Gemma2Config keys; without ``layer_types`` even layers are local (``(i + 1) % 2``)."""
    c = HfConfig(cfg, source)
    fields = {**GEMMA2_DEFAULTS, **_sizes(c, Family.gemma2, {"num_key_value_heads": 4})}
    fields |= {
        "attention_softcap": c.get("attention_softcap", "attn_logit_softcapping"),
        "final_softcap": c.get("final_softcap", "final_logit_softcapping"),
    }
    if "attn_logit_softcapping" not in cfg:
        fields["attention_softcap"] = GEMMA2_DEFAULTS["attention_softcap"]
    if "final_logit_softcapping" not in cfg:
        fields["final_softcap"] = GEMMA2_DEFAULTS["final_softcap"]
    n = fields["num_layers"]
    window = c.get("sliding_window", "sliding_window", 4096)
    alternate = tuple(
        LayerType.sliding if (i + 1) % 2 else LayerType.full
        for i in range(n if isinstance(n, int) else 0)
    )
    return c.spec(fields | _layers(c, n, alternate, window))


def gemma3_from_hf(cfg: Mapping[str, Any], source: str) -> ModelSpec:
    """Gemma3TextConfig keys; without ``layer_types``, layer i is local unless (i + 1) is a
    multiple of ``sliding_window_pattern``."""
    c = HfConfig(cfg, source)
    fields = {**GEMMA3_DEFAULTS, **_sizes(c, Family.gemma3_text, GEMMA3_CONFIG)}
    fields["final_softcap"] = c.get("final_softcap", "final_logit_softcapping")
    n = fields["num_layers"]
    every = c.get("layer_pattern", "sliding_window_pattern", 6)
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise FieldError("sliding_window_pattern", f"expected a layer count, got {every!r}", source)
    window = c.get("sliding_window", "sliding_window", GEMMA3_CONFIG["sliding_window"])
    default = tuple(
        LayerType.sliding if (i + 1) % every else LayerType.full
        for i in range(n if isinstance(n, int) else 0)
    )
    return c.spec(fields | _layers(c, n, default, window))


def _to_hf(spec: ModelSpec, model_type: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model_type": model_type,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.mlp_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_size,
        "query_pre_attn_scalar": spec.head_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "hidden_activation": spec.activation.value,
        "tie_word_embeddings": spec.tie_embeddings,
        "attention_bias": spec.qkv_bias,
        "attention_dropout": spec.attention_dropout,
        "final_logit_softcapping": spec.final_softcap,
        "layer_types": hf_layer_types(spec),
        "sliding_window": spec.sliding_window or spec.max_position_embeddings,
        "use_cache": False,
    }
    if model_type == "gemma2":
        out["attn_logit_softcapping"] = spec.attention_softcap
    return out


def _check(spec: ModelSpec) -> None:
    attention_dropout_only(spec)
    if spec.qkv_bias != spec.out_bias:
        raise FieldError(
            "out_bias", "Gemma puts one attention_bias on q/k/v and o: must equal qkv_bias"
        )


def _check_gemma3(spec: ModelSpec) -> None:
    _check(spec)
    if spec.attention_softcap is not None:
        raise FieldError(
            "attention_softcap",
            "the gemma3_text implementation does not soft-cap attention logits "
            "(Gemma3Attention ignores attn_logit_softcapping); leave it out",
        )


FAMILIES = (
    FamilyDef(
        family=Family.gemma2,
        model_types=("gemma2",),
        impl=GEMMA2_IMPL,
        defaults=GEMMA2_DEFAULTS,
        dropouts=("attention_dropout",),
        from_hf=gemma2_from_hf,
        to_hf=lambda spec: _to_hf(spec, "gemma2"),
        check=_check,
    ),
    FamilyDef(
        family=Family.gemma3_text,
        model_types=("gemma3_text",),
        impl=GEMMA3_IMPL,
        defaults=GEMMA3_DEFAULTS,
        dropouts=("attention_dropout",),
        from_hf=gemma3_from_hf,
        to_hf=lambda spec: _to_hf(spec, "gemma3_text"),
        check=_check_gemma3,
    ),
)

LOCAL_GLOBAL = (LayerType.sliding, LayerType.full)
"""Gemma 2: local and global layers alternate."""
FIVE_TO_ONE = (LayerType.sliding,) * 5 + (LayerType.full,)
"""Gemma 3: five local layers, then a global one."""


def _gemma(
    name: str,
    family: Family,
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    intermediate: int,
    **features: Any,
) -> ModelSpec:
    return ModelSpec(
        name=name,
        family=family,
        vocab_size=vocab,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        **features,
    )


# google/gemma-2-*: vocab 256000, 8192 positions, local window 4096, soft-caps 50 / 30.
_GEMMA2 = {"max_position_embeddings": 8192, "sliding_window": 4096, "layer_pattern": LOCAL_GLOBAL}
# google/gemma-3-*: vocab 262208, 131072 positions, local window 1024.
_GEMMA3 = {"max_position_embeddings": 131_072, "sliding_window": 1024, "layer_pattern": FIVE_TO_ONE}
# google/gemma-3-270m, gemma-3-1b-pt (text only): vocab 262144, 32768 positions, window 512.
_GEMMA3_SMALL = {
    "max_position_embeddings": 32_768,
    "sliding_window": 512,
    "layer_pattern": FIVE_TO_ONE,
}

PRESETS = (
    _gemma("gemma-2-9b", Family.gemma2, 256_000, 3584, 42, 16, 8, 256, 14336, **_GEMMA2),
    _gemma("gemma-2-27b", Family.gemma2, 256_000, 4608, 46, 32, 16, 128, 36864, **_GEMMA2),
    _gemma("gemma-3-270m", Family.gemma3_text, 262_144, 640, 18, 4, 1, 256, 2048, **_GEMMA3_SMALL),
    _gemma("gemma-3-1b", Family.gemma3_text, 262_144, 1152, 26, 4, 1, 256, 6912, **_GEMMA3_SMALL),
    _gemma("gemma-3-4b", Family.gemma3_text, 262_208, 2560, 34, 8, 4, 256, 10240, **_GEMMA3),
    _gemma("gemma-3-12b", Family.gemma3_text, 262_208, 3840, 48, 16, 8, 256, 15360, **_GEMMA3),
    _gemma("gemma-3-27b", Family.gemma3_text, 262_208, 5376, 62, 32, 16, 128, 21504, **_GEMMA3),
)
