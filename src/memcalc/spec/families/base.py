"""What a model family is: how its HF implementation writes the ops (``Implementation``), and
the mapping between its ``config.json`` and a ModelSpec (``FamilyDef``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, TypeVar

from memcalc.errors import MemcalcError
from memcalc.frameworks.features import NormKernel, RotaryCache, SdpaGqa
from memcalc.periodic import smallest_period
from memcalc.spec.model import Family, FamilyRules, LayerType, ModelSpec, register_family_rules
from memcalc.spec.peft_lora import PeftMoeConversion
from memcalc.validate import FieldError

LLAMA_NAMES: dict[str, str] = {
    # op names of one block, by role (Llama-style unless a family says otherwise)
    "attn_norm": "input_layernorm",
    "attn_post_norm": "post_attention_layernorm",
    "mlp_norm": "post_attention_layernorm",
    "mlp_post_norm": "post_feedforward_layernorm",
    "q": "attn.q_proj",
    "k": "attn.k_proj",
    "v": "attn.v_proj",
    "qkv": "attn.qkv_proj",
    "q_norm": "attn.q_norm",
    "k_norm": "attn.k_norm",
    "rope": "attn.rope",
    "o": "attn.o_proj",
    "attn_dropout": "attn.resid_dropout",
    "attn_residual": "attn.residual_add",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "gate_up": "mlp.gate_up_proj",
    "act": "mlp.act",
    "gate_mul_up": "mlp.gate_mul_up",
    "down": "mlp.down_proj",
    "mlp_dropout": "mlp.dropout",
    "mlp_residual": "mlp.residual_add",
    # multi-head latent attention (DeepSeek)
    "q_a": "attn.q_a_proj",
    "q_a_norm": "attn.q_a_layernorm",
    "q_b": "attn.q_b_proj",
    "kv_a": "attn.kv_a_proj_with_mqa",
    "kv_a_norm": "attn.kv_a_layernorm",
    "kv_b": "attn.kv_b_proj",
    # mixture of experts (the 5.x layout: a router, fused 3-D expert weights)
    "router": "mlp.gate",
    "experts": "mlp.experts",
    "shared_experts": "mlp.shared_experts",
    "shared_expert_gate": "mlp.shared_expert_gate",
    "aux_loss": "aux_loss",
    # outside the blocks
    "embed_tokens": "embed_tokens",
    "embed_positions": "embed_positions",
    "embed_dropout": "embed_dropout",
    "final_norm": "norm",
    "lm_head": "lm_head",
}


@dataclass(frozen=True)
class Implementation:
    """How the family's HF code is written, where that changes what is saved or named."""

    names: Mapping[str, str] = field(default_factory=lambda: dict(LLAMA_NAMES))
    """Op names by role."""
    softmax_in_fp32: bool = True
    """Eager softmax runs in fp32 (``softmax(..., dtype=float32)``); False: in the scores'
    dtype (GPT-2)."""
    probs_to_query_dtype: bool = True
    """Eager probabilities are cast to q's dtype (Llama); False: to the activation dtype."""
    router_weights_to_logits_dtype: bool = False
    """The routing weights are cast back to the router logits' dtype (Qwen-MoE
    ``router_top_value.to(router_logits.dtype)``); otherwise they stay in the router's fp32 and
    the experts' outputs are weighted in fp32 (Mixtral, DeepSeek)."""
    shared_expert_first: bool = False
    """The shared expert runs before the router (Qwen2-MoE); otherwise after the routed
    experts (DeepSeek)."""
    router_weight_fp32: bool = False
    """``from_pretrained`` keeps the router weight in fp32 whatever the model's dtype
    (``_keep_in_fp32_modules_strict = ["gate.weight"]``: DeepSeek-V2 / V3 in transformers 5),
    so its ``weight.type(torch.float32)`` makes no copy; an engine that casts every parameter
    (DeepSpeed's ``_cast_module_mixed_precision`` keeps only buffers) makes it 16-bit again."""
    complex_rotary: bool = False
    """The rotary module returns one complex64 ``freqs_cis`` (1, s, r/2) and q/k are rotated
    as complex numbers, then cast back to their dtype (DeepSeek-V2); otherwise cos and sin
    (1, s, r) in the stream dtype."""
    checkpoint_keeps_position_ids: bool = True
    """Decoder layers get ``position_ids`` (1 x s, int64) by keyword: a checkpoint's closure
    keeps them."""
    position_ids_batched: bool = False
    """The model builds its position ids per sequence, (b x s) int64, from an all-ones
    attention mask (``OPTDecoder.forward``: ``cumsum(mask) * mask - 1``), not (1 x s)."""
    rotary_per_span: bool = False
    """One rotary (cos, sin) pair per attention span that the layers use, each shared by the
    layers of its span (``Gemma3RotaryEmbedding``: local and global theta)."""
    rotary_tables_fp32: bool = False
    """The rotary module returns cos and sin in fp32 whatever the model dtype
    (``Olmo2RotaryEmbedding.forward`` does not cast them)."""
    rotary_keeps_q_dtype: bool = False
    """RoPE casts the rotated q and k back to q's dtype (``Olmo2``'s
    ``apply_rotary_pos_emb``: ``q_embed.to(q_type)``); otherwise they take the promoted dtype
    of q and the tables (fp32 under autocast)."""
    rotary_concat: bool = False
    """RoPE concatenates the rotated and the passed-through dims (``torch.cat``: NeoX, Phi-3),
    so q and k come out contiguous head-major, (b, a, s, d); a fused kernel then lays its
    output out the same way, and ``transpose(1, 2)...contiguous()`` before the output
    projection copies it (eager attention makes its output contiguous itself)."""
    sdpa_refused: str | None = None
    """Why the HF implementation refuses ``attn_implementation="sdpa"``
    (``_supports_sdpa = False``); None when it supports SDPA."""
    module_order: tuple[str, ...] = (
        "attn.q_proj",
        "attn.k_proj",
        "attn.v_proj",
        "attn.qkv_proj",
        "attn.o_proj",
        "attn.",
        "mlp.",
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    )
    """The block's modules in the order HF's decoder layer registers them (``__init__``), as
    op-level name prefixes: a weight takes the place of the first prefix it starts with
    (``model.parameters()`` order; Llama's ``LlamaDecoderLayer``: self_attn (q, k, v, o),
    mlp, input_layernorm, post_attention_layernorm). Empty: the forward order (GPT-2)."""
    param_prefix: str = "model.layers.{layer}."
    """How HF names a block's parameters: this prefix + the op-level name."""
    param_renames: Mapping[str, str] = field(default_factory=lambda: {"attn.": "self_attn."})
    """Op-level name prefixes HF spells differently in parameter names."""
    outside_names: Mapping[str, str] = field(
        default_factory=lambda: {
            "embed_tokens.weight": "model.embed_tokens.weight",
            "norm.weight": "model.norm.weight",
            "lm_head.weight": "lm_head.weight",
        }
    )
    """HF names of the parameters outside the blocks."""

    norm_kernel: NormKernel = NormKernel.family
    """Which code runs the RMSNorms (the family's module, or ``torch.nn.RMSNorm``)."""
    sdpa_gqa: SdpaGqa = SdpaGqa.hf
    """How grouped-query attention reaches SDPA (HF's ``use_gqa_in_sdpa`` rule)."""
    rotary_tables_saved: bool = True
    """The rotary module makes its tables in forward (HF ``*RotaryEmbedding.forward``), once
    for every layer; False: they are a module buffer (torchtitan's RoPE cache), not an
    activation."""
    rotary_gathered: bool = False
    """Per-sequence positions are passed, so every layer gathers its own rotary table from the
    cache (torchtitan ``_reshape_for_broadcast``: ``torch.gather`` into a (b, s, 1, width)
    tensor, saved by the q/k multiplies): complex64 of width d/2 (``complex_rotary``), else
    fp32 cos and sin of width 2d."""
    qkv_copies: bool = False
    """One fused q/k/v projection whose output is split and copied into contiguous q, k and v
    (torchtitan 0.3 ``FusedQKVLinear``), rather than three projections or three views."""
    rotary_cache: RotaryCache = RotaryCache.none
    """Where the rotary table lives on the device for the whole step: nowhere worth
    counting (HF keeps a d/2 ``inv_freq``), one cache per layer (torchtitan 0.3: every
    attention's ``rope`` module holds ``cache``, resized to the training sequence), or one for
    the model (0.2.2's ``freqs_cis``)."""
    labels_view: bool = False
    """The loss's target is a view of the batch's labels (T int64), not HF's padded and
    shifted copy."""

    lora_targets: tuple[str, ...] | None = ("q_proj", "v_proj")
    """PEFT's default LoRA targets for the family
    (peft 0.21.2 ``utils/constants.py`` ``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``);
    None: the model type has no entry and PEFT asks for target_modules."""
    peft_moe: PeftMoeConversion | None = None
    """PEFT's transformers-5 MoE target conversion for the family (``peft_lora.py``): the
    fused experts and the router adapted as parameters; None: not converted."""

    def mlp_name(self, prefix: str) -> Callable[[str], str]:
        """Op names of an MLP under ``prefix`` (``mlp``, or e.g. a shared expert's)."""

        def name(role: str) -> str:
            full = self.names[role]
            return prefix + full[3:] if full.startswith("mlp") else full

        return name

    def op_module(self, hf_module: str) -> str:
        """The op-level leaf name of a module outside the blocks as HF names it (GPT-2's
        ``wte`` is the ``embed_tokens`` op: ``outside_names``); other names as given."""
        for short, full in self.outside_names.items():
            op, _, _ = short.rpartition(".")
            module, _, _ = full.rpartition(".")
            if module.rsplit(".", 1)[-1] == hf_module:
                return op
        return hf_module

    def param_name(self, short: str, layer: int | None) -> str:
        """The HF name of a parameter given its op-level name (``layer`` None: outside)."""
        if layer is None:
            return self.outside_names.get(short, short)
        for old, new in self.param_renames.items():
            if short.startswith(old):
                short = new + short[len(old) :]
                break
        return self.param_prefix.format(layer=layer) + short


