"""FSDP2 as torchtitan wraps it (``FsdpGroups.torchtitan``; T30 ``distributed/fsdp.py``
``apply_fsdp_to_decoder``, T22 ``models/llama3/infra/parallelize.py`` ``apply_fsdp``): one
group per block, the token embedding alone, ``[norm, lm_head]`` together and not resharded
after forward, then the root, which holds nothing else. (A tied embedding is one group with the
norm and head, gathered from its forward to the end of backward: the root rule of
``fsdp2.py``.)

Parameters (gathered in ``param_dtype``, torch ``_fsdp_param_group.py``): the head group is
gathered from its forward until its own backward is done; a block's group during its forward
and, in backward, from its pre-backward copy-out -- while the next group down is prefetched
(``_backward_prefetch``: an all-gather into a flat buffer) -- until its post-backward reshards
it. The model's forward ends with the root's post-forward, which frees the last deferred
all-gather buffer (``FSDPState._post_forward``), so the loss, run outside the model, sees only
the head group.

Gradients: a group's unsharded gradients are written in ``param_dtype`` during its backward;
its post-backward (``foreach_reduce``) first frees the oldest retained reduce-scatter input
(``reduce_scatter_max_input_buffers`` = 1), copies the gradients into a new flat input in
``reduce_dtype`` (``foreach_reduce_scatter_copy_in``), frees them, and reduce-scatters into a
flat shard in ``reduce_dtype`` that becomes (or, with gradients kept across steps, is added
to) the sharded ``.grad``. The head group's are reduced right after the head's backward, the
embedding's last.
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.graph.layout import LayerLayout
from memcalc.strategies.residency.gradients import ShardedGradients


@dataclass(frozen=True)
class SplitRootParams:
    """The gathered weights on a rank beyond its shards, moment by moment."""

    embedding_numel: int
    head_numel: int
    """The final norm's and the LM head's elements (one group)."""
    block_numel: tuple[int, ...]
    """Per block kind."""
    layout: LayerLayout
    weight_bytes: int
    """Bytes per gathered element (``param_dtype``)."""
    reshard: bool
    """``reshard_after_forward`` of the blocks and the embedding."""

    def _blocks(self, numel: int) -> int:
        return numel * self.weight_bytes

    def _kept_below(self, i: int) -> int:
        """Blocks 0..i-1 still gathered without resharding (else none)."""
        return 0 if self.reshard else self.layout.prefix_sum(self.block_numel, i)

    def _embedding_kept(self) -> int:
        return 0 if self.reshard else self.embedding_numel

    def at_loss_forward(self) -> int:
        n = self.layout.n
        return self._blocks(self.head_numel + self._kept_below(n) + self._embedding_kept())

    def at_loss_backward(self) -> int:
        return self.at_loss_forward()

    def at_block(self, i: int) -> int:
        """Layer ``i`` gathered and the group below it prefetched (the embedding below block
        0); the head group was resharded by its post-backward."""
        kind = self.layout.kind_at
        if not self.reshard:
            return self._blocks(self._kept_below(i + 1) + self.embedding_numel)
        below = self.block_numel[kind(i - 1)] if i else self.embedding_numel
        return self._blocks(self.block_numel[kind(i)] + below)

    def at_embedding(self) -> int:
        return self._blocks(self.embedding_numel)

    def at_forward(self, i: int | None) -> int | None:
        """No forward moments of its own: as ``fsdp2.Fsdp2Params``, a group's gathered weights
        in forward are at most its backward's (reshard_after_forward)."""
        return None


@dataclass(frozen=True)
class SplitRootGradients(ShardedGradients):
    """The gradients under torchtitan's groups (the module docstring), in bytes of the
    sharded ``.grad`` dtype (``reduce_dtype``); the unsharded ones are ``unsharded_bytes`` per
    element, the sharded ones ``grad_bytes``."""

    grad_bytes: int = 4
    unsharded_bytes: int = 4
    kept: bool = False
    """Every sharded gradient exists from the step's start (``set_to_none=False``)."""

    def _unsharded(self, written: int) -> int:
        return written // self.grad_bytes * self.unsharded_bytes

    def _reduced(self, value: int) -> int:
        """The sharded gradients on the rank when ``value`` bytes of full ones are reduced."""
        return self.sharding.share(self.totals.full if self.kept else value, 2)

    def at_loss(self, accumulated: bool) -> int:
        return self._reduced(self.totals.full if accumulated else 0)

    def _pending(self, i: int) -> int:
        """The retained reduce-scatter input during layer ``i``'s backward: the group above's
        (the head's above the last layer; block 0's at the embedding, ``i == -1``)."""
        t = self.totals
        return t.block(i + 1) if i + 1 < t.layout.n else t.head

    def at_block(self, i: int, written: int, accumulated: bool, current: int = 0) -> int:
        t = self.totals
        done = t.full if accumulated else t.before(i)
        return self._reduced(done) + self._pending(i) + self._unsharded(min(written, t.block(i)))

    def at_embedding(self, accumulated: bool) -> int:
        t = self.totals
        embedding = t.full - t.head - t.all_blocks
        done = t.full if accumulated else t.head + t.all_blocks
        return self._reduced(done) + self._pending(-1) + self._unsharded(embedding)

    def at_step(self) -> int:
        return self._reduced(self.totals.full)

    def extra_candidates(self) -> set[int]:
        """The last layer (its pending input is the head group's, not a block's)."""
        n = self.totals.layout.n
        return {n - 1} if n else set()
