"""Exact parameter counts per component, from the parameter tensors of the real implementations.

``param_tensors`` lists every parameter tensor a model has, with its shape, in the layout of
HF ``GPT2LMHeadModel`` (Conv1D weights h x 3h etc., LayerNorm weight + bias, learned ``wpe``,
``lm_head`` tied to ``wte``) or HF ``LlamaForCausalLM`` (``nn.Linear`` q/k/v/o, gate/up/down,
RMSNorm weight only; rotary positions have no parameters). Everything else -- totals, the
number of tensors, the Adafactor and 8-bit-Adam state sizes -- is computed from that list, so
a traced model (``memcalc trace``) gets the same accounting from its own tensors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from memcalc.graph.ops import Component, OpGraph, ParamTensor
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import Attention, TrainingSetup

COMPONENTS = ("embedding", "attention", "mlp", "norms", "head")

BNB_MIN_NUMEL = 4096
"""bitsandbytes keeps tensors with fewer elements than this in 32-bit state."""
BNB_BLOCK = 2048
"""bitsandbytes block-wise quantisation: one fp32 absmax per 2048 elements per state."""


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
    active: int
    """Parameters one token uses: all but the routed experts, plus top_k of the E routed
    experts of each MoE layer (Fedus et al. 2022); the total for a dense model."""
    trainable_numel: int = -1
    """Elements with a gradient (-1: all of them)."""
    expert: int = 0
    """Elements of the routed experts' tensors (in ``mlp``): what expert parallelism splits
    and its own data-parallel group shards."""
    fixed_numel: int = 0
    """Elements stored in a dtype of their own (fp32 adapters, k-bit upcasts) or quantized."""
    fixed_bytes: int = 0
    """Bytes of those."""
    fixed_trainable_numel: int = 0
    """Trainable elements stored in a dtype of their own (their gradients and optimizer
    states take that dtype: torch keeps a gradient in its parameter's dtype)."""
    fixed_trainable_bytes: int = 0
    trainable_view: ParamCounts | None = None
    """The same counts over the trainable tensors only (what the optimizer holds); None: all
    tensors are trainable."""

    @property
    def total(self) -> int:
        return self.embedding + self.attention + self.mlp + self.norms + self.head

    @property
    def trainable(self) -> int:
        return self.total if self.trainable_numel < 0 else self.trainable_numel

    @property
    def frozen(self) -> int:
        return self.total - self.trainable

    @property
    def optimizer_counts(self) -> ParamCounts:
        """What the optimizer sees: the trainable tensors."""
        return self.trainable_view or self

    def weight_bytes(self, weight_itemsize: int) -> int:
        """Bytes of every parameter on the device."""
        return (self.total - self.fixed_numel) * weight_itemsize + self.fixed_bytes

    def trainable_weight_bytes(self, weight_itemsize: int) -> int:
        """Bytes of the trained parameters on the device (what an optimizer step rewrites)."""
        recipe = self.trainable - self.fixed_trainable_numel
        return recipe * weight_itemsize + self.fixed_trainable_bytes

    def grad_bytes(self, grad_itemsize: int) -> int:
        """Bytes of every gradient."""
        recipe = self.trainable - self.fixed_trainable_numel
        return recipe * grad_itemsize + self.fixed_trainable_bytes

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
        fixed = [(t, n) for items, n in groups for t in items if t.dtype or t.quant]
        trainable_groups = [([t for t in items if t.trainable], n) for items, n in groups]
        all_trainable = all(t.trainable for items, _ in groups for t in items)
        by_comp = {
            c: sum(n * t.numel for items, n in groups for t in items if t.component == c)
            for c in COMPONENTS
        }
        block_total = by_comp["attention"] + by_comp["mlp"] + by_comp["norms"] - final_norm
        return cls(
            **by_comp,
            tensors=sum(n * len(items) for items, n in groups),
            largest_tensor=max((t.numel for items, _ in groups for t in items), default=0),
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
            trainable_numel=-1
            if all_trainable
            else sum(n * t.numel for items, n in trainable_groups for t in items),
            fixed_numel=sum(n * t.numel for t, n in fixed),
            fixed_bytes=sum(n * t.storage_bytes(0) for t, n in fixed),
            fixed_trainable_numel=sum(n * t.numel for t, n in fixed if t.trainable),
            fixed_trainable_bytes=sum(n * t.storage_bytes(0) for t, n in fixed if t.trainable),
            trainable_view=None
            if all_trainable
            else cls.from_groups(
                [(items, n) for items, n in trainable_groups if items],
                num_blocks=num_blocks,
                lm_head_numel=lm_head_numel,
                final_norm=final_norm,
            ),
            active=sum(n * t.active for items, n in groups for t in items),
            expert=sum(
                n * t.numel for items, n in groups for t in items if t.active_numel is not None
            ),
        )


PARAM_SETUP = TrainingSetup(batch=1, seq=1, attention=Attention.eager)
"""The setup parameter shapes are read under (they depend on neither batch, sequence nor the
attention kernel; eager is the one every family's implementation has)."""


def graph_param_counts(graph: OpGraph, *, lm_head_numel: int) -> ParamCounts:
    """ParamCounts of the parameter tensors the graph's ops own: those outside the blocks once,
    each block kind's times its count (no loop over the layers)."""
    outside = [w for op in graph.prologue + graph.epilogue for w in op.weights]
    groups = [(outside, 1)] + [
        ([w for op in blk.ops for w in op.weights], count)
        for blk, count in zip(graph.kinds, graph.kind_counts, strict=True)
    ]
    final_norm = sum(
        w.numel for op in graph.epilogue if op.component is Component.norm for w in op.weights
    )
    return ParamCounts.from_groups(
        groups,
        num_blocks=graph.num_layers,
        lm_head_numel=lm_head_numel,
        final_norm=final_norm,
    )


def setup_param_counts(spec: ModelSpec, setup: TrainingSetup) -> ParamCounts:
    """Parameter counts under ``setup`` (LoRA adapters, frozen or quantized base, the rank's
    tensor-parallel shard): what the estimate counts."""
    from memcalc.graph.lower import lower

    graph = lower(spec, setup.replace(batch=1, seq=setup.parallel.cp))
    vocab = graph.logits.numel if graph.logits else spec.vocab_size
    return graph_param_counts(graph, lm_head_numel=vocab * spec.hidden_size)


@cache
def count_params(spec: ModelSpec) -> ParamCounts:
    """Count parameters exactly, from the tensors the lowering's ops own.

    GPT-2 small (Radford et al. 2019; HF ``gpt2``) has 124,439,808:

    >>> from memcalc.spec.presets import preset
    >>> count_params(preset("gpt2")).total
    124439808
    >>> count_params(preset("llama-2-7b")).total
    6738415616
    """
    from memcalc.graph.lower import lower

    graph = lower(spec, PARAM_SETUP)
    return graph_param_counts(graph, lm_head_numel=spec.vocab_size * spec.hidden_size)


def param_tensors(spec: ModelSpec) -> list[ParamTensor]:
    """Every parameter tensor of the HF implementation of ``spec`` (tied weights once), named
    as HF names them -- one list entry per layer's tensor, so O(layers): for checks against HF.

    >>> from memcalc.spec.presets import preset
    >>> len(param_tensors(preset("gpt2")))  # as len(list(GPT2LMHeadModel(...).parameters()))
    148
    """
    from memcalc.graph.lower import lower
    from memcalc.spec.families import family_of

    impl = family_of(spec).impl
    graph = lower(spec, PARAM_SETUP)

    def named(op_weights: list[ParamTensor], layer: int | None) -> list[ParamTensor]:
        return [
            ParamTensor(impl.param_name(w.name, layer), w.shape, w.component) for w in op_weights
        ]

    out = named([w for op in graph.prologue for w in op.weights], None)
    for i in range(spec.num_layers):
        out += named([w for op in graph.block(i).ops for w in op.weights], i)
    return out + named([w for op in graph.epilogue for w in op.weights], None)
