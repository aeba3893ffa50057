"""Which block kind each layer of the stack is, without listing the layers.

A model's decoder layers are few *kinds* repeated many times: one kind for a dense model,
local / global attention layers alternating in Gemma, dense-first-then-MoE layers in DeepSeek,
a slice of any of these on a pipeline stage. A ``LayerLayout`` stores that as a short list of
``Piece`` s, each a periodic pattern of kind indices and a length, so that every question the
estimate asks of the stack -- how many layers of each kind, the sum of a per-kind value over
the layers before layer ``i``, which layer is the m-th of a kind -- costs the number of pieces
and the length of their periods, never the number of layers.

>>> gemma = LayerLayout.periodic((0, 0, 0, 0, 0, 1), 34)   # five local layers, then a global one
>>> gemma.counts(2), gemma.kind_at(5), gemma.prefix_sum((10, 1), 12)
((29, 5), 1, 102)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from memcalc.periodic import smallest_period


class Values(Protocol):
    """A per-kind value: ``values[kind]``."""

    def __getitem__(self, kind: int, /) -> int: ...


MAX_PERIOD = 64
"""Longest period ``LayerLayout.from_kinds`` looks for in an explicit per-layer list."""


@dataclass(frozen=True)
class Piece:
    """``length`` consecutive layers whose kinds follow ``period`` cyclically from its start."""

    period: tuple[int, ...]
    length: int

    def kind_at(self, offset: int) -> int:
        return self.period[offset % len(self.period)]

    def prefix_sum(self, values: Values, upto: int) -> int:
        """Sum of ``values[kind]`` over the first ``upto`` layers of the piece."""
        p = len(self.period)
        full, rest = divmod(upto, p)
        total = full * sum(values[k] for k in self.period) if full else 0
        return total + sum(values[k] for k in self.period[:rest])

    def sum_at_multiples(self, values: Values, start: int, k: int, upto: int) -> int:
        """Sum of ``values[kind]`` over the piece's layers at global indices that are multiples
        of ``k``, among the first ``upto`` layers (the piece begins at global index ``start``).
        The kinds met at multiples of k repeat every P / gcd(P, k) of them."""
        first = -(-start // k) * k - start  # offset of the first multiple of k in the piece
        if first >= upto:
            return 0
        hits = (upto - 1 - first) // k + 1
        p = len(self.period)
        cycle = p // math.gcd(p, k)
        pattern = [values[self.period[(first + j * k) % p]] for j in range(min(cycle, hits))]
        full, rest = divmod(hits, cycle)
        return full * sum(pattern) + sum(pattern[:rest]) if full else sum(pattern[:rest])


@dataclass(frozen=True)
class Progression:
    """Layers ``first, first + step, ...`` (``count`` of them) of one kind, along which the
    bytes held before each layer and the gradients already written grow by the same amount
    from one member to the next: a quantity affine in those is largest at an end."""

    first: int
    step: int
    count: int

    @property
    def last(self) -> int:
        return self.first + self.step * (self.count - 1)

    def at(self, t: int) -> int:
        return self.first + self.step * t


@dataclass(frozen=True)
class LayerLayout:
    """The kinds of the ``n`` layers of a stack, as consecutive pieces."""

    pieces: tuple[Piece, ...]

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def uniform(cls, n: int, kind: int = 0) -> LayerLayout:
        """``n`` layers of one kind (a dense model)."""
        return cls((Piece((kind,), n),)) if n else cls(())

    @classmethod
    def periodic(cls, period: Sequence[int], n: int, head: Sequence[int] = ()) -> LayerLayout:
        """``head`` layer by layer, then ``period`` repeated (truncated) up to ``n`` layers."""
        pieces = [Piece((k,), c) for k, c in _runs(head[:n])]
        if n > len(head):
            pieces.append(Piece(_shortest_period(tuple(period)), n - len(head)))
        return cls(tuple(pieces)).normalised()

    @classmethod
    def from_kinds(cls, kinds: Sequence[int]) -> LayerLayout:
        """The layout of an explicit per-layer list of kinds (a traced model, HF
        ``layer_types``): a short head followed by the shortest period that reproduces the
        rest, or the list's runs when no period is short enough."""
        kinds = tuple(kinds)
        n = len(kinds)
        runs = _runs(kinds)
        best: LayerLayout = cls(tuple(Piece((k,), c) for k, c in runs))
        for head in range(0, min(8, n) + 1):
            period = _period_of(kinds[head:])
            if period is None:
                continue
            candidate = cls.periodic(kinds[head : head + period], n, head=kinds[:head])
            if candidate.size < best.size:
                best = candidate
        return best

    def normalised(self) -> LayerLayout:
        """Empty pieces dropped, adjacent single-kind pieces of one kind merged."""
        out: list[Piece] = []
        for piece in self.pieces:
            if piece.length <= 0:
                continue
            period = _shortest_period(piece.period)
            if out and len(period) == 1 and out[-1].period == period:
                out[-1] = Piece(period, out[-1].length + piece.length)
            else:
                out.append(Piece(period, piece.length))
        return LayerLayout(tuple(out))

    # -- queries ---------------------------------------------------------------------------

    @property
    def n(self) -> int:
        return sum(p.length for p in self.pieces)

    @property
    def size(self) -> int:
        """How much describing the layout takes (pieces + period entries): the cost unit."""
        return sum(1 + len(p.period) for p in self.pieces)

    @property
    def kinds(self) -> frozenset[int]:
        return frozenset(k for p in self.pieces for k in p.period[: p.length])

    def starts(self) -> Iterator[tuple[int, Piece]]:
        """(global index of its first layer, piece) for each piece."""
        start = 0
        for piece in self.pieces:
            yield start, piece
            start += piece.length

    def kind_at(self, i: int) -> int:
        """The kind of layer ``i`` (0-based)."""
        for start, piece in self.starts():
            if i < start + piece.length:
                return piece.kind_at(i - start)
        raise IndexError(f"layer {i} of {self.n}")

    def prefix_sum(self, values: Values, upto: int) -> int:
        """Sum of ``values[kind]`` over layers ``0 .. upto - 1``."""
        total = 0
        for start, piece in self.starts():
            if upto <= start:
                break
            total += piece.prefix_sum(values, min(upto - start, piece.length))
        return total

    def total(self, values: Values) -> int:
        return self.prefix_sum(values, self.n)

    def counts(self, num_kinds: int) -> tuple[int, ...]:
        """How many layers of each kind ``0 .. num_kinds - 1``."""
        return tuple(self.total(Indicator(k)) for k in range(num_kinds))

    def sum_at_multiples(self, values: Values, k: int, upto: int) -> int:
        """Sum of ``values[kind]`` over layers ``0, k, 2k, ...`` below ``upto``."""
        total = 0
        for start, piece in self.starts():
            if upto <= start:
                break
            total += piece.sum_at_multiples(values, start, k, min(upto - start, piece.length))
        return total

    def occurrences_before(self, kind: int, i: int) -> int:
        """How many layers of ``kind`` come before layer ``i``."""
        return self.prefix_sum(Indicator(kind), i)

    def index_of_occurrence(self, kind: int, m: int) -> int:
        """The layer index of the ``m``-th (0-based) layer of ``kind``; ``n`` if there is none."""
        seen = 0
        for start, piece in self.starts():
            here = piece.prefix_sum(Indicator(kind), piece.length)
            if seen + here <= m:
                seen += here
                continue
            full, rest = divmod(m - seen, piece.period.count(kind))
            offsets = [j for j, k in enumerate(piece.period) if k == kind]
            return start + full * len(piece.period) + offsets[rest]
        return self.n

    # -- transformations -------------------------------------------------------------------

    def slice(self, a: int, b: int) -> LayerLayout:
        """Layers ``a .. b - 1`` (a pipeline stage's share)."""
        out = []
        for start, piece in self.starts():
            lo, hi = max(a, start), min(b, start + piece.length)
            if lo >= hi:
                continue
            shift = (lo - start) % len(piece.period)
            out.append(Piece(piece.period[shift:] + piece.period[:shift], hi - lo))
        return LayerLayout(tuple(out)).normalised()

    def split_at(self, cuts: Sequence[int]) -> LayerLayout:
        """The same layers with a piece boundary at each index in ``cuts``."""
        edges = sorted({0, self.n, *(c for c in cuts if 0 < c < self.n)})
        pieces: list[Piece] = []
        for a, b in zip(edges, edges[1:], strict=False):
            pieces.extend(self.slice(a, b).pieces)
        return LayerLayout(tuple(pieces))

    def relabel(self, kind_of: Sequence[dict[int, int]]) -> LayerLayout:
        """Each piece's kinds mapped through its own table (``kind_of[piece index]``); pieces
        are kept apart even when they end up alike, so that indices stay comparable."""
        return LayerLayout(
            tuple(
                Piece(tuple(table[k] for k in piece.period), piece.length)
                for piece, table in zip(self.pieces, kind_of, strict=True)
            )
        )

    # -- the peak search ---------------------------------------------------------------------

    def progressions(self) -> list[Progression]:
        """Progressions covering every layer (see ``Progression``): in each piece, the layers at one
        offset of its period."""
        out: list[Progression] = []
        for start, piece in self.starts():
            p = len(piece.period)
            for o in range(min(p, piece.length)):
                out.append(Progression(start + o, p, -(-(piece.length - o) // p)))
        return out


class Indicator:
    """``values`` for ``prefix_sum`` that count the layers of one kind."""

    def __init__(self, kind: int) -> None:
        self.kind = kind

    def __getitem__(self, k: int) -> int:
        return 1 if k == self.kind else 0


def _runs(kinds: Sequence[int]) -> list[tuple[int, int]]:
    """Run-length encoding: [(kind, count), ...]."""
    out: list[tuple[int, int]] = []
    for k in kinds:
        if out and out[-1][0] == k:
            out[-1] = (k, out[-1][1] + 1)
        else:
            out.append((k, 1))
    return out


def _shortest_period(period: tuple[int, ...]) -> tuple[int, ...]:
    """The shortest pattern whose repetition is ``period`` (``(0, 1, 0, 1)`` -> ``(0, 1)``)."""
    n = len(period)
    for p in range(1, n):
        if n % p == 0 and period[:p] * (n // p) == period:
            return period[:p]
    return period


def _period_of(seq: tuple[int, ...]) -> int | None:
    """The smallest period of ``seq`` when it is at most MAX_PERIOD (else None; None too for
    an empty sequence)."""
    p = smallest_period(seq)
    return p if 0 < p <= MAX_PERIOD else None
