"""ModelSpec: the architecture of a decoder-only transformer, as far as memory cares.

Two families cover the models memcalc knows how to lower into an op graph:
``gpt2`` (LayerNorm, learned positions, GELU MLP, fused qkv with biases, tied embeddings) and
``llama`` (RMSNorm, rotary positions, gated SwiGLU MLP, separate q/k/v, GQA). Mistral and Qwen2
are ``llama`` with different sizes and biases. The family names the *code path* the real
implementation takes (which ops run and what they save), the other fields its sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memcalc.validate import FieldError, check, replace, spec_field

MAX_LAYERS = 10**6
"""Most decoder blocks a spec may have (real models have at most a few hundred)."""
MAX_WIDTH = 10**7
"""Largest hidden or MLP width a spec may have."""
MAX_VOCAB = 10**8
"""Largest vocabulary a spec may have."""


class Family(str, Enum):
    """Which implementation's op sequence the model follows."""

    gpt2 = "gpt2"
    """HF GPT2LMHeadModel: LayerNorm, learned positions, Conv1D (addmm) projections, GELU MLP."""
    llama = "llama"
    """HF LlamaForCausalLM (and Mistral, Qwen2): RMSNorm in fp32, RoPE, SwiGLU, GQA."""


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


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, with every size that changes memory.

    >>> ModelSpec(name="toy", family="gpt2", vocab_size=100, hidden_size=64, num_layers=2,
    ...           num_heads=4).head_dim
    16
    """

    name: str = spec_field("Display name.")
    family: Family = spec_field("Implementation whose ops (and saved tensors) are modelled.")
    vocab_size: int = spec_field(
        "Rows of the token embedding (and of the LM head).", ge=1, le=MAX_VOCAB
    )
    hidden_size: int = spec_field("Model width h.", ge=1, le=MAX_WIDTH)
    num_layers: int = spec_field("Number of decoder blocks N.", ge=1, le=MAX_LAYERS)
    num_heads: int = spec_field("Attention (query) heads a.", ge=1, le=MAX_WIDTH)
    num_kv_heads: int | None = spec_field(
        "Key/value heads (GQA/MQA); default: num_heads (MHA).", default=None, ge=1, le=MAX_WIDTH
    )
    intermediate_size: int | None = spec_field(
        "MLP width; default 4h for gpt2. Required for llama.", default=None, ge=1, le=MAX_WIDTH
    )
    max_position_embeddings: int = spec_field(
        "Rows of the learned position table (gpt2).", default=2048, ge=1, le=10**9
    )
    activation: Activation | None = spec_field(
        "MLP activation; default gelu_new (gpt2) or silu (llama).", default=None
    )
    tie_embeddings: bool | None = spec_field(
        "LM head shares the token embedding; default True for gpt2.", default=None
    )
    qkv_bias: bool | None = spec_field("Bias on q/k/v projections.", default=None)
    out_bias: bool | None = spec_field("Bias on the attention output projection.", default=None)
    mlp_bias: bool | None = spec_field("Bias on the MLP projections.", default=None)
    embedding_dropout: float = spec_field("embd_pdrop.", default=0.0, ge=0.0, lt=1.0)
    attention_dropout: float = spec_field("attn_pdrop.", default=0.0, ge=0.0, lt=1.0)
    residual_dropout: float = spec_field("resid_pdrop.", default=0.0, ge=0.0, lt=1.0)

    def __post_init__(self) -> None:
        check(self)

    def _check(self) -> None:
        if self.hidden_size % self.num_heads:
            raise FieldError(
                "num_heads",
                f"hidden_size ({self.hidden_size}) must be divisible by num_heads "
                f"({self.num_heads})",
            )
        if self.num_heads % self.kv_heads:
            raise FieldError(
                "num_kv_heads",
                f"num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.kv_heads})",
            )
        if self.family is Family.llama:
            if self.intermediate_size is None:
                raise FieldError("intermediate_size", "required for the llama family")
            if self.embedding_dropout or self.residual_dropout:
                raise FieldError(
                    "residual_dropout",
                    "the llama family has attention dropout only; embedding_dropout and "
                    "residual_dropout must be 0",
                )

    # Resolved defaults: one place decides what "not given" means for each family.
    @property
    def is_gpt2(self) -> bool:
        return self.family is Family.gpt2

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_size(self) -> int:
        """Width of the key (and of the value) projection: kv_heads * head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def mlp_size(self) -> int:
        return self.intermediate_size or 4 * self.hidden_size

    @property
    def act(self) -> Activation:
        if self.activation is not None:
            return self.activation
        return Activation.gelu_new if self.is_gpt2 else Activation.silu

    @property
    def tied(self) -> bool:
        return self.is_gpt2 if self.tie_embeddings is None else self.tie_embeddings

    @property
    def has_qkv_bias(self) -> bool:
        return self.is_gpt2 if self.qkv_bias is None else self.qkv_bias

    @property
    def has_out_bias(self) -> bool:
        return self.is_gpt2 if self.out_bias is None else self.out_bias

    @property
    def has_mlp_bias(self) -> bool:
        return self.is_gpt2 if self.mlp_bias is None else self.mlp_bias

    @property
    def has_dropout(self) -> bool:
        return max(self.embedding_dropout, self.attention_dropout, self.residual_dropout) > 0

    def with_dropout(self, rate: float) -> ModelSpec:
        """The same model with every dropout rate set to ``rate`` (the --dropout override).

        The llama family only has attention dropout, so only that one is set there.
        """
        if not self.is_gpt2:
            return self.replace(attention_dropout=rate)
        return self.replace(embedding_dropout=rate, attention_dropout=rate, residual_dropout=rate)

    def replace(self, **changes: object) -> ModelSpec:
        """A copy with ``changes``, validated."""
        return replace(self, **changes)
