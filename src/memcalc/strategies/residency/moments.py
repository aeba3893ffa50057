"""The quantities the mechanisms answer about: the gradients of one step, in bytes."""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.graph.layout import LayerLayout


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
