"""The quantities the mechanisms answer about: the gradients of one step, in bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from memcalc.graph.layout import LayerLayout


@dataclass(frozen=True)
class Tail:
    """A moment after the last gradient of a backward (a mechanism's epilogue)."""

    where: str
    gradient_bytes: int
    """The gradients (and buffers holding them) on the GPU then."""
    transient_bytes: int
    gathered_bytes: int | None = None
    """Weights gathered beyond the resident ones then, where the gradient mechanism knows
    better than the parameters' (None: the parameters mechanism's)."""


@dataclass(frozen=True)
class GradientTotals:
    """The full (unsharded) gradients of one rank's part of the model, in bytes."""

    full: int
    """Every gradient the rank's backward writes (its parameters', and any beyond them:
    DTensor's replicated embedding gradient)."""
    head: int
    """Written before the first block's backward: the LM head's and the final norm's (and a
    tied head's, held in the embedding's autograd input buffer)."""
    blocks: tuple[int, ...]
    """Per block kind."""
    layout: LayerLayout

    @property
    def all_blocks(self) -> int:
        return self.layout.total(self.blocks)

    def block(self, i: int) -> int:
        """Layer ``i``'s."""
        return self.blocks[self.layout.kind_at(i)]

    def before(self, i: int) -> int:
        """Written before layer ``i``'s backward (first micro-batch): the head's and the
        later layers'."""
        return self.head + self.all_blocks - self.layout.prefix_sum(self.blocks, i + 1)


class GradientHolder(Protocol):
    """Where a rank's gradients are at each moment the step timeline asks about (bytes)."""

    @property
    def totals(self) -> GradientTotals: ...

    @property
    def prunes(self) -> bool:
        """The walk may drop backward steps a later one dominates."""
        ...

    @property
    def accumulates_in_place(self) -> bool:
        """A later micro-batch's weight gradients are temporaries added in place to the
        gradients already there (torch's AccumulateGrad on resident gradients)."""
        ...

    def at_loss(self, accumulated: bool) -> int: ...

    def at_block(self, i: int, written: int, accumulated: bool, current: int = 0) -> int: ...

    def at_embedding(self, accumulated: bool) -> int: ...

    def at_step(self) -> int: ...

    def tail(self, accumulated: bool) -> tuple[Tail, ...]: ...

    def after_loss(self, accumulated: bool) -> tuple[Tail, ...]: ...

    def extra_candidates(self) -> set[int]: ...

    def between_steps(self) -> int: ...


class ParamsHolder(Protocol):
    """Weights gathered beyond a rank's resident parameters at each moment (bytes)."""

    def at_loss_forward(self) -> int: ...

    def at_loss_backward(self) -> int: ...

    def at_block(self, i: int) -> int: ...

    def at_embedding(self) -> int: ...

    def at_forward(self, i: int | None) -> int | None:
        """Layer ``i``'s forward (None: the embedding's); None: no forward moments."""
        ...
