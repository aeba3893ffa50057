"""ModelSpec: a decoder-only transformer as a set of architecture features, as far as memory
cares.

A spec names the features the implementation runs -- which norm and where, which attention
(heads, head_dim, q/k norms, rotary fraction, soft-capping, sliding windows, MLA), which MLP
(plain or gated, its activation, MoE) -- and its sizes. The lowering composes one building
block per feature (``graph/blocks/``); nothing in it branches on a model family. A family
(``spec/families/``) is the mapping from an HF ``config.json`` to these features, plus its
presets; ``family`` records which mapping (and HF implementation) a spec follows. A feature
left out takes its family's default (``FamilyDef.defaults``): ``ModelSpec(family="gpt2", ...)``
is a LayerNorm, learned-position, fused-qkv GELU model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

from memcalc.validate import FieldError, check, replace, spec_field


class _FromFamily:
    """The default of a feature field: the spec's family decides (``FamilyDef.defaults``),
    else the field's ``fallback``."""

    def __repr__(self) -> str:
        return "<from family>"


FROM_FAMILY: Any = _FromFamily()


def feature(doc: str, fallback: Any, **bounds: Any) -> Any:
    """A ModelSpec field whose default depends on the family (GPT-2: LayerNorm, learned
    positions...), ``fallback`` when the family says nothing."""
    f = spec_field(doc, default=FROM_FAMILY, **bounds)
    f.metadata = MappingProxyType({**f.metadata, "fallback": fallback})
    return f


MAX_LAYERS = 10**6
"""Most decoder blocks a spec may have (real models have at most a few hundred)."""
MAX_WIDTH = 10**7
"""Largest hidden or MLP width a spec may have."""
MAX_VOCAB = 10**8
"""Largest vocabulary a spec may have."""
MAX_EXPERTS = 10**5


class Family(str, Enum):
    """The HF implementation (``model_type``) a spec follows: its op sequence and names."""

    gpt2 = "gpt2"
    llama = "llama"
    mistral = "mistral"
    qwen2 = "qwen2"
    qwen3 = "qwen3"
    gemma2 = "gemma2"
    gemma3_text = "gemma3_text"
    phi3 = "phi3"
    gpt_neox = "gpt_neox"
    opt = "opt"
    olmo2 = "olmo2"
    mixtral = "mixtral"
    qwen2_moe = "qwen2_moe"
    qwen3_moe = "qwen3_moe"
    deepseek_v2 = "deepseek_v2"
    deepseek_v3 = "deepseek_v3"


@dataclass(frozen=True)
class FamilyRules:
    """What a family's implementation allows, as its ``FamilyDef`` (``spec/families/``)
    registers it when it is built: ModelSpec validates against it without importing the
    families (they import ModelSpec)."""

    defaults: Mapping[str, Any]
    """ModelSpec fields a spec of this family may leave out, and their values."""
    dropouts: tuple[str, ...]
    """The dropout rates the implementation has (what ``--dropout`` sets)."""
    check: Callable[[ModelSpec], None]
    """Rules a spec of this family must follow (raise a FieldError)."""


_FAMILY_RULES: dict[Family, FamilyRules] = {}


def register_family_rules(family: Family, rules: FamilyRules) -> None:
    """Called by each ``FamilyDef`` as it is built (importing ``memcalc.spec`` loads them)."""
    _FAMILY_RULES[family] = rules


def family_rules(family: Family) -> FamilyRules:
    """The registered rules of ``family``."""
    try:
        return _FAMILY_RULES[family]
    except KeyError:  # pragma: no cover - memcalc.spec imports every family module
        raise FieldError("family", f"{family.value} has no family module loaded") from None


class Activation(str, Enum):
    """MLP activation function, named as in HF ``activation_function`` / ``hidden_act``."""

    gelu_new = "gelu_new"
    """HF NewGELUActivation: tanh GELU written as Python ops; saves 4 tensors of the MLP width."""
    gelu_pytorch_tanh = "gelu_pytorch_tanh"
    """torch.nn.functional.gelu(approximate='tanh'): one fused op, saves its input."""
    gelu = "gelu"
    """torch.nn.functional.gelu (erf): one fused op, saves its input."""
    silu = "silu"
    """torch.nn.functional.silu: one fused op, saves its input (used gated, as SwiGLU)."""
    relu = "relu"
    """torch.relu: saves its output."""


