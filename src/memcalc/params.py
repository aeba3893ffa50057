"""Exact parameter counts per component, from the parameter tensors of the real implementations.

``param_tensors`` lists every parameter tensor a model has, with its shape, in the layout of
HF ``GPT2LMHeadModel`` (Conv1D weights h x 3h etc., LayerNorm weight + bias, learned ``wpe``,
``lm_head`` tied to ``wte``) or HF ``LlamaForCausalLM`` (``nn.Linear`` q/k/v/o, gate/up/down,
RMSNorm weight only; rotary positions have no parameters). Everything else -- totals, the
number of tensors, the Adafactor and 8-bit-Adam state sizes -- is computed from that list, so
a traced model (``memcalc trace``) gets the same accounting from its own tensors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from memcalc.spec.model import ModelSpec

COMPONENTS = ("embedding", "attention", "mlp", "norms", "head")

BNB_MIN_NUMEL = 4096
"""bitsandbytes keeps tensors with fewer elements than this in 32-bit state."""
BNB_BLOCK = 2048
"""bitsandbytes block-wise quantisation: one fp32 absmax per 2048 elements per state."""


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor: its name, shape and the component it belongs to."""

    name: str
    shape: tuple[int, ...]
    component: str
    """One of COMPONENTS."""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


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
    per_block: int
    """Parameters of one block (its projections and norms)."""
    lm_head_numel: int
    """V x h: the LM head's weight, whether it is its own tensor or tied to the embedding."""
    final_norm: int
    """Elements of the norm after the last block."""
    adafactor_state_elements: int
    """Adafactor's factored second moment: rows + columns per matrix, numel per vector."""
    small_tensor_numel: int
    """Elements in tensors under BNB_MIN_NUMEL (8-bit optimizers keep them in 32 bit)."""

    @property
    def total(self) -> int:
        return self.embedding + self.attention + self.mlp + self.norms + self.head

    def as_dict(self) -> dict[str, int]:
        return {c: getattr(self, c) for c in COMPONENTS}

    @classmethod
    def from_tensors(
        cls,
        tensors: Iterable[ParamTensor],
        *,
        num_blocks: int,
        lm_head_numel: int,
        final_norm: int,
    ) -> ParamCounts:
        """Totals from the list of parameter tensors (each tensor once)."""
        return cls.from_groups(
            [(list(tensors), 1)],
            num_blocks=num_blocks,
            lm_head_numel=lm_head_numel,
            final_norm=final_norm,
        )

    @classmethod
    def from_groups(
        cls,
        groups: Iterable[tuple[list[ParamTensor], int]],
        *,
        num_blocks: int,
        lm_head_numel: int,
        final_norm: int,
    ) -> ParamCounts:
        """Totals from groups of parameter tensors, each present ``count`` times (one group
        per block kind, and one for what lies outside the blocks): no loop over the layers."""
        groups = [(items, count) for items, count in groups if count and items]
        by_comp = {
            c: sum(n * t.numel for items, n in groups for t in items if t.component == c)
            for c in COMPONENTS
        }
        block_total = by_comp["attention"] + by_comp["mlp"] + by_comp["norms"] - final_norm
        return cls(
            **by_comp,
            tensors=sum(n * len(items) for items, n in groups),
            largest_tensor=max(t.numel for items, _ in groups for t in items),
            per_block=block_total // max(1, num_blocks),
            lm_head_numel=lm_head_numel,
            final_norm=final_norm,
            adafactor_state_elements=sum(
                n * (t.shape[0] + t.shape[1] if len(t.shape) == 2 else t.numel)
                for items, n in groups
                for t in items
            ),
            small_tensor_numel=sum(
                n * t.numel for items, n in groups for t in items if t.numel < BNB_MIN_NUMEL
            ),
        )


