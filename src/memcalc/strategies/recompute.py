"""Activation-recompute strategies: which saved tensors are kept across the forward pass,
what is rebuilt during backward, and the extra forward FLOPs that costs.

Each strategy is one small function from the op graph to an ``ActivationPlan``; ``plan_for``
picks it from the ``Recompute`` enum.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from memcalc.errors import MemcalcError
from memcalc.graph.ops import Component, OpGraph, bytes_by_component


class Recompute(str, Enum):
    """Activation-recompute strategy."""

    none = "none"
    """Keep every saved tensor from forward to backward."""
    selective = "selective"
    """Drop and replay the attention core (QK^T, softmax, dropout, AV): memory-heavy and
    cheap to recompute; keep the matmul outputs (Korthikanti et al. 2022, sec. 5)."""
    full = "full"
    """Keep each block's input, recompute the whole block in backward (Chen et al. 2016)."""
    every_k = "every-k"
    """Checkpoint every k-th block input, recompute k blocks at a time (Chen et al. 2016:
    k = sqrt(N) gives O(sqrt(N)) memory for one extra forward)."""
    budget = "budget"
    """Choose per block (keep / selective / full) to minimise extra FLOPs under a byte budget:
    an exact multiple-choice knapsack over the blocks."""


@dataclass(frozen=True)
class ActivationPlan:
    """What a recompute strategy keeps and costs."""

    strategy: str
    stored_bytes: int
    """Activations held from forward to backward (saved tensors + checkpoint inputs)."""
    stored_by_component: dict[Component, int]
    rebuild_bytes: int
    """Extra bytes that exist while the largest recomputed segment is rebuilt in backward."""
    extra_forward_flops: int
    """FLOPs of the forward ops run a second time."""
    checkpoints: int = 0
    """Number of checkpointed segments."""
    per_block: tuple[str, ...] = field(default=())
    """The choice made for each block (none / selective / full)."""
    note: str = ""
    block_stored: tuple[int, ...] = field(default=())
    """Bytes each block holds across the forward (checkpoint extras on the first segment)."""
    block_rebuild: tuple[int, ...] = field(default=())
    """Bytes rebuilt when each block's backward starts (a segment's on its last block)."""
    block_rebuilt_below: tuple[int, ...] = field(default=())
    """Bytes of the same segment's earlier blocks, rebuilt and still waiting for their
    backward while this block's runs (every-k only)."""

    @property
    def peak_activation_bytes(self) -> int:
        """Stored activations plus the largest rebuilt segment: the activations alive at the
        worst moment of backward."""
        return self.stored_bytes + self.rebuild_bytes


def _outside_blocks(graph: OpGraph) -> dict[Component, int]:
    return _merge(bytes_by_component(graph.prologue), bytes_by_component(graph.epilogue))