@dataclass(frozen=True)
class FamilyDef:
    """One family: its implementation traits, spec defaults and config.json mapping."""

    family: Family
    model_types: tuple[str, ...]
    """HF ``model_type`` values it reads."""
    impl: Implementation
    defaults: Mapping[str, Any]
    """ModelSpec fields a spec file of this family may leave out."""
    dropouts: tuple[str, ...]
    """The dropout rates the implementation has (what ``--dropout`` sets)."""
    from_hf: Callable[[Mapping[str, Any], str], ModelSpec]
    """config.json -> ModelSpec."""
    to_hf: Callable[[ModelSpec], dict[str, Any]]
    """ModelSpec -> config.json (to build the HF model for measure / trace)."""
    check: Callable[[ModelSpec], None] = lambda spec: None
    """Family rules a spec must follow (e.g. Llama has no residual dropout)."""
    attribute_map: Mapping[str, str] = field(default_factory=dict)
    """The HF config class's ``attribute_map`` (alias -> canonical key): a config.json may
    spell a key either way (``XConfig.to_json_file`` writes the canonical one, published
    files often the alias), and both read the same (``AliasedConfig``)."""

    def __post_init__(self) -> None:
        register_family_rules(self.family, FamilyRules(self.defaults, self.dropouts, self.check))


