"""Exact parameter counts per component, from the shapes of the real implementations.

Sources: HF ``GPT2LMHeadModel`` (Conv1D weights h x 3h etc., LayerNorm weight + bias, learned
``wpe``, ``lm_head`` tied to ``wte``) and HF ``LlamaForCausalLM`` (``nn.Linear`` q/k/v/o,
gate/up/down, RMSNorm weight only, rotary positions have no parameters).
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.spec.model import ModelSpec


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts (numbers of elements) by component; tied weights counted once."""

    embedding: int
    """Token embedding (+ learned position table)."""
    attention: int
    """All blocks' attention projections (+ biases)."""
    mlp: int
    """All blocks' MLP projections (+ biases)."""
    norms: int
    """All normalisation weights (+ biases), final norm included."""
    head: int
    """Untied LM head; 0 when tied to the token embedding."""
    tensors: int
    """Number of parameter tensors (optimizers keep one ``step`` tensor per tensor)."""
    largest_tensor: int
    """Elements of the largest parameter tensor (sets non-foreach optimizer temporaries)."""
    lm_head_numel: int
    """V x h: the LM head's weight, whether it is its own tensor or tied to the embedding."""
    final_norm: int
    """Elements of the final norm (each block has two norms of this size)."""

    @property
    def total(self) -> int:
        return self.embedding + self.attention + self.mlp + self.norms + self.head

    def as_dict(self) -> dict[str, int]:
        return {
            "embedding": self.embedding,
            "attention": self.attention,
            "mlp": self.mlp,
            "norms": self.norms,
            "head": self.head,
        }


def count_params(spec: ModelSpec) -> ParamCounts:
    """Count parameters exactly.

    GPT-2 small (Radford et al. 2019; HF ``gpt2``) has 124,439,808:

    >>> from memcalc.spec.presets import preset
    >>> count_params(preset("gpt2")).total
    124439808
    >>> count_params(preset("llama-2-7b")).total
    6738415616
    """
    h, n, v = spec.hidden_size, spec.num_layers, spec.vocab_size
    kv, m = spec.kv_size, spec.mlp_size

    def linear(fan_in: int, fan_out: int, bias: bool) -> int:
        return fan_in * fan_out + (fan_out if bias else 0)

    token_embedding = v * h
    position_embedding = spec.max_position_embeddings * h if spec.is_gpt2 else 0
    attn_per_block = (
        linear(h, h, spec.has_qkv_bias)
        + 2 * linear(h, kv, spec.has_qkv_bias)
        + linear(h, h, spec.has_out_bias)
    )
    gated = not spec.is_gpt2
    mlp_per_block = (2 if gated else 1) * linear(h, m, spec.has_mlp_bias) + linear(
        m, h, spec.has_mlp_bias
    )
    norm_size = 2 * h if spec.is_gpt2 else h  # LayerNorm: weight + bias; RMSNorm: weight
    norms = (2 * n + 1) * norm_size
    head = 0 if spec.tied else v * h

    tensors = _count_tensors(spec)
    largest = max(v * h, h * max(h, m), position_embedding)
    return ParamCounts(
        embedding=token_embedding + position_embedding,
        attention=n * attn_per_block,
        mlp=n * mlp_per_block,
        norms=norms,
        head=head,
        tensors=tensors,
        largest_tensor=largest,
        lm_head_numel=v * h,
        final_norm=norm_size,
    )


def _count_tensors(spec: ModelSpec) -> int:
    """Number of parameter tensors, as ``len(list(model.parameters()))``."""
    n = spec.num_layers
    if spec.is_gpt2:
        # gpt2 fuses q,k,v into one Conv1D (c_attn): weight+bias each for c_attn, c_proj,
        # c_fc, mlp.c_proj, ln_1, ln_2 -> but biases follow the flags.
        attn = 2 + int(spec.has_qkv_bias) + int(spec.has_out_bias)
        mlp = 2 + 2 * int(spec.has_mlp_bias)
        per_block = attn + mlp + 4  # two LayerNorms with weight and bias
        embeddings = 2  # wte, wpe
        final = 2  # ln_f weight, bias
    else:
        attn = 4 + 3 * int(spec.has_qkv_bias) + int(spec.has_out_bias)
        mlp = 3 + 3 * int(spec.has_mlp_bias)
        per_block = attn + mlp + 2  # two RMSNorm weights
        embeddings = 1
        final = 1
    head = 0 if spec.tied else 1
    return embeddings + n * per_block + final + head