class Norm(str, Enum):
    """The normalisation layer, as its HF implementation computes it."""

    layer_norm = "layer_norm"
    """nn.LayerNorm (``aten.native_layer_norm``): saves input, mean, rstd."""
    rms_norm = "rms_norm"
    """Llama RMSNorm: fp32 ``x * rsqrt(mean(x^2))``, then ``weight * y.to(dtype)``."""
    rms_norm_fp32_weight = "rms_norm_fp32_weight"
    """OLMo 2 RMSNorm: ``(weight * y_fp32).to(dtype)`` -- the weight multiply runs in fp32."""
    rms_norm_unit_offset = "rms_norm_unit_offset"
    """Gemma RMSNorm: ``y_fp32 * (1 + weight.float())``, then cast back."""


class NormPlacement(str, Enum):
    """Where a block's norms sit around its attention and MLP."""

    pre = "pre"
    """norm -> sublayer -> residual add (GPT-2, Llama)."""
    post = "post"
    """sublayer -> norm -> residual add (OLMo 2)."""
    sandwich = "sandwich"
    """norm -> sublayer -> norm -> residual add (Gemma 2 / 3)."""


class Positions(str, Enum):
    """How positions enter the model."""

    learned = "learned"
    """A learned position table added to the token embeddings (GPT-2, OPT)."""
    rotary = "rotary"
    """Rotary embeddings applied to q and k in every layer (Su et al. 2021)."""


class QkNorm(str, Enum):
    """A norm on the query and key projections before attention."""

    none = "none"
    per_head = "per_head"
    """Over each head's d features, after the head view (Qwen3, Gemma 3)."""
    whole = "whole"
    """Over all heads' features at once, before the head view (OLMo 2)."""


class Mlp(str, Enum):
    """The dense feed-forward layer."""

    plain = "plain"
    """up -> activation -> down (GPT-2, NeoX, OPT)."""
    gated = "gated"
    """down(act(gate(x)) * up(x)) (SwiGLU / GeGLU: Llama, Gemma)."""


class LayerType(str, Enum):
    """What one decoder layer runs: its attention span and its MLP."""

    full = "full"
    """Full causal attention, dense MLP."""
    sliding = "sliding"
    """Sliding-window attention (``sliding_window``), dense MLP."""
    full_moe = "full-moe"
    """Full attention, mixture-of-experts MLP."""
    sliding_moe = "sliding-moe"
    """Sliding-window attention, mixture-of-experts MLP."""

    @property
    def is_moe(self) -> bool:
        return self in (LayerType.full_moe, LayerType.sliding_moe)

    @property
    def is_sliding(self) -> bool:
        return self in (LayerType.sliding, LayerType.sliding_moe)


class Router(str, Enum):
    """How an MoE router turns logits into expert weights."""

    softmax = "softmax"
    """softmax in fp32, top-k (Mixtral, Qwen-MoE, DeepSeek-V2)."""
    sigmoid = "sigmoid"
    """sigmoid scores, biased top-k choice (DeepSeek-V3)."""