def param_groups(spec: ModelSpec) -> tuple[list[ParamTensor], list[ParamTensor], list[ParamTensor]]:
    """The parameter tensors of the HF implementation of ``spec`` as (before the blocks, one
    block -- named ``{layer}`` where the layer index goes --, after the blocks)."""
    h, v, kv, m = spec.hidden_size, spec.vocab_size, spec.kv_size, spec.mlp_size
    before: list[ParamTensor] = []
    block: list[ParamTensor] = []
    after: list[ParamTensor] = []

    def linear(
        out: list[ParamTensor], name: str, fan_in: int, fan_out: int, bias: bool, comp: str
    ) -> None:
        # HF Conv1D stores (in, out), nn.Linear (out, in): the same elements either way.
        out.append(ParamTensor(f"{name}.weight", (fan_out, fan_in), comp))
        if bias:
            out.append(ParamTensor(f"{name}.bias", (fan_out,), comp))

    def norm(out: list[ParamTensor], name: str) -> None:
        out.append(ParamTensor(f"{name}.weight", (h,), "norms"))
        if spec.is_gpt2:  # LayerNorm has a bias, RMSNorm does not
            out.append(ParamTensor(f"{name}.bias", (h,), "norms"))

    if spec.is_gpt2:
        before.append(ParamTensor("transformer.wte.weight", (v, h), "embedding"))
        before.append(
            ParamTensor("transformer.wpe.weight", (spec.max_position_embeddings, h), "embedding")
        )
        p = "transformer.h.{layer}"
        norm(block, f"{p}.ln_1")
        linear(block, f"{p}.attn.c_attn", h, h + 2 * kv, spec.has_qkv_bias, "attention")
        linear(block, f"{p}.attn.c_proj", h, h, spec.has_out_bias, "attention")
        norm(block, f"{p}.ln_2")
        linear(block, f"{p}.mlp.c_fc", h, m, spec.has_mlp_bias, "mlp")
        linear(block, f"{p}.mlp.c_proj", m, h, spec.has_mlp_bias, "mlp")
        norm(after, "transformer.ln_f")
    else:
        before.append(ParamTensor("model.embed_tokens.weight", (v, h), "embedding"))
        p = "model.layers.{layer}"
        norm(block, f"{p}.input_layernorm")
        linear(block, f"{p}.self_attn.q_proj", h, h, spec.has_qkv_bias, "attention")
        linear(block, f"{p}.self_attn.k_proj", h, kv, spec.has_qkv_bias, "attention")
        linear(block, f"{p}.self_attn.v_proj", h, kv, spec.has_qkv_bias, "attention")
        linear(block, f"{p}.self_attn.o_proj", h, h, spec.has_out_bias, "attention")
        norm(block, f"{p}.post_attention_layernorm")
        linear(block, f"{p}.mlp.gate_proj", h, m, spec.has_mlp_bias, "mlp")
        linear(block, f"{p}.mlp.up_proj", h, m, spec.has_mlp_bias, "mlp")
        linear(block, f"{p}.mlp.down_proj", m, h, spec.has_mlp_bias, "mlp")
        norm(after, "model.norm")
    if not spec.tied:
        after.append(ParamTensor("lm_head.weight", (v, h), "head"))
    return before, block, after


def param_tensors(spec: ModelSpec) -> list[ParamTensor]:
    """Every parameter tensor of the HF implementation of ``spec`` (tied weights once), named
    as HF names them -- one list entry per layer's tensor, so O(layers): for checks against HF.

    >>> from memcalc.spec.presets import preset
    >>> len(param_tensors(preset("gpt2")))  # as len(list(GPT2LMHeadModel(...).parameters()))
    148
    """
    before, block, after = param_groups(spec)
    layers = [
        ParamTensor(t.name.format(layer=i), t.shape, t.component)
        for i in range(spec.num_layers)
        for t in block
    ]
    return before + layers + after


def count_params(spec: ModelSpec) -> ParamCounts:
    """Count parameters exactly.

    GPT-2 small (Radford et al. 2019; HF ``gpt2``) has 124,439,808:

    >>> from memcalc.spec.presets import preset
    >>> count_params(preset("gpt2")).total
    124439808
    >>> count_params(preset("llama-2-7b")).total
    6738415616
    """
    before, block, after = param_groups(spec)
    return ParamCounts.from_groups(
        [(before + after, 1), (block, spec.num_layers)],
        num_blocks=spec.num_layers,
        lm_head_numel=spec.vocab_size * spec.hidden_size,
        final_norm=2 * spec.hidden_size if spec.is_gpt2 else spec.hidden_size,
    )
