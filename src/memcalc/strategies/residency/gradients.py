"""Where a rank's gradients are while the backward writes them: the holder of each mechanism.

Every holder answers four moments: the loss (before any block's backward), layer ``i``'s
backward with ``written`` bytes of that layer's gradients written so far, the embedding's
backward (the last), and the optimizer step. ``accumulated``: a later micro-batch, every
gradient written once already (gradient accumulation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from memcalc.strategies.residency.moments import GradientTotals, Tail
from memcalc.strategies.sharding import Sharding


@dataclass(frozen=True)
class ResidentGradients:
    """Every gradient on the GPU, whole, from its ``.grad`` write until the step (one GPU,
    DDP, ZeRO-1)."""

    totals: GradientTotals
    prunes: ClassVar[bool] = True
    """The walk may drop a backward step that a later one dominates (more gradients written
    can only mean as many bytes or more)."""
    accumulates_in_place: ClassVar[bool] = True
    """Under gradient accumulation a later micro-batch's new weight gradient is a temporary
    beside the ``.grad`` it is added to (AccumulateGrad: ``variable_grad += new_grad`` when the
    gradient exists and grad mode is off, ``torch/csrc/autograd/functions/accumulate_grad.h``
    ``accumulateGrad``)."""

    def logical(self, i: int | None, written: int, accumulated: bool) -> int:
        """Full gradient bytes written by layer ``i``'s backward moment (None: the
        embedding's, at the end of backward)."""
        t = self.totals
        if accumulated or i is None:
            return t.full
        return t.before(i) + min(written, t.block(i))

    def on_gpu(self, value: int, bucket: int) -> int:
        """Bytes on the GPU when ``value`` bytes of full gradients exist (``bucket``: the
        current block's full gradients, awaiting their reduce)."""
        return value

    def at_loss(self, accumulated: bool) -> int:
        return self.on_gpu(self.totals.full, 0) if accumulated else 0

    def at_block(self, i: int, written: int, accumulated: bool, current: int = 0) -> int:
        """Layer ``i``'s backward with ``written`` bytes of its gradients written, the last
        ``current`` of them by the op at hand (counted in ``written`` already here)."""
        return self.on_gpu(self.logical(i, written, accumulated), self.totals.block(i))

    def at_embedding(self, accumulated: bool) -> int:
        t = self.totals
        return self.on_gpu(t.full, t.blocks[t.layout.kind_at(0)] if t.layout.n else 0)

    def at_step(self) -> int:
        return self.on_gpu(self.totals.full, 0)

    def extra_candidates(self) -> set[int]:
        """Layers whose backward may set the peak beyond the timeline's own candidates."""
        return set()

    def between_steps(self) -> int:
        """Gradient bytes still allocated after the step (``zero_grad(set_to_none=True)``
        frees every ``.grad``)."""
        return 0

    def tail(self, accumulated: bool) -> tuple[Tail, ...]:
        """Moments after the embedding's backward (none: the gradients just stay)."""
        return ()

    def after_loss(self, accumulated: bool) -> tuple[Tail, ...]:
        """Moments of the LM head's and final norm's backward, between the loss's and the
        last block's (none: their gradients are counted with the last block's)."""
        return ()


@dataclass(frozen=True)
class ShardedGradients(ResidentGradients):
    """ZeRO-2 (Rajbhandari et al. 2020, sec. 5.2): each rank keeps its 1/N shard of every
    gradient, beside the current block's full gradients until their reduce-scatter."""

    sharding: Sharding = Sharding()
    accumulates_in_place: ClassVar[bool] = False
    """The current block's full gradients are written afresh each micro-batch and reduced into
    the shard: the first pass's bytes, no temporary beyond them."""

    def on_gpu(self, value: int, bucket: int) -> int:
        return self.sharding.share(value, 2) + bucket