@dataclass(frozen=True)
class MoeSpec:
    """A mixture-of-experts MLP (Shazeer et al. 2017; Fedus et al. 2022): a router picks
    ``top_k`` of ``num_experts`` gated MLPs of width ``expert_size`` for every token; shared
    experts (DeepSeekMoE, Dai et al. 2024; Qwen-MoE) run on every token besides."""

    num_experts: int = spec_field("Routed experts E.", ge=1, le=MAX_EXPERTS)
    top_k: int = spec_field("Experts each token is sent to.", ge=1, le=MAX_EXPERTS)
    expert_size: int = spec_field("MLP width of one expert.", ge=1, le=MAX_WIDTH)
    shared_experts: int = spec_field(
        "Experts every token also goes through (DeepSeek, Qwen-MoE).", default=0, ge=0, le=64
    )
    shared_expert_size: int | None = spec_field(
        "Width of the shared expert MLP; default shared_experts x expert_size.",
        default=None,
        ge=1,
        le=MAX_WIDTH,
    )
    shared_expert_gate: bool = spec_field(
        "A sigmoid gate (h -> 1) on the shared expert's output (Qwen2-MoE).", default=False
    )
    router: Router = spec_field("Router scoring.", default=Router.softmax)
    router_fp32: bool = spec_field(
        "The router casts its input and weight to fp32 (DeepSeek).", default=False
    )
    norm_topk_prob: bool = spec_field("Top-k weights renormalised to sum to 1.", default=True)
    group_limited: bool = spec_field(
        "Top-k only among the experts of the topk_groups best of groups expert groups "
        "(DeepSeek-V2 group_limited_greedy; DeepSeek-V3's sigmoid router always does it).",
        default=False,
    )
    groups: int = spec_field(
        "Expert groups of group-limited routing (DeepSeek n_group).",
        default=1,
        ge=1,
        le=MAX_EXPERTS,
    )
    topk_groups: int = spec_field(
        "Groups a token's experts may come from (DeepSeek topk_group).",
        default=1,
        ge=1,
        le=MAX_EXPERTS,
    )
    routed_scaling: float = spec_field(
        "Routed weights are multiplied by this (routed_scaling_factor; saves nothing).",
        default=1.0,
        gt=0,
        le=1e3,
    )
    router_jitter: float = spec_field(
        "Multiplicative uniform noise on the router input in training (Mixtral "
        "router_jitter_noise; the noise is saved).",
        default=0.0,
        ge=0.0,
        lt=1.0,
    )
    aux_loss: bool = spec_field(
        "Router logits of every MoE layer kept for the load-balancing loss "
        "(HF output_router_logits).",
        default=False,
    )
    capacity_factor: float | None = spec_field(
        "Token capacity per expert as a multiple of its fair share (None: dropless, as HF).",
        default=None,
        gt=0,
        le=64,
    )

    def __post_init__(self) -> None:
        check(self)

    def _check(self) -> None:
        if self.top_k > self.num_experts:
            raise FieldError(
                "top_k", f"must be at most num_experts ({self.num_experts}), got {self.top_k}"
            )
        if self.num_experts % self.groups:
            raise FieldError(
                "groups", f"must divide num_experts ({self.num_experts}), got {self.groups}"
            )
        if self.topk_groups > self.groups:
            raise FieldError(
                "topk_groups", f"must be at most groups ({self.groups}), got {self.topk_groups}"
            )
        per_group = self.num_experts // self.groups
        if self.group_limited and self.top_k > self.topk_groups * per_group:
            raise FieldError(
                "top_k",
                f"must be at most topk_groups x experts per group "
                f"({self.topk_groups} x {per_group}), got {self.top_k}",
            )
        if self.router is Router.sigmoid and (not self.group_limited or per_group < 2):
            raise FieldError(
                "groups",
                "the sigmoid router (DeepSeek-V3) ranks groups by their two best experts: "
                f"group_limited with at least 2 experts per group, got {per_group}",
            )
        if self.shared_expert_gate and not self.shared_size:
            raise FieldError("shared_expert_gate", "needs a shared expert (shared_experts >= 1)")

    @property
    def shared_size(self) -> int:
        if self.shared_expert_size is not None:
            return self.shared_expert_size
        return self.shared_experts * self.expert_size