class AliasedConfig(Mapping[str, Any]):
    """A config.json in which each key of a config class's ``attribute_map`` answers to its
    alias and its canonical name alike (``PretrainedConfig.__getattribute__`` reads an alias
    through the map; ``to_json_file`` writes canonical names).

    >>> cfg = AliasedConfig({"num_local_experts": 8}, {"num_experts": "num_local_experts"})
    >>> cfg["num_experts"], "num_experts" in cfg, cfg.spelled("num_experts")
    (8, True, 'num_local_experts')
    """

    def __init__(self, cfg: Mapping[str, Any], attribute_map: Mapping[str, str]) -> None:
        self._cfg = cfg
        self._names: dict[str, tuple[str, ...]] = {}
        for alias, canonical in attribute_map.items():
            self._names.setdefault(alias, (alias,))
            self._names[alias] += (canonical,)
            self._names.setdefault(canonical, (canonical,))
            self._names[canonical] += (alias,)

    def spelled(self, key: str) -> str:
        """``key`` as the file spells it (its alias or canonical name), else ``key``."""
        return next((k for k in self._names.get(key, ()) if k in self._cfg), key)

    def names(self, key: str) -> tuple[str, ...]:
        """``key`` and its other spellings."""
        return self._names.get(key, (key,))

    def __getitem__(self, key: str) -> Any:
        return self._cfg[self.spelled(key)]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.spelled(key) in self._cfg

    def __iter__(self) -> Iterator[str]:
        return iter(self._cfg)

    def __len__(self) -> int:
        return len(self._cfg)


T = TypeVar("T")

MAX_HEAD = 64
"""Longest run of leading layers ``compress_layers`` tries before the repeating pattern."""


