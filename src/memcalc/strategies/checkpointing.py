"""A framework's own activation-checkpointing modes, beside memcalc's recompute strategies
(``recompute.py``): what ``--recompute selective`` and ``--recompute every-k`` mean when the
framework's ``Checkpointing`` says so (``frameworks/features.py``).

- ``OpLevelSac``: torchtitan's op-level selective AC (T30 ``distributed/activation_checkpoint.py``
  ``SelectiveAC._wrap_block``; T22 ``_apply_op_sac``): every block runs under a non-reentrant
  checkpoint with a ``create_selective_checkpoint_contexts`` policy (``torch/utils/checkpoint.py``)
  that caches the outputs of the ops in the save list (``CheckpointPolicy.MUST_SAVE``) -- every
  other matmul, counted per block from 1, odd ones saved -- and recomputes the rest in
  backward, where the whole block is rebuilt at the first unpack, its saved ops served from the
  cache.
- ``LayerSac``: torchtitan 0.2.2's layer-level SAC (``_apply_layer_sac``): a global counter over
  the blocks, a block wrapped in a full checkpoint when ``count % N == 0`` -- the 1-based blocks
  N, 2N, ... -- and the others left as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.errors import MemcalcError
from memcalc.frameworks.features import Checkpointing, EveryKRule, Kernel, SelectiveRule
from memcalc.graph.layout import LayerLayout
from memcalc.graph.ops import Block, Component, OpGraph, Saved
from memcalc.strategies.recompute import (
    ActivationPlan,
    Recompute,
    Roles,
    merge_components,
    outside_blocks,
    outside_bytes,
    plan_for,
    sqrt_k,
)


@dataclass(frozen=True)
class OpLevelSac:
    """Op-level selective activation checkpointing under ``rule`` (the module docstring)."""

    rule: Checkpointing

    def saved_ops(self, blk: Block) -> list[int]:
        """Indices of the block's ops whose outputs the policy caches: a matmul (``Op.kernel``
        mm) when it is the 1st, 3rd, ... of the block (``meta["forward_mm_count"] % 2``), any
        other op whose kernel is in the save list (a CPU SDPA is in none of them)."""
        out, mms = [], 0
        for j, op in enumerate(blk.ops):
            if op.kernel == Kernel.mm.value and self.rule.alternate_mm:
                mms += 1
                if mms % 2 == 1:
                    out.append(j)
            elif op.kernel and Kernel(op.kernel) in self.rule.save_kernels:
                out.append(j)
        return out

    def kept(self, blk: Block) -> list[Saved]:
        """What a block holds from forward to backward: its input (the checkpoint's) and the
        cached outputs, each storage once."""
        kept = {blk.input.name: blk.input}
        for j in self.saved_ops(blk):
            for t in blk.ops[j].outputs:
                kept.setdefault(t.name, t)
        return list(kept.values())

    def plan(self, graph: OpGraph) -> ActivationPlan:
        stored = tuple(sum(t.nbytes for t in self.kept(b)) for b in graph.kinds)
        stack = Roles(
            graph.layout, tuple(range(len(graph.kinds))), (Recompute.full,) * len(stored), stored
        )
        comp = outside_blocks(graph)
        present = [
            (b, c, s) for b, c, s in zip(graph.kinds, graph.kind_counts, stored, strict=True) if c
        ]
        comp = merge_components(comp, {Component.checkpoint: sum(c * s for _, c, s in present)})
        flops = sum(
            c * (b.flops - sum(b.ops[j].flops for j in self.saved_ops(b))) for b, c, _ in present
        )
        rebuild = max((b.saved_bytes + b.input.nbytes - s for b, _, s in present), default=0)
        return ActivationPlan(
            "selective",
            outside_bytes(graph) + stack.total_stored(),
            comp,
            max(rebuild, 0),
            flops,
            stack,
            checkpoints=graph.num_layers,
            note=f"op-level SAC ({self.rule.source}): the block input and the outputs of every "
            "other matmul and the saved attention / collective ops are kept; the rest of each "
            "block is rebuilt in its backward",
            fully_recomputed=graph.kind_counts,
        )


@dataclass(frozen=True)
class LayerSac:
    """Layer-level selective checkpointing every ``k`` blocks (the module docstring)."""

    k: int
    source: str = ""

    def plan(self, graph: OpGraph) -> ActivationPlan:
        n, kinds = graph.num_layers, len(graph.kinds)
        if not 1 <= self.k <= n:
            raise MemcalcError(
                f"--every: must be between 1 and the number of blocks ({n}); got {self.k}"
            )
        # role 2*kind + 1: the kind's layers wrapped in a full checkpoint (1-based N, 2N, ...)
        roles = [2 * graph.layout.kind_at(i) + ((i + 1) % self.k == 0) for i in range(n)]
        layout = LayerLayout.from_kinds(roles)
        blocks = [graph.kinds[r // 2] for r in range(2 * kinds)]
        stored = tuple(b.input.nbytes if r % 2 else b.saved_bytes for r, b in enumerate(blocks))
        choice = tuple(Recompute.full if r % 2 else Recompute.none for r in range(2 * kinds))
        stack = Roles(layout, tuple(r // 2 for r in range(2 * kinds)), choice, stored)
        counts = layout.counts(2 * kinds)
        comp = outside_blocks(graph)
        for r, (blk, c) in enumerate(zip(blocks, counts, strict=True)):
            if c:
                part = (
                    {Component.checkpoint: blk.input.nbytes} if r % 2 else blk.bytes_by_component()
                )
                comp = merge_components(comp, part, c)
        wrapped = [(blocks[r], c) for r, c in enumerate(counts) if r % 2 and c]
        return ActivationPlan(
            f"every-{self.k}",
            outside_bytes(graph) + stack.total_stored(),
            comp,
            max((b.saved_bytes - b.input.nbytes for b, _ in wrapped), default=0),
            sum(c * b.flops for b, c in wrapped),
            stack,
            checkpoints=sum(c for _, c in wrapped),
            note=f"layer-level SAC ({self.source}): blocks {self.k}, {2 * self.k}, ... "
            "(1-based) under a full checkpoint, the others keep everything",
            fully_recomputed=tuple(counts[2 * kind + 1] for kind in range(kinds)),
        )


def framework_plan(
    graph: OpGraph,
    strategy: Recompute,
    rule: Checkpointing,
    *,
    every: int | None = None,
    budget_bytes: int | None = None,
) -> ActivationPlan:
    """The ActivationPlan of ``strategy`` as the framework whose modes ``rule`` describes runs
    it: its own selective / every-k modes where it has them, memcalc's otherwise, and a
    one-line error for a mode it does not have."""
    if strategy is Recompute.selective and rule.selective is SelectiveRule.op_sac:
        return OpLevelSac(rule).plan(graph)
    if strategy is Recompute.every_k and rule.every_k is not EveryKRule.segments:
        if rule.every_k is EveryKRule.refused:
            raise MemcalcError(f"--recompute every-k: {rule.refusal}")
        return LayerSac(sqrt_k(graph.num_layers) if every is None else every, rule.source).plan(
            graph
        )
    if strategy is Recompute.budget and not rule.budget:
        raise MemcalcError(f"--recompute budget: {rule.refusal}")
    return plan_for(graph, strategy, every=every, budget_bytes=budget_bytes)
