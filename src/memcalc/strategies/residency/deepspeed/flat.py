"""ZeRO-1/2's flat parameter group and its partitions (``runtime/zero/stage_1_and_2.py``).

``DeepSpeedZeroOptimizer.__init__`` flattens a param group's trainable tensors, in
``model.parameters()`` order, into one buffer (``bit16_groups_flat``) padded to a multiple of
``nccl_start_alignment_factor (2) x dp`` (``flatten_dense_tensors_aligned``); every rank keeps
all of it and the model's ``p.data`` become views into it (``_update_model_bit16_weights``).
Rank r owns ``partition = padded / dp`` elements from ``r x partition``
(``get_data_parallel_partitions``). A tensor is "in" r's partition when it starts inside it or
straddles its start (``get_partition_info``): ``copy_grads_in_partition`` allocates the whole
of every such tensor's gradient, so ``grads_in_partition`` is larger than the partition.

>>> g = FlatGroup((245245, 61250, 12250), 2)
>>> g.padded, g.partition, g.grads_in_partition(0), g.grads_in_partition(1)
(318748, 159374, 245245, 318745)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

ALIGNMENT_FACTOR = 2
"""``nccl_start_alignment_factor``: 4-byte alignment / sizeof(fp16) (stage_1_and_2.py)."""


@dataclass(frozen=True)
class FlatGroup:
    """One param group, flattened and split over ``ranks``."""

    numels: tuple[int, ...]
    ranks: int

    @cached_property
    def total(self) -> int:
        return sum(self.numels)

    @cached_property
    def padded(self) -> int:
        """Elements of the flat buffer (``aligned_numel``)."""
        align = ALIGNMENT_FACTOR * self.ranks
        return -(-self.total // align) * align

    @property
    def partition(self) -> int:
        return self.padded // self.ranks

    @cached_property
    def _starts(self) -> tuple[int, ...]:
        out, at = [], 0
        for n in self.numels:
            out.append(at)
            at += n
        return tuple(out)

    def in_partition(self, rank: int) -> list[int]:
        """Indices of the tensors in ``rank``'s partition (``get_partition_info``)."""
        lo, hi = rank * self.partition, (rank + 1) * self.partition
        return [
            j
            for j, (at, n) in enumerate(zip(self._starts, self.numels, strict=True))
            if lo <= at < hi or at < lo < at + n
        ]

    def grads_in_partition(self, rank: int) -> int:
        """Elements of ``grads_in_partition`` (every tensor in the partition, whole)."""
        return sum(self.numels[j] for j in self.in_partition(rank))

    def pieces(self, rank: int) -> list[int]:
        """Elements of each gradient slice ``averaged_gradients`` lists for ``rank``
        (``_get_flat_partition_unpadded``: the straddling first tensor from its offset, the
        last cut at the partition's end), then the zero padding that fills the partition."""
        lo = rank * self.partition
        out, size = [], 0
        for j in self.in_partition(rank):
            offset = max(0, lo - self._starts[j])
            n = min(self.numels[j] - offset, self.partition - size)
            out.append(n)
            size += n
        if size < self.partition:
            out.append(self.partition - size)  # torch.zeros(partition_size - current_size)
        return out

    def padding(self, rank: int) -> int:
        """Zeros ``get_flat_partition`` appends to ``rank``'s gradient list (the last ranks)."""
        covered = sum(self.pieces(rank)[: len(self.in_partition(rank))])
        return self.partition - covered