def compress_layers(kinds: Sequence[T]) -> tuple[tuple[T, ...], tuple[T, ...]]:
    """``(first_layers, layer_pattern)`` of an explicit per-layer list (HF ``layer_types``):
    the fewest leading layers plus the shortest pattern that, repeated and cut at the end,
    give ``kinds`` back.

    >>> compress_layers("SSSSSFSSSSSFSSSS")   # Gemma 3: five sliding layers, one full
    ((), ('S', 'S', 'S', 'S', 'S', 'F'))
    >>> compress_layers("FFFSSSSS")           # Qwen: max_window_layers = 3
    (('F', 'F', 'F'), ('S',))
    """
    kinds = tuple(kinds)
    best: tuple[tuple[T, ...], tuple[T, ...]] = ((), kinds)
    for head in range(min(len(kinds), MAX_HEAD + 1)):
        period = smallest_period(kinds[head:])
        if head + period < len(best[0]) + len(best[1]):  # ties: the shorter head
            best = (kinds[:head], kinds[head : head + period])
    return best


HF_LAYER_TYPES = {"full_attention": LayerType.full, "sliding_attention": LayerType.sliding}
"""HF ``layer_types`` entries of the dense families."""


def hf_layer_types(spec: ModelSpec) -> list[str]:
    """The HF ``layer_types`` list of ``spec`` (dense layer types only), for ``to_hf``."""
    names = {t: name for name, t in HF_LAYER_TYPES.items()}
    return [names[spec.layer_type(i)] for i in range(spec.num_layers)]


class HfConfig:
    """A config.json being read: values by key, with the key named in every error."""

    def __init__(self, cfg: Mapping[str, Any], source: str) -> None:
        self.cfg, self.source = cfg, source
        self.keys: dict[str, str] = {}
        """ModelSpec field -> the config key it was read from (for error messages)."""

    def get(self, field_name: str, key: str, default: Any = None) -> Any:
        """``cfg[key]`` (``default`` when absent or null), remembered as ``field_name``'s."""
        self.keys[field_name] = self.spelled(key)
        value = self.cfg.get(key)
        return default if value is None else value

    def require(self, field_name: str, key: str) -> Any:
        self.keys[field_name] = self.spelled(key)
        if key not in self.cfg or self.cfg[key] is None:
            model_type = self.cfg.get("model_type")
            names = " (or ".join(self._names(key)) + ")" * (len(self._names(key)) - 1)
            raise MemcalcError(f"{self.source}: {names}: missing (required for {model_type})")
        return self.cfg[key]

    def flag(self, field_name: str, key: str, default: bool = False) -> bool:
        """``cfg[key]`` as a boolean: JSON true or false only (``1.5``, ``-1``, ``1`` or
        ``"yes"`` are refused, naming the key), ``default`` when absent or null."""
        value = self.get(field_name, key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def spelled(self, key: str) -> str:
        """``key`` as this file spells it (an ``attribute_map`` alias or canonical name)."""
        return self.cfg.spelled(key) if isinstance(self.cfg, AliasedConfig) else key

    def _names(self, key: str) -> tuple[str, ...]:
        return self.cfg.names(key) if isinstance(self.cfg, AliasedConfig) else (key,)

    def refuse(self, key: str, value: Any, why: str) -> MemcalcError:
        """The error for a value of ``key`` that memcalc does not model, and why."""
        return self.error(key, f"{value!r} is not modelled ({why})")

    def layer_types(self, n: int, key: str = "layer_types") -> tuple[LayerType, ...] | None:
        """``cfg[key]``: one HF layer type per layer (``full_attention`` /
        ``sliding_attention``), or None when the file has none."""
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"expected a list of layer type names, got {value!r}")
        if len(value) != n:
            raise self.error(key, f"lists {len(value)} layers, num_hidden_layers is {n}")
        bad = sorted({v for v in value if v not in HF_LAYER_TYPES})
        if bad:
            raise self.error(
                key, f"unknown layer type {bad[0]!r}; memcalc reads: {', '.join(HF_LAYER_TYPES)}"
            )
        return tuple(HF_LAYER_TYPES[v] for v in value)

    def spec(self, fields: Mapping[str, Any]) -> ModelSpec:
        """The ModelSpec of ``fields``; a bad value names the config key it came from."""
        from memcalc.validate import FieldError, parse

        try:
            return parse(ModelSpec, dict(fields))
        except FieldError as e:
            head, _, rest = e.field.partition(".")
            key = self.keys.get(e.field) or self.keys.get(head, head) + (f".{rest}" if rest else "")
            raise FieldError(key, e.problem, self.source) from None

    def error(self, key: str, problem: str) -> FieldError:
        """A one-line error about config key ``key`` of this file."""
        return FieldError(self.spelled(key), problem, self.source)

    def name(self) -> str:
        """The model's name: ``_name_or_path``; else the file's name (``llama-2-7b-config``),
        or its folder's when the file is a plain ``config.json`` (an HF snapshot folder);
        else its architecture, else its model_type."""
        named = self.cfg.get("_name_or_path")
        if isinstance(named, str) and named.strip():
            return named.strip().rstrip("/").split("/")[-1]
        path = PurePath(self.source)
        if path.suffix == ".json" and path.stem != "config":
            return path.stem
        if path.suffix == ".json" and path.parent.name not in ("", "."):
            return path.parent.name
        arch = self.cfg.get("architectures")
        if isinstance(arch, list) and arch and isinstance(arch[0], str):
            return arch[0]
        return str(self.cfg.get("model_type"))