def _merge(a: dict[Component, int], b: dict[Component, int]) -> dict[Component, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def keep_all(graph: OpGraph) -> ActivationPlan:
    """No recompute: every op's saved tensors live until its backward."""
    comp = _outside_blocks(graph)
    for blk in graph.blocks:
        comp = _merge(comp, blk.bytes_by_component())
    n = len(graph.blocks)
    return ActivationPlan(
        "none",
        graph.saved_bytes,
        comp,
        0,
        0,
        0,
        ("none",) * n,
        block_stored=tuple(b.saved_bytes for b in graph.blocks),
        block_rebuild=(0,) * n,
    )


def selective(graph: OpGraph) -> ActivationPlan:
    """Korthikanti et al. 2022, sec. 5: recompute only the attention core of every block.

    Stored per block: everything but the core's own tensors (the s x s probabilities, dropout
    mask); rebuilt in backward: one block's core tensors; extra FLOPs: the core's forward
    (2 x 2*b*s^2*h for QK^T and AV plus the softmax). With SDPA/flash there is nothing to drop.
    """
    comp = _outside_blocks(graph)
    stored = graph.prologue_saved_bytes + graph.epilogue_saved_bytes
    block_stored = [b.selective_saved_bytes for b in graph.blocks]
    block_rebuild = [b.core_only_bytes for b in graph.blocks]
    flops = sum(b.core_flops for b in graph.blocks if b.core_only_bytes)
    if any(block_rebuild):
        # The core runs under a checkpoint, which also keeps its extra inputs (HF's eager mask).
        extra = sum(s.nbytes for s in graph.checkpoint_extra_inputs)
        block_stored[0] += extra
        comp = _merge(comp, {Component.checkpoint: extra})
    for blk in graph.blocks:
        comp = _merge(comp, blk.selective_bytes_by_component())
    return ActivationPlan(
        "selective",
        stored + sum(block_stored),
        comp,
        max(block_rebuild),
        flops,
        0,
        ("selective",) * len(graph.blocks),
        block_stored=tuple(block_stored),
        block_rebuild=tuple(block_rebuild),
    )


def every_k(graph: OpGraph, k: int) -> ActivationPlan:
    """Chen et al. 2016: checkpoint the input of every k-th block; in backward, replay the k
    blocks of one segment at once (torch.utils.checkpoint around each segment).

    Stored: the segment inputs + tensors saved outside the blocks + extra checkpoint inputs;
    rebuilt: the largest segment's saved tensors minus its (already stored) input;
    extra FLOPs: one forward of every block. k = 1 is full recompute.
    """
    n = len(graph.blocks)
    if not 1 <= k <= n:
        raise MemcalcError(f"--every: must be between 1 and the number of blocks ({n}); got {k}")
    segments = [graph.blocks[i : i + k] for i in range(0, n, k)]
    extra = sum(s.nbytes for s in graph.checkpoint_extra_inputs)
    inputs = sum(seg[0].input.nbytes for seg in segments)
    stored = graph.prologue_saved_bytes + graph.epilogue_saved_bytes + inputs + extra
    rebuild = max(sum(b.saved_bytes for b in seg) - seg[0].input.nbytes for seg in segments)
    comp = _merge(_outside_blocks(graph), {Component.checkpoint: inputs + extra})
    name = "full" if k == 1 else f"every-{k}"
    block_stored: list[int] = []
    block_rebuild: list[int] = []
    rebuilt_below: list[int] = []
    for seg in segments:
        seg_rebuild = sum(b.saved_bytes for b in seg) - seg[0].input.nbytes
        block_stored += [seg[0].input.nbytes] + [0] * (len(seg) - 1)
        block_rebuild += [0] * (len(seg) - 1) + [seg_rebuild]
        below = 0
        for r, blk in enumerate(seg):
            rebuilt_below.append(below - seg[0].input.nbytes if r else 0)
            below += blk.saved_bytes
    block_stored[0] += extra
    return ActivationPlan(
        name,
        stored,
        comp,
        rebuild,
        sum(b.flops for b in graph.blocks),
        len(segments),
        ("full",) * n,
        block_stored=tuple(block_stored),
        block_rebuild=tuple(block_rebuild),
        block_rebuilt_below=tuple(rebuilt_below),
    )


def full(graph: OpGraph) -> ActivationPlan:
    """Full recompute: every block is its own checkpoint segment (``every_k`` with k = 1).

    Korthikanti et al. 2022, sec. 4.2: 2*s*b*h bytes per layer in 16-bit (the layer input).
    """
    return every_k(graph, 1)


def sqrt_k(num_blocks: int) -> int:
    """Chen et al. 2016's segment length: round(sqrt(N)), at least 1.

    >>> sqrt_k(32), sqrt_k(12), sqrt_k(2)
    (6, 3, 1)
    """
    return max(1, round(math.sqrt(num_blocks)))


def budget(graph: OpGraph, budget_bytes: int) -> ActivationPlan:
    """Minimise extra forward FLOPs with stored activations <= ``budget_bytes``.

    Each block may keep everything, recompute its attention core (selective) or be fully
    recomputed from its input. Choosing one option per block under a byte budget while
    minimising FLOPs is a multiple-choice knapsack, solved exactly by dynamic programming over
    the blocks on the Pareto frontier of (stored bytes, extra FLOPs): a state is dropped only
    when another has no more bytes and no more FLOPs.
    """
    fixed = graph.prologue_saved_bytes + graph.epilogue_saved_bytes
    extra_inputs = sum(s.nbytes for s in graph.checkpoint_extra_inputs)
    # state: (bytes, flops, uses_checkpoint) -> choices
    frontier: list[_State] = [(0, 0, False, ())]
    for blk in graph.blocks:
        options = [("none", blk.saved_bytes, 0, False)]
        if blk.core_only_bytes:
            options.append(("selective", blk.selective_saved_bytes, blk.core_flops, True))
        options.append(("full", blk.input.nbytes, blk.flops, True))
        candidates = [
            (b + ob, f + of, ck or ock, choices + (name,))
            for (b, f, ck, choices) in frontier
            for (name, ob, of, ock) in options
        ]
        frontier = _pareto(candidates, extra_inputs)
    feasible = [
        st for st in frontier if fixed + st[0] + (extra_inputs if st[2] else 0) <= budget_bytes
    ]
    if not feasible:
        floor = fixed + sum(b.input.nbytes for b in graph.blocks) + extra_inputs
        raise MemcalcError(
            f"--budget: {budget_bytes} bytes is below what any recompute plan needs "
            f"({floor} bytes: block inputs plus the tensors saved outside the blocks)"
        )
    b_bytes, flops, uses_ck, choices = min(feasible, key=lambda st: (st[1], st[0]))
    stored = fixed + b_bytes + (extra_inputs if uses_ck else 0)
    comp = _outside_blocks(graph)
    block_stored: list[int] = []
    block_rebuild: list[int] = []
    for blk, choice in zip(graph.blocks, choices, strict=True):
        if choice == "full":
            block_stored.append(blk.input.nbytes)
            block_rebuild.append(blk.saved_bytes - blk.input.nbytes)
            comp = _merge(comp, {Component.checkpoint: blk.input.nbytes})
        elif choice == "selective":
            block_stored.append(blk.selective_saved_bytes)
            block_rebuild.append(blk.core_only_bytes)
            comp = _merge(comp, blk.selective_bytes_by_component())
        else:
            block_stored.append(blk.saved_bytes)
            block_rebuild.append(0)
            comp = _merge(comp, blk.bytes_by_component())
    if uses_ck:
        block_stored[0] += extra_inputs
        comp = _merge(comp, {Component.checkpoint: extra_inputs})
    rebuild = max(block_rebuild)
    counts = {c: choices.count(c) for c in ("none", "selective", "full")}
    note = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    return ActivationPlan(
        "budget",
        stored,
        comp,
        rebuild,
        flops,
        counts["full"],
        choices,
        note=f"per block: {note}",
        block_stored=tuple(block_stored),
        block_rebuild=tuple(block_rebuild),
    )


_State = tuple[int, int, bool, tuple[str, ...]]
"""(stored bytes of the blocks so far, extra FLOPs, uses a checkpoint, choice per block)"""


def _pareto(states: list[_State], extra_inputs: int) -> list[_State]:
    """Keep the states no other state beats on both bytes (charging the checkpoint's extra
    inputs to states that use one) and FLOPs. Exact: whatever the remaining blocks choose, a
    dominated state's completion costs at least as much as the dominating state's."""
    keyed = sorted(states, key=lambda st: (st[0] + (extra_inputs if st[2] else 0), st[1]))
    out: list[_State] = []
    best_flops: int | None = None
    for st in keyed:
        if best_flops is None or st[1] < best_flops:
            out.append(st)
            best_flops = st[1]
    return out


def plan_for(
    graph: OpGraph,
    strategy: Recompute,
    *,
    every: int | None = None,
    budget_bytes: int | None = None,
) -> ActivationPlan:
    """The ActivationPlan for ``strategy`` (``every`` for every-k, ``budget_bytes`` for budget)."""
    if strategy is Recompute.budget:
        if budget_bytes is None:
            raise MemcalcError("--budget: required with --recompute budget (bytes, e.g. 20e9)")
        return budget(graph, budget_bytes)
    if strategy is Recompute.every_k:
        return every_k(graph, every or sqrt_k(len(graph.blocks)))
    table: dict[Recompute, Callable[[OpGraph], ActivationPlan]] = {
        Recompute.none: keep_all,
        Recompute.selective: selective,
        Recompute.full: full,
    }
    return table[strategy](graph)
