"""Activation-recompute strategies: which saved tensors are kept across the forward pass,
what is rebuilt during backward, and the extra forward FLOPs that costs.

Each strategy is one small function from the op graph to an ``ActivationPlan``; ``plan_for``
picks it from the ``Recompute`` enum. A plan is computed per block kind and multiplied by the
kind's count (``OpGraph.layout``); what the step timeline needs per layer -- the bytes the
layers before it still hold -- is a closed-form prefix sum over the layout (``Stack``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

from memcalc.errors import MemcalcError
from memcalc.graph.layout import LayerLayout, Progression
from memcalc.graph.ops import Block, Component, OpGraph, bytes_by_component


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
    an exact multiple-choice knapsack over the block kinds and their counts."""
    block = "block"
    """Recompute the first k layers of the stage whole, each from its own input, and keep the
    rest (Megatron ``--recompute-method block --recompute-num-layers k``)."""


CHOICES = (Recompute.none, Recompute.selective, Recompute.full)
"""What a recompute plan does with one block, in the order budget plans report them (one
vocabulary: a block's choice is the strategy it would be alone)."""


# ---------------------------------------------------------------------------------------------
# What each layer holds: the two shapes a plan's stack takes


@dataclass(frozen=True)
class Roles:
    """Every layer plays one role -- a block kind with one choice (none / selective / full) --
    and holds a fixed number of bytes from its forward to its backward."""

    layout: LayerLayout
    """Which role each layer has."""
    kind: tuple[int, ...]
    """The block kind of each role."""
    choice: tuple[Recompute, ...]
    """Recompute.none, .selective or .full, per role."""
    stored: tuple[int, ...]
    """Bytes a layer of each role holds across the forward."""
    extra: int = 0
    """Inputs a checkpoint keeps once (HF's eager mask), counted with the first layer."""

    def held_below(self, i: int) -> int:
        """Bytes the layers before ``i`` hold while layer ``i``'s backward runs."""
        return self.layout.prefix_sum(self.stored, i) + (self.extra if i else 0)

    def layer_stored(self, i: int) -> int:
        return self.stored[self.layout.kind_at(i)] + (self.extra if i == 0 else 0)

    def total_stored(self) -> int:
        """Bytes all layers hold across the forward."""
        return self.layout.total(self.stored) + self.extra

    def count(self, choice: Recompute) -> int:
        """Layers that make ``choice``."""
        counts = self.layout.counts(len(self.kind))
        return sum(c for c, ch in zip(counts, self.choice, strict=True) if ch == choice)

    def progressions(self, *, affine: bool) -> list[Progression]:
        """One progression per offset of each piece's period: a layer's role fixes what it holds."""
        return self.layout.progressions()