# Shared by the Llama-style families. A family module imports only this module (never another
# family's): its presets are built when it is imported, which loads every family.


def llama_attention(c: HfConfig, family: Family) -> dict[str, Any]:
    """The keys every Llama-style config.json names the same way, dense or MoE (sizes but the
    MLP's, activation, tying, attention dropout)."""
    return {
        "name": c.name(),
        "family": family,
        "vocab_size": c.require("vocab_size", "vocab_size"),
        "hidden_size": c.require("hidden_size", "hidden_size"),
        "num_layers": c.require("num_layers", "num_hidden_layers"),
        "num_heads": c.require("num_heads", "num_attention_heads"),
        "num_kv_heads": c.get("num_kv_heads", "num_key_value_heads"),
        "head_dim": c.get("head_dim", "head_dim"),
        "max_position_embeddings": c.get(
            "max_position_embeddings", "max_position_embeddings", 2048
        ),
        "activation": c.get("activation", "hidden_act", "silu"),
        "tie_embeddings": c.get("tie_embeddings", "tie_word_embeddings", False),
        "attention_dropout": c.get("attention_dropout", "attention_dropout", 0.0),
    }


def llama_keys(c: HfConfig, family: Family) -> dict[str, Any]:
    """``llama_attention`` and the dense MLP's width."""
    return llama_attention(c, family) | {
        "intermediate_size": c.require("intermediate_size", "intermediate_size")
    }


def attention_to_hf(spec: ModelSpec, model_type: str) -> dict[str, Any]:
    """The config.json keys of ``llama_attention``."""
    return {
        "model_type": model_type,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "hidden_act": spec.activation.value,
        "tie_word_embeddings": spec.tie_embeddings,
        "attention_dropout": spec.attention_dropout,
        "use_cache": False,
    }


def llama_to_hf(spec: ModelSpec, model_type: str) -> dict[str, Any]:
    out = attention_to_hf(spec, model_type) | {"intermediate_size": spec.mlp_size}
    if model_type == "llama":
        if spec.qkv_bias != spec.out_bias:
            raise MemcalcError(
                "--framework hf: LlamaConfig puts one attention_bias on q/k/v and o; q/k/v bias "
                "without an output bias is Qwen2 (family = qwen2)"
            )
        out |= {"attention_bias": spec.qkv_bias, "mlp_bias": spec.mlp_bias}
    if model_type == "mistral":
        # MistralConfig's sliding_window defaults to 4096: no window must be written as null
        out["sliding_window"] = spec.sliding_window
    if spec.sliding_window is not None:
        out["sliding_window"] = spec.sliding_window
        if model_type == "qwen2":
            out |= {"use_sliding_window": True, "max_window_layers": len(spec.first_layers)}
    return out


def require(ok: bool, model_type: str, what: str) -> None:
    """A spec feature the HF config of ``model_type`` cannot express."""
    if not ok:
        raise MemcalcError(f"--framework hf: {model_type} cannot express this spec: {what}")


def attention_dropout_only(spec: ModelSpec) -> None:
    """Family check of the implementations whose only dropout is on the attention
    probabilities."""
    if spec.embedding_dropout or spec.residual_dropout:
        raise FieldError(
            "residual_dropout",
            f"the {spec.family.value} implementation has attention dropout only; "
            "embedding_dropout and residual_dropout must be 0",
        )


def layer_types(spec: ModelSpec) -> list[LayerType]:
    """The type of every layer, in order -- O(layers): for writing an HF config."""
    return [spec.layer_type(i) for i in range(spec.num_layers)]


def split_layers(types: list[LayerType], regular_from: int, period: int) -> dict[str, Any]:
    """``first_layers`` and ``layer_pattern`` for a stack whose layer types repeat every
    ``period`` layers from layer ``regular_from`` on (what comes before is listed)."""
    head = min(regular_from, len(types))
    if head == len(types):
        return {"first_layers": tuple(types), "layer_pattern": (types[-1],)}
    return {
        "first_layers": tuple(types[:head]),
        "layer_pattern": tuple(types[head : head + period]),
    }