@dataclass(frozen=True)
class MlaSpec:
    """DeepSeek multi-head latent attention (DeepSeek-AI 2024, sec. 2.1): low-rank q and kv
    projections, decoupled rotary dims, a value head dim of its own."""

    kv_lora_rank: int = spec_field(
        "Rank of the compressed key/value projection.", ge=1, le=MAX_WIDTH
    )
    qk_nope_head_dim: int = spec_field(
        "Per-head query/key dims without rotary.", ge=1, le=MAX_WIDTH
    )
    qk_rope_head_dim: int = spec_field("Per-head query/key dims with rotary.", ge=2, le=MAX_WIDTH)
    v_head_dim: int = spec_field("Per-head value dims.", ge=1, le=MAX_WIDTH)
    q_lora_rank: int | None = spec_field(
        "Rank of the compressed query projection (None: a plain q_proj).",
        default=None,
        ge=1,
        le=MAX_WIDTH,
    )
    rope_interleave: bool = spec_field(
        "Rotary on interleaved pairs (DeepSeek-V3 rope_interleave; the same saved bytes as "
        "rotate_half).",
        default=True,
    )

    def __post_init__(self) -> None:
        check(self)

    def _check(self) -> None:
        if self.qk_rope_head_dim % 2:
            raise FieldError(
                "qk_rope_head_dim", f"must be even (rotary pairs), got {self.qk_rope_head_dim}"
            )

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer: its sizes and architecture features.

    >>> ModelSpec(name="toy", family="gpt2", vocab_size=100, hidden_size=64, num_layers=2,
    ...           num_heads=4).head_size
    16
    """

    name: str = spec_field("Display name.")
    family: Family = spec_field("The HF implementation (model_type) whose ops are modelled.")
    vocab_size: int = spec_field(
        "Rows of the token embedding (and of the LM head).", ge=1, le=MAX_VOCAB
    )
    hidden_size: int = spec_field("Model width h.", ge=1, le=MAX_WIDTH)
    num_layers: int = spec_field("Number of decoder blocks N.", ge=1, le=MAX_LAYERS)
    num_heads: int = spec_field("Attention (query) heads a.", ge=1, le=MAX_WIDTH)
    num_kv_heads: int | None = spec_field(
        "Key/value heads (GQA/MQA); default: num_heads (MHA).", default=None, ge=1, le=MAX_WIDTH
    )
    head_dim: int | None = spec_field(
        "Per-head width d; default hidden_size / num_heads.", default=None, ge=1, le=MAX_WIDTH
    )
    intermediate_size: int | None = spec_field(
        "Dense MLP width; default 4h.", default=None, ge=1, le=MAX_WIDTH
    )
    max_position_embeddings: int = feature(
        "Longest sequence (rows of a learned position table).",
        2048,
        ge=1,
        le=10**9,
    )
    norm: Norm = feature(
        "Normalisation layer.",
        Norm.rms_norm,
    )
    norm_bias: bool = feature(
        "LayerNorm has a bias.",
        False,
    )
    norm_placement: NormPlacement = feature(
        "Where the norms sit in a block.",
        NormPlacement.pre,
    )
    parallel_residual: bool = feature(
        "x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX, GPT-J).",
        False,
    )
    positions: Positions = feature(
        "How positions enter the model.",
        Positions.rotary,
    )
    position_offset: int = feature(
        "Extra rows of a learned position table (OPT: 2).",
        0,
        ge=0,
        le=1024,
    )
    rotary_fraction: float = feature(
        "Fraction of each head's dims that rotary touches (NeoX rotary_pct, Phi).",
        1.0,
        gt=0,
        le=1,
    )
    qk_norm: QkNorm = feature(
        "Norm on q and k before attention.",
        QkNorm.none,
    )
    fused_qkv: bool = feature(
        "One projection computes q, k and v (GPT-2 c_attn, Phi-3, NeoX).",
        False,
    )
    mlp: Mlp = feature(
        "Dense MLP structure.",
        Mlp.gated,
    )
    activation: Activation = feature(
        "MLP activation.",
        Activation.silu,
    )
    fused_gate_up: bool = feature(
        "One projection computes gate and up (Phi-3).",
        False,
    )
    qkv_bias: bool = feature(
        "Bias on q/k/v projections.",
        False,
    )
    out_bias: bool = feature(
        "Bias on the attention output projection.",
        False,
    )
    mlp_bias: bool = feature(
        "Bias on the MLP projections.",
        False,
    )
    tie_embeddings: bool = feature(
        "LM head shares the token embedding.",
        False,
    )
    embedding_scale: bool = feature(
        "Token embeddings multiplied by sqrt(h) (Gemma).",
        False,
    )
    attention_softcap: float | None = feature(
        "Attention logits soft-capped: cap * tanh(scores / cap) (Gemma 2).",
        None,
        gt=0,
        le=1e6,
    )
    final_softcap: float | None = feature(
        "Output logits soft-capped likewise (Gemma 2).",
        None,
        gt=0,
        le=1e6,
    )
    sliding_window: int | None = feature(
        "Tokens a sliding-window layer attends to.",
        None,
        ge=1,
        le=10**9,
    )
    layer_pattern: tuple[LayerType, ...] = feature(
        "Layer types, repeated over the layers after first_layers.",
        (LayerType.full,),
    )
    first_layers: tuple[LayerType, ...] = feature(
        "Layer types of the first layers, before the pattern starts (DeepSeek's dense layers).",
        (),
    )
    moe: MoeSpec | None = feature(
        "The mixture-of-experts MLP of moe layers.",
        None,
    )
    mla: MlaSpec | None = feature(
        "Multi-head latent attention (DeepSeek).",
        None,
    )
    embedding_dropout: float = spec_field("Dropout on the embeddings.", default=0.0, ge=0.0, lt=1.0)
    attention_dropout: float = spec_field(
        "Dropout on the attention probabilities.", default=0.0, ge=0.0, lt=1.0
    )
    residual_dropout: float = spec_field(
        "Dropout on each sublayer's output before the residual add.", default=0.0, ge=0.0, lt=1.0
    )

    def __post_init__(self) -> None:
        family = self.family
        if isinstance(family, str) and not isinstance(family, Family):
            try:
                family = Family(family)
            except ValueError:
                family = None
        if isinstance(family, Family):
            defaults = family_rules(family).defaults
        else:
            defaults = {}  # check() names the bad family
        for f in dataclasses.fields(self):
            if getattr(self, f.name) is FROM_FAMILY:
                object.__setattr__(self, f.name, defaults.get(f.name, f.metadata["fallback"]))
        check(self)

    def _check(self) -> None:
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise FieldError(
                "num_heads",
                f"hidden_size ({self.hidden_size}) must be divisible by num_heads "
                f"({self.num_heads}) unless head_dim is given",
            )
        if self.num_heads % self.kv_heads:
            raise FieldError(
                "num_kv_heads",
                f"num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.kv_heads})",
            )
        if not self.layer_pattern:
            raise FieldError("layer_pattern", "must list at least one layer type")
        if len(self.first_layers) > self.num_layers:
            raise FieldError(
                "first_layers", f"lists more layers than num_layers ({self.num_layers})"
            )
        types = set(self.layer_pattern) | set(self.first_layers)
        if any(t.is_moe for t in types) and self.moe is None:
            raise FieldError("moe", "required when a layer type is an moe layer")
        if any(t.is_sliding for t in types) and self.sliding_window is None:
            raise FieldError("sliding_window", "required when a layer type is sliding")
        if (
            self.mlp is Mlp.gated
            and self.intermediate_size is None
            and not all(t.is_moe for t in types)
        ):
            raise FieldError("intermediate_size", "required for a gated MLP")
        if self.mla is not None and self.kv_heads != self.num_heads:
            raise FieldError(
                "num_kv_heads",
                f"multi-head latent attention expands keys and values to every head: must "
                f"equal num_heads ({self.num_heads}), got {self.kv_heads}",
            )
        family_rules(self.family).check(self)

    def replace(self, **changes: object) -> ModelSpec:
        """A copy with ``changes``, validated."""
        return replace(self, **changes)

    # Derived sizes: one place decides what "not given" means.
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_size(self) -> int:
        """Per-head width d (``head_dim``, or h / heads)."""
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def q_size(self) -> int:
        """Width of the query projection: heads * d (h unless head_dim says otherwise)."""
        return self.num_heads * self.head_size

    @property
    def kv_size(self) -> int:
        """Width of the key (and of the value) projection: kv_heads * d."""
        return self.kv_heads * self.head_size

    @property
    def mlp_size(self) -> int:
        return self.intermediate_size or 4 * self.hidden_size

    @property
    def rotary_dim(self) -> int:
        """Dims of each head that rotary touches (HF: int(d * fraction); MLA: its decoupled
        rotary dims, qk_rope_head_dim)."""
        if self.mla is not None:
            return self.mla.qk_rope_head_dim
        return int(self.head_size * self.rotary_fraction)

    @property
    def moe_layers(self) -> int:
        """How many layers are mixture-of-experts layers (without a loop over the layers)."""
        head = self.first_layers[: self.num_layers]
        count = sum(t.is_moe for t in head)
        full, rest = divmod(self.num_layers - len(head), len(self.layer_pattern))
        pattern = [t.is_moe for t in self.layer_pattern]
        return count + full * sum(pattern) + sum(pattern[:rest])

    @property
    def has_dropout(self) -> bool:
        return max(self.embedding_dropout, self.attention_dropout, self.residual_dropout) > 0

    def layer_type(self, i: int) -> LayerType:
        """The type of layer ``i``."""
        if i < len(self.first_layers):
            return self.first_layers[i]
        return self.layer_pattern[(i - len(self.first_layers)) % len(self.layer_pattern)]

    def with_dropout(self, rate: float) -> ModelSpec:
        """The same model with every dropout rate it has set to ``rate`` (the --dropout
        override). A family without embedding or residual dropout (Llama has attention dropout
        only) keeps those at 0: its implementation has no such dropout to turn on."""
        return self.replace(**{f: rate for f in family_rules(self.family).dropouts})
