"""FSDP2 (``torch/distributed/fsdp/_fully_shard``) as ZeRO-3 runs here: one parameter group
per block and the root group of everything else, as ``fully_shard`` per block then on the
model wraps it.

Parameters: the root's (embedding, final norm, head) stay gathered from the forward until the
end of backward (torch's default for the root, ``reshard_after_forward=None``). Forward keeps
the last block's all-gather result until the root's post-forward
(``FSDPParamGroup.wait_for_unshard`` frees a forward result after the next copy-out), so it is
alive at the loss; backward prefetches the next block's all-gather (``_backward_prefetch``)
while a block runs -- from the loss for the last block, none below block 0. Without resharding
(``reshard_after_forward=False``) every layer's gathered weights stay from its forward until
its backward, and nothing is prefetched.

Gradients: a block's are full only until its own post-backward reduce-scatters them, so during
its backward only those written so far are full -- beside the input of the last
reduce-scatter (the block above's full gradients, flat), which FSDP2 keeps until the next one
(``reduce_scatter_max_input_buffers`` = 1, ``FSDPParamGroup.post_backward``). The root's are
reduce-scattered by its post-backward after the embedding's.
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.graph.layout import LayerLayout
from memcalc.strategies.residency.gradients import ShardedGradients


@dataclass(frozen=True)
class Fsdp2Params:
    """The gathered (unsharded) weights on a rank beyond its shards, moment by moment."""

    root_numel: int
    """Parameters outside the blocks (the root group)."""
    block_numel: tuple[int, ...]
    """Per block kind."""
    layout: LayerLayout
    weight_bytes: int
    """Bytes per gathered element (the weight dtype)."""
    reshard: bool

    def _gathered(self, numel: int) -> int:
        return (self.root_numel + numel) * self.weight_bytes

    def _unsharded_below(self, i: int) -> int:
        """Parameters of layers 0..i-1, still gathered without resharding (else none)."""
        return 0 if self.reshard else self.layout.prefix_sum(self.block_numel, i)

    def _last_block(self) -> int:
        n = self.layout.n
        return self.block_numel[self.layout.kind_at(n - 1)] if n else 0

    def at_loss_forward(self) -> int:
        """The last block's all-gather result, kept until the root's post-forward."""
        return self._gathered(self._last_block() + self._unsharded_below(self.layout.n))

    def at_loss_backward(self) -> int:
        """Prefetched again by the root's pre-backward (not needed without resharding: every
        block is still gathered)."""
        last = self._last_block() if self.reshard else 0
        return self._gathered(last + self._unsharded_below(self.layout.n))

    def at_block(self, i: int) -> int:
        """This block, and the next one's all-gather prefetched (none below block 0)."""
        if not self.reshard:
            return self._gathered(self._unsharded_below(i + 1))
        kind = self.layout.kind_at
        below = self.block_numel[kind(i - 1)] if i else 0
        return self._gathered(self.block_numel[kind(i)] + below)

    def at_embedding(self) -> int:
        return self._gathered(0)

    def at_forward(self, i: int | None) -> int | None:
        """No forward moments of its own: a block's gathered weights in forward are at most
        its backward's."""
        return None


@dataclass(frozen=True)
class NoGather:
    """Parameters kept whole or sharded without all-gathers in the step (no ZeRO-3)."""

    def at_loss_forward(self) -> int:
        return 0

    def at_loss_backward(self) -> int:
        return 0

    def at_block(self, i: int) -> int:
        return 0

    def at_embedding(self) -> int:
        return 0

    def at_forward(self, i: int | None) -> int | None:
        return None


@dataclass(frozen=True)
class Fsdp2Gradients(ShardedGradients):
    """FSDP2's gradients (the module docstring): in a later micro-batch, as ZeRO-2's. Under
    a MixedPrecisionPolicy the unsharded ones (the current block's, the root's) are
    ``unsharded_bytes`` per element and the sharded ones and the reduce-scatter input
    ``grad_bytes`` (``reduce_dtype``)."""

    grad_bytes: int = 1
    unsharded_bytes: int = 1

    def _unsharded(self, value: int) -> int:
        return value // self.grad_bytes * self.unsharded_bytes

    def _pending(self, i: int) -> int:
        """The last reduce-scatter's input, alive during layer ``i``'s backward: the block
        above's full gradients (block 0's at the embedding, ``i == -1``)."""
        t = self.totals
        return t.block(i + 1) if i + 1 < t.layout.n else 0

    def logical(self, i: int | None, written: int, accumulated: bool) -> int:
        if accumulated:
            return self.totals.full
        return super().logical(i, written, accumulated) + self._pending(-1 if i is None else i)

    def _split(self, reduced: int, unreduced: int) -> int:
        """The blocks already reduce-scattered are shards; the root's gradients and the
        current block's written so far are full."""
        return self.sharding.share(reduced, 2) + unreduced

    def at_block(self, i: int, written: int, accumulated: bool, current: int = 0) -> int:
        if accumulated:
            return super().at_block(i, written, accumulated)
        t = self.totals
        unreduced = self._unsharded(t.head + min(written, t.block(i))) + self._pending(i)
        return self._split(t.before(i) - t.head, unreduced)

    def at_embedding(self, accumulated: bool) -> int:
        if accumulated:
            return super().at_embedding(accumulated)
        t = self.totals
        return self._split(t.all_blocks, self._unsharded(t.full - t.all_blocks) + self._pending(-1))

    def extra_candidates(self) -> set[int]:
        """The first backward with a pending reduce-scatter input."""
        n = self.totals.layout.n
        return {n - 2} if n >= 2 else set()
