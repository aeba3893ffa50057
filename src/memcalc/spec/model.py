"""ModelSpec: the architecture of a decoder-only transformer, as far as memory cares.

Two families cover the models memcalc knows how to lower into an op graph:
``gpt2`` (LayerNorm, learned positions, GELU MLP, fused qkv with biases, tied embeddings) and
``llama`` (RMSNorm, rotary positions, gated SwiGLU MLP, separate q/k/v, GQA). Mistral and Qwen2
are ``llama`` with different sizes and biases. The family names the *code path* the real
implementation takes (which ops run and what they save), the other fields its sizes.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator


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


class ModelSpec(BaseModel):
    """A decoder-only transformer, with every size that changes memory.

    >>> ModelSpec(name="toy", family="gpt2", vocab_size=100, hidden_size=64, num_layers=2,
    ...           num_heads=4).head_dim
    16
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    name: str = Field(description="Display name.")
    family: Family = Field(description="Implementation whose ops (and saved tensors) are modelled.")
    vocab_size: int = Field(gt=0, description="Rows of the token embedding (and of the LM head).")
    hidden_size: int = Field(gt=0, description="Model width h.")
    num_layers: int = Field(gt=0, description="Number of decoder blocks N.")
    num_heads: int = Field(gt=0, description="Attention (query) heads a.")
    num_kv_heads: int | None = Field(
        default=None, gt=0, description="Key/value heads (GQA/MQA); default: num_heads (MHA)."
    )
    intermediate_size: int | None = Field(
        default=None, gt=0, description="MLP width; default 4h for gpt2. Required for llama."
    )
    max_position_embeddings: int = Field(
        default=2048, gt=0, description="Rows of the learned position table (gpt2)."
    )
    activation: Activation | None = Field(
        default=None, description="MLP activation; default gelu_new (gpt2) or silu (llama)."
    )
    tie_embeddings: bool | None = Field(
        default=None, description="LM head shares the token embedding; default True for gpt2."
    )
    qkv_bias: bool | None = Field(default=None, description="Bias on q/k/v projections.")
    out_bias: bool | None = Field(
        default=None, description="Bias on the attention output projection."
    )
    mlp_bias: bool | None = Field(default=None, description="Bias on the MLP projections.")
    embedding_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="embd_pdrop.")
    attention_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="attn_pdrop.")
    residual_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="resid_pdrop.")

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelSpec:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by "
                f"num_heads ({self.num_heads})"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.kv_heads})"
            )
        if self.family is Family.llama:
            if self.intermediate_size is None:
                raise ValueError("intermediate_size is required for the llama family")
            if self.embedding_dropout or self.residual_dropout:
                raise ValueError(
                    "the llama family has attention dropout only; "
                    "embedding_dropout and residual_dropout must be 0"
                )
        return self

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
            return self.model_copy(update={"attention_dropout": rate})
        return self.model_copy(
            update={
                "embedding_dropout": rate,
                "attention_dropout": rate,
                "residual_dropout": rate,
            }
        )