@dataclass(frozen=True)
class Segments:
    """Chen et al. 2016: consecutive segments of ``k`` layers, each checkpointed at its first
    layer's input and rebuilt whole in backward (``k = 1`` is full recompute). While a layer's
    backward runs, the earlier segments hold their inputs and its own segment the layers
    rebuilt before it (their saved tensors, freed as their backward runs)."""

    layout: LayerLayout
    """Block kinds of the layers."""
    k: int
    inputs: tuple[int, ...]
    """Bytes of the input of each block kind (what a checkpoint keeps)."""
    saved: tuple[int, ...]
    """Bytes each block kind saves when it runs (or is rebuilt)."""
    extra: int = 0

    def held_below(self, i: int) -> int:
        start = i - i % self.k
        earlier = self.layout.sum_at_multiples(self.inputs, self.k, start)
        rebuilt = self.layout.prefix_sum(self.saved, i) - self.layout.prefix_sum(self.saved, start)
        return earlier + rebuilt + (self.extra if i else 0)

    def layer_stored(self, i: int) -> int:
        own = self.inputs[self.layout.kind_at(i)] if i % self.k == 0 else 0
        return own + (self.extra if i == 0 else 0)

    def total_stored(self) -> int:
        return self.layout.sum_at_multiples(self.inputs, self.k, self.layout.n) + self.extra

    def count(self, choice: Recompute) -> int:
        return self.layout.n if choice is Recompute.full else 0

    def segments(self) -> Iterator[tuple[int, int, int, int]]:
        """Classes of segments with the same content: (first start, step between starts,
        count, length). Inside a piece of period P the content repeats every P/gcd(P, k)
        segments; a segment that crosses a piece boundary, or the short last one, stands
        alone."""
        k, n = self.k, self.layout.n
        done = 0  # segments [0, done) emitted
        for start, piece in self.layout.starts():
            end = start + piece.length
            first = max(done, -(-start // k))  # first segment starting in the piece
            last = (end - k) // k  # last segment ending inside it
            for m in range(done, min(first, -(-n // k))):  # crossing into this piece
                yield m * k, k, 1, min(k, n - m * k)
            done = max(done, first)
            if last >= first:
                q = len(piece.period) // math.gcd(len(piece.period), k)
                for c in range(min(q, last - first + 1)):
                    yield (first + c) * k, q * k, (last - first - c) // q + 1, k
                done = last + 1
        for m in range(done, -(-n // k)):
            yield m * k, k, 1, min(k, n - m * k)

    def progressions(self, *, affine: bool) -> list[Progression]:
        """Per segment class, the layers at one position of the segment. With ``affine`` the
        peak grows evenly along a run of one kind inside a segment, so its first, second and
        last positions bound it; otherwise every position is kept."""
        out: list[Progression] = []
        for first, step, count, length in self.segments():
            positions = set(range(length))
            if affine:
                positions = {0, min(1, length - 1), length - 1}
                for r in range(1, length):
                    if self.layout.kind_at(first + r) != self.layout.kind_at(first + r - 1):
                        positions |= {r - 1, r, min(r + 1, length - 1)}
            out.extend(Progression(first + r, step, count) for r in sorted(positions))
        return out


Stack = Roles | Segments


# ---------------------------------------------------------------------------------------------
# The plan


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
    stack: Stack
    """What each layer holds (closed form over the layout)."""
    checkpoints: int = 0
    """Number of checkpointed segments."""
    note: str = ""
    fully_recomputed: tuple[int, ...] = ()
    """Per block kind, how many of its layers are recomputed whole."""

    @property
    def peak_activation_bytes(self) -> int:
        """Stored activations plus the largest rebuilt segment: the activations alive at the
        worst moment of backward."""
        return self.stored_bytes + self.rebuild_bytes

    def held_below(self, i: int) -> int:
        """Bytes the blocks before layer ``i`` hold while its backward runs."""
        return self.stack.held_below(i)

    def layer_stored(self, i: int) -> int:
        """Bytes layer ``i`` holds across the forward (checkpoint extras on the first)."""
        return self.stack.layer_stored(i)

    @property
    def blocks_stored_bytes(self) -> int:
        """Bytes all blocks hold across the forward (without the prologue / epilogue)."""
        return self.stack.total_stored()


def outside_blocks(graph: OpGraph) -> dict[Component, int]:
    """Bytes saved outside the blocks (prologue and epilogue), by component."""
    return _outside_blocks(graph)


def merge_components(
    a: dict[Component, int], b: dict[Component, int], times: int = 1
) -> dict[Component, int]:
    """``a`` plus ``times`` x ``b``, by component."""
    return _merge(a, b, times)


def outside_bytes(graph: OpGraph) -> int:
    """Bytes saved outside the blocks."""
    return _outside_bytes(graph)


def _outside_blocks(graph: OpGraph) -> dict[Component, int]:
    return _merge(bytes_by_component(graph.prologue), bytes_by_component(graph.epilogue))


def _merge(
    a: dict[Component, int], b: dict[Component, int], times: int = 1
) -> dict[Component, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + times * v
    return out


def _outside_bytes(graph: OpGraph) -> int:
    return graph.prologue_saved_bytes + graph.epilogue_saved_bytes


def _extra(graph: OpGraph) -> int:
    return sum(s.nbytes for s in graph.checkpoint_extra_inputs)


def _uniform(graph: OpGraph, choice: Recompute, stored: Callable[[Block], int]) -> Roles:
    """Every layer makes the same choice: the roles are the block kinds themselves."""
    n = len(graph.kinds)
    return Roles(
        graph.layout, tuple(range(n)), (choice,) * n, tuple(stored(b) for b in graph.kinds)
    )


def keep_all(graph: OpGraph) -> ActivationPlan:
    """No recompute: every op's saved tensors live until its backward."""
    comp = _outside_blocks(graph)
    for blk, c in zip(graph.kinds, graph.kind_counts, strict=True):
        comp = _merge(comp, blk.bytes_by_component(), c)
    return ActivationPlan(
        "none",
        graph.saved_bytes,
        comp,
        0,
        0,
        _uniform(graph, Recompute.none, lambda b: b.saved_bytes),
    )


def selective(graph: OpGraph) -> ActivationPlan:
    """Korthikanti et al. 2022, sec. 5: recompute only the attention core of every block.

    Stored per block: everything but the core's own tensors (the s x s probabilities, dropout
    mask); rebuilt in backward: one block's core tensors; extra FLOPs: the core's forward
    (2 x 2*b*s^2*h for QK^T and AV plus the softmax). With SDPA/flash there is nothing to drop.
    """
    comp = _outside_blocks(graph)
    present = [(b, c) for b, c in zip(graph.kinds, graph.kind_counts, strict=True) if c]
    rebuild = max((b.core_only_bytes for b, _ in present), default=0)
    flops = sum(c * b.core_flops for b, c in present if b.core_only_bytes)
    stack = _uniform(graph, Recompute.selective, lambda b: b.selective_saved_bytes)
    if rebuild:
        # The core runs under a checkpoint, which also keeps its extra inputs (HF's eager mask).
        stack = Roles(stack.layout, stack.kind, stack.choice, stack.stored, _extra(graph))
        comp = _merge(comp, {Component.checkpoint: stack.extra})
    for blk, c in present:
        comp = _merge(comp, blk.selective_bytes_by_component(), c)
    stored = _outside_bytes(graph) + stack.total_stored()
    return ActivationPlan("selective", stored, comp, rebuild, flops, stack)


def every_k(graph: OpGraph, k: int) -> ActivationPlan:
    """Chen et al. 2016: checkpoint the input of every k-th block; in backward, replay the k
    blocks of one segment at once (torch.utils.checkpoint around each segment).

    Stored: the segment inputs + tensors saved outside the blocks + extra checkpoint inputs;
    rebuilt: the largest segment's saved tensors minus its (already stored) input;
    extra FLOPs: one forward of every block. k = 1 is full recompute.
    """
    n = graph.num_layers
    if not 1 <= k <= n:
        raise MemcalcError(f"--every: must be between 1 and the number of blocks ({n}); got {k}")
    stack = Segments(
        graph.layout,
        k,
        tuple(b.checkpoint_bytes for b in graph.kinds),
        tuple(b.saved_bytes for b in graph.kinds),
        _extra(graph),
    )
    inputs = graph.layout.sum_at_multiples(stack.inputs, k, n)
    layout = graph.layout
    rebuild = max(
        layout.prefix_sum(stack.saved, first + length)
        - layout.prefix_sum(stack.saved, first)
        # the replay makes its own copies of what ctx attributes held (Block.attribute_held):
        # only the checkpoint's input is not made again
        - graph.kinds[layout.kind_at(first)].input.nbytes
        for first, _, _, length in stack.segments()
    )
    comp = _merge(_outside_blocks(graph), {Component.checkpoint: inputs + stack.extra})
    return ActivationPlan(
        "full" if k == 1 else f"every-{k}",
        _outside_bytes(graph) + inputs + stack.extra,
        comp,
        rebuild,
        graph.over_layers(lambda b: b.flops),
        stack,
        checkpoints=-(-n // k),
        fully_recomputed=graph.kind_counts,
    )


def full(graph: OpGraph) -> ActivationPlan:
    """Full recompute: every block is its own checkpoint segment (``every_k`` with k = 1).

    Korthikanti et al. 2022, sec. 4.2: 2*s*b*h bytes per layer in 16-bit (the layer input).
    """
    return every_k(graph, 1)


def first_k(graph: OpGraph, k: int) -> ActivationPlan:
    """Megatron's block method (``megatron/core/transformer/transformer_block.py``
    ``_checkpointed_forward``, ``recompute_method == 'block'``): the first ``k`` layers each
    run under ``tensor_parallel.checkpoint`` (``CheckpointFunction`` saves the layer's input),
    the later ones normally. Per pipeline stage; with virtual stages Megatron applies it to
    each model chunk, memcalc to the rank's layers as one run."""
    n = graph.num_layers
    if not 0 <= k <= n:
        raise MemcalcError(f"--every: must be between 0 and the number of blocks ({n}); got {k}")
    layout = graph.layout
    split = layout.split_at([k])
    role_index: dict[tuple[int, Recompute], int] = {}
    tables = []
    for start, piece in split.starts():
        choice = Recompute.full if start < k else Recompute.none
        tables.append(
            {
                kind: role_index.setdefault((kind, choice), len(role_index))
                for kind in set(piece.period)
            }
        )
    roles = sorted(role_index, key=role_index.__getitem__)
    stored = {Recompute.none: lambda b: b.saved_bytes, Recompute.full: lambda b: b.checkpoint_bytes}
    stack = Roles(
        split.relabel(tables),
        tuple(kd for kd, _ in roles),
        tuple(c for _, c in roles),
        tuple(stored[c](graph.kinds[kd]) for kd, c in roles),
        _extra(graph) if k else 0,
    )
    comp = _outside_blocks(graph)
    full_counts = [layout.occurrences_before(kd, k) for kd in range(len(graph.kinds))]
    for kd, blk in enumerate(graph.kinds):
        count = graph.kind_counts[kd]
        comp = _merge(comp, {Component.checkpoint: blk.checkpoint_bytes}, full_counts[kd])
        comp = _merge(comp, blk.bytes_by_component(), count - full_counts[kd])
    if k:
        comp = _merge(comp, {Component.checkpoint: stack.extra})
    rebuild = max(
        (
            b.saved_bytes - b.checkpoint_bytes
            for b, c in zip(graph.kinds, full_counts, strict=True)
            if c
        ),
        default=0,
    )
    return ActivationPlan(
        "block",
        _outside_bytes(graph) + stack.total_stored(),
        comp,
        rebuild,
        sum(c * b.flops for b, c in zip(graph.kinds, full_counts, strict=True)),
        stack,
        checkpoints=k,
        note=f"first {k} layers of the stage recomputed",
        fully_recomputed=tuple(full_counts),
    )


def sqrt_k(num_blocks: int) -> int:
    """Chen et al. 2016's segment length: round(sqrt(N)), at least 1.

    >>> sqrt_k(32), sqrt_k(12), sqrt_k(2)
    (6, 3, 1)
    """
    return max(1, round(math.sqrt(num_blocks)))


# ---------------------------------------------------------------------------------------------
# Budget: an exact knapsack over block kinds x counts

MAX_COMPOSITIONS = 2_000_000
"""Largest number of (selective, full) splits the budget solver enumerates for one block kind
when several kinds compete for the budget; beyond it the request is refused, not approximated."""


@dataclass(frozen=True)
class _Option:
    choice: Recompute
    stored: int
    flops: int


@dataclass(frozen=True)
class _State:
    """A partial solution: bytes the blocks store, extra FLOPs, whether any block is
    checkpointed, and per kind how many layers are recomputed (full, selective)."""

    stored: int
    flops: int
    checkpointed: bool
    splits: tuple[tuple[int, int], ...]


def _options(blk: Block) -> list[_Option]:
    out = [_Option(Recompute.none, blk.saved_bytes, 0)]
    if blk.core_only_bytes:
        out.append(_Option(Recompute.selective, blk.selective_saved_bytes, blk.core_flops))
    out.append(_Option(Recompute.full, blk.checkpoint_bytes, blk.flops))
    return out


def _pareto(states: list[_State], extra: int) -> list[_State]:
    """Keep the states no other state beats on both bytes (charging the checkpoint's extra
    inputs to states that use one) and FLOPs. Exact: whatever the remaining kinds choose, a
    dominated state's completion costs at least as much as the dominating state's."""
    keyed = sorted(states, key=lambda st: (st.stored + (extra if st.checkpointed else 0), st.flops))
    out: list[_State] = []
    best: int | None = None
    for st in keyed:
        if best is None or st.flops < best:
            out.append(st)
            best = st.flops
    return out


def _best_single_kind(blk: Block, count: int, cap: int, extra: int) -> _Split | None:
    """One kind: for each number of fully recomputed layers, the fewest selective ones that fit
    ``cap`` (the rest kept whole, which costs no FLOPs) -- O(count) splits, the optimum of
    enumerating them all. Ties: fewer FLOPs, then fewer bytes."""
    opts = {o.choice: o for o in _options(blk)}
    none, full_ = opts[Recompute.none], opts[Recompute.full]
    sel = opts.get(Recompute.selective)
    best: _Split | None = None
    for n_full in range(count + 1):
        rest = count - n_full
        n_sel = 0
        if sel is not None and rest and none.stored > sel.stored:
            # the most layers kept whole: n_none*none + n_sel*sel + n_full*full + extra <= cap
            room = cap - n_full * full_.stored - rest * sel.stored - extra
            n_sel = rest - min(rest, max(0, room // (none.stored - sel.stored)))
        for split in {(n_full, n_sel), (n_full, 0)}:
            st = _split(split, count, none, sel, full_)
            if st[0] + (extra if st[2] else 0) <= cap and (
                best is None or (st[1], st[0]) < (best[1], best[0])
            ):
                best = st
    return best


_Split = tuple[int, int, bool, tuple[int, int]]
"""(stored bytes, extra FLOPs, checkpointed, (full, selective)) of one kind's layers."""


def _split(
    split: tuple[int, int], count: int, none: _Option, sel: _Option | None, full_: _Option
) -> _Split:
    n_full, n_sel = split
    n_none = count - n_full - n_sel
    stored = n_none * none.stored + n_full * full_.stored + (n_sel * sel.stored if sel else 0)
    flops = n_full * full_.flops + (n_sel * sel.flops if sel else 0)
    return stored, flops, n_full + n_sel > 0, split


def _kind_splits(blk: Block, count: int) -> list[_Split]:
    """Every split of ``count`` layers of one kind into none / selective / full."""
    opts = {o.choice: o for o in _options(blk)}
    none, full_ = opts[Recompute.none], opts[Recompute.full]
    sel = opts.get(Recompute.selective)
    return [
        _split((n_full, n_sel), count, none, sel, full_)
        for n_full in range(count + 1)
        for n_sel in (range(count - n_full + 1) if sel else (0,))
    ]


def budget(graph: OpGraph, budget_bytes: int) -> ActivationPlan:
    """Minimise extra forward FLOPs with stored activations <= ``budget_bytes``.

    Each block may keep everything, recompute its attention core (selective) or be fully
    recomputed from its input. Layers of one kind are interchangeable, so a solution is, per
    kind, how many of its layers take each choice: a multiple-choice knapsack over the kinds,
    solved exactly by dynamic programming over the kinds on the Pareto frontier of (stored
    bytes, extra FLOPs) -- a state is dropped only when another has no more bytes and no more
    FLOPs. Within a kind the first layers are recomputed fully, then selectively, and the last
    are kept whole.
    """
    fixed = _outside_bytes(graph)
    extra = _extra(graph)
    cap = budget_bytes - fixed
    present = [
        (i, b, c) for i, (b, c) in enumerate(zip(graph.kinds, graph.kind_counts, strict=True)) if c
    ]
    chosen: _State | None = None
    if len(present) == 1:
        i, blk, count = present[0]
        best = _best_single_kind(blk, count, cap, extra)
        if best is not None:
            splits = tuple((0, 0) for _ in graph.kinds)
            splits = splits[:i] + (best[3],) + splits[i + 1 :]
            chosen = _State(best[0], best[1], best[2], splits)
    else:
        frontier = [_State(0, 0, False, ())]
        for blk, count in zip(graph.kinds, graph.kind_counts, strict=True):
            if (count + 1) * (count + 2) // 2 > MAX_COMPOSITIONS:
                raise MemcalcError(
                    f"--recompute budget: {count} layers of one of {len(present)} block kinds "
                    f"is more than the exact solver takes ({MAX_COMPOSITIONS:,} splits); "
                    "use --recompute full, selective or every-k"
                )
            frontier = _pareto(
                [
                    _State(st.stored + s, st.flops + f, st.checkpointed or ck, (*st.splits, sp))
                    for st in frontier
                    for s, f, ck, sp in _kind_splits(blk, count)
                ],
                extra,
            )
        feasible = [st for st in frontier if st.stored + (extra if st.checkpointed else 0) <= cap]
        chosen = min(feasible, key=lambda st: (st.flops, st.stored)) if feasible else None
    if chosen is None:
        floor = fixed + graph.over_layers(lambda b: b.checkpoint_bytes) + extra
        raise MemcalcError(
            f"--budget: {budget_bytes} bytes is below what any recompute plan needs "
            f"({floor} bytes: block inputs plus the tensors saved outside the blocks)"
        )
    return _budget_plan(graph, chosen, extra)


def _budget_plan(graph: OpGraph, chosen: _State, extra: int) -> ActivationPlan:
    """The plan of a budget solution: roles laid out with each kind's first layers fully
    recomputed, then selective, then kept."""
    layout = graph.layout
    cuts = []
    for kind, (n_full, n_sel) in enumerate(chosen.splits):
        cuts += [
            layout.index_of_occurrence(kind, n_full),
            layout.index_of_occurrence(kind, n_full + n_sel),
        ]
    split = layout.split_at(cuts)
    role_index: dict[tuple[int, Recompute], int] = {}
    tables = []
    for start, piece in split.starts():
        table = {}
        for kind in set(piece.period):
            first = start + piece.period.index(kind)
            seen = layout.occurrences_before(kind, first)
            n_full, n_sel = chosen.splits[kind]
            choice = (
                Recompute.full
                if seen < n_full
                else Recompute.selective
                if seen < n_full + n_sel
                else Recompute.none
            )
            table[kind] = role_index.setdefault((kind, choice), len(role_index))
        tables.append(table)
    roles = sorted(role_index, key=role_index.__getitem__)
    stored_of = {
        Recompute.none: lambda b: b.saved_bytes,
        Recompute.selective: lambda b: b.selective_saved_bytes,
        Recompute.full: lambda b: b.checkpoint_bytes,
    }
    stack = Roles(
        split.relabel(tables),
        tuple(k for k, _ in roles),
        tuple(c for _, c in roles),
        tuple(stored_of[c](graph.kinds[k]) for k, c in roles),
        extra if chosen.checkpointed else 0,
    )
    comp = _outside_blocks(graph)
    rebuild = 0
    for kind, (n_full, n_sel) in enumerate(chosen.splits):
        blk, count = graph.kinds[kind], graph.kind_counts[kind]
        n_none = count - n_full - n_sel
        comp = _merge(comp, {Component.checkpoint: blk.checkpoint_bytes}, n_full)
        comp = _merge(comp, blk.selective_bytes_by_component(), n_sel)
        comp = _merge(comp, blk.bytes_by_component(), n_none)
        rebuild = max(
            rebuild,
            blk.saved_bytes - blk.checkpoint_bytes if n_full else 0,
            blk.core_only_bytes if n_sel else 0,
        )
    if chosen.checkpointed:
        comp = _merge(comp, {Component.checkpoint: extra})
    totals = {c: stack.count(c) for c in CHOICES}
    note = ", ".join(f"{v} {k.value}" for k, v in totals.items() if v)
    return ActivationPlan(
        "budget",
        _outside_bytes(graph) + chosen.stored + stack.extra,
        comp,
        rebuild,
        chosen.flops,
        stack,
        checkpoints=totals[Recompute.full],
        note=f"per block: {note}",
        fully_recomputed=tuple(n_full for n_full, _ in chosen.splits),
    )


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
        return every_k(graph, sqrt_k(graph.num_layers) if every is None else every)
    if strategy is Recompute.block:
        return first_k(graph, min(graph.num_layers, 1 if every is None else every))
    table: dict[Recompute, Callable[[OpGraph], ActivationPlan]] = {
        Recompute.none: keep_all,
        Recompute.selective: selective,
        Recompute.full: full,
    }
    return table[strategy](graph)
