"""DeepSpeed ZeRO-3 (``runtime/zero/stage3.py`` ``DeepSpeedZeroOptimizer_Stage3``,
``partition_parameters.py``): what a rank holds, and its gradients and gathered parameters at
each moment of the step.

Held for the whole run:

* every parameter's partition, ``ceil(numel / ranks)`` elements on every rank
  (``_partition_param``, defragmented into ``lp_param_buffer``); a parameter of at most
  ``stage3_param_persistence_threshold`` elements (``mark_persistent_parameters``) also keeps
  its whole ``.data``, gathered into ``ceil(numel / ranks) x ranks`` elements
  (``_allgather_params_coalesced`` after each step, ``_post_step``);
* an fp32 master copy of the partitions (``_create_fp32_partitions``: a separate copy for fp32
  models too -- its alias test compares a ``torch.device`` with a device *string*, never equal)
  and the optimizer's moments of it;
* the ipg bucket, ``torch.empty(reduce_bucket_size)`` in the communication dtype
  (``_setup_for_real_optimizer``), and ``grad_partitions_flat_buffer``, the partitions'
  gradients in ``gradient_accumulation_dtype`` (the model's by default).

In the backward each gradient is copied into the bucket as its hook fires
(``__add_grad_to_ipg_bucket``; one that does not fit stays autograd's); a full bucket, and the
rest at the epilogue, is reduce-scattered by ``coalesced_collectives.reduce_scatter_coalesced``,
which ``torch.cat``s the gradients into one padded, interleaved buffer (``sum(ceil(numel /
ranks) x ranks)`` elements; a single tensor that needs no padding is used as it is), and the
partitions are copied into the gradient buffer (``partition_grads``). **CPU only**: gloo's
``reduce_scatter_tensor`` copies its whole input once more; NCCL does not (the GPU estimate
leaves it out, the CPU comparison counts it).

The step (``step``): every gathered parameter is released first (``_partition_all_parameters``,
the persistent ones too), the norm takes an fp64 copy of one partition's gradient at a time
(``get_grad_norm_direct``, ``zero/utils.py get_norm_dtype``), each optimizer sub-group
(``sub_group_size`` elements of partitions, ``_create_fp16_sub_groups``) gets
``flatten(gradients).to(fp32)`` for its update (``_prepare_fp32_grad_for_sub_group``), and the
persistent parameters are gathered again at the end (``_post_step``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from memcalc.strategies.residency.deepspeed.buckets import Flush, Order, flushes
from memcalc.strategies.residency.moments import GradientTotals, Tail

NORM_CHUNK = 250_000_000
"""``_constant_buffered_norm2``'s ``buffer_size``: elements normed (in fp64) at once."""


@dataclass(frozen=True)
class Partitions:
    """ZeRO-3's per-parameter partitions of one rank, in elements."""

    numels: tuple[int, ...]
    ranks: int
    persistence_threshold: int
    model_persistence_threshold: int

    def part(self, j: int) -> int:
        return -(-self.numels[j] // self.ranks)

    @cached_property
    def total(self) -> int:
        """Elements of every partition (``lp_param_buffer``, the master copy, the gradients)."""
        return sum(self.part(j) for j in range(len(self.numels)))

    @cached_property
    def persistent(self) -> frozenset[int]:
        """``mark_persistent_parameters``: small parameters, in ``named_parameters`` order,
        while their total stays within the model threshold."""
        out, total = [], 0
        for j, n in enumerate(self.numels):
            if n + total > self.model_persistence_threshold:
                continue
            if n <= self.persistence_threshold:
                out.append(j)
                total += n
        return frozenset(out)

    @cached_property
    def persistent_whole(self) -> int:
        """Elements of the persistent parameters' gathered data (padded to the ranks)."""
        return sum(self.part(j) * self.ranks for j in self.persistent)

    def sub_groups(self, size: int) -> list[int]:
        """Partition elements of each optimizer sub-group (``_create_fp16_sub_groups``)."""
        if size >= self.total:
            return [self.total]
        out, acc = [], 0
        for j in range(len(self.numels)):
            acc += self.part(j)
            if acc >= size or j == len(self.numels) - 1:
                out.append(acc)
                acc = 0
        return out

    def scatter_input(self, members: tuple[int, ...], order: Order) -> tuple[int, int]:
        """Elements ``reduce_scatter_coalesced`` allocates for the tensors at ``members``
        positions of ``order``: the padded cat (none for one tensor that needs no padding),
        and its input's size (what gloo copies)."""
        sizes = [order.numels[p] for p in members]
        padded = sum(-(-n // self.ranks) * self.ranks for n in sizes)
        cat = 0 if len(sizes) == 1 and sizes[0] % self.ranks == 0 else padded
        return cat, padded


@dataclass(frozen=True)
class Zero3Gradients:
    """The rank's gradient bytes at each moment (the module docstring)."""

    totals: GradientTotals
    partitions: Partitions
    arrival: Order
    """Tensors in the backward's order."""
    bucket: int
    model_bytes: int
    comm_bytes: int
    resident: int
    """Bytes held for the whole run: the ipg bucket and the gradient partitions (on the GPU)."""
    gloo: bool
    walk_bytes: int
    """Bytes per gradient element the step timeline counts ``written`` in."""
    head_gathered: tuple[int, ...] = ()
    """Gathered bytes during the backward of each of the head's tensors' modules (the LM head
    is released before the final norm's gradient hook fires)."""
    offload: bool = False
    """``offload_optimizer``: each reduced partition is normed and copied to the host."""
    norms: int = 0
    """Offload: the fp64 norms of the partitions' gradients (``norm_for_param_grads``), from
    the epilogue to the step."""
    prunes = False
    accumulates_in_place = False

    @cached_property
    def flushes(self) -> tuple[Flush, ...]:
        return tuple(flushes(self.arrival.numels, self.bucket, zero3=True))

    def _copy(self, f: Flush) -> int:
        """Bytes a reduction makes: the cat, and beside it gloo's copy of the input (CPU only)
        or, under offload, ``partition_grads``' fp64 norm of one partition at a time
        (``_offload_grad_partition_at_boundary`` -> ``_constant_buffered_norm2``, in chunks of
        250M elements; the fp32 cast that follows is half of it) -- the two do not overlap."""
        cat, padded = self.partitions.scatter_input(f.tensors, self.arrival)
        gloo = padded * self.comm_bytes if self.gloo else 0
        norm = 0
        if self.offload:
            parts = (-(-self.arrival.numels[p] // self.partitions.ranks) for p in f.tensors)
            norm = 8 * min(max(parts, default=0), NORM_CHUNK)
        return cat * self.comm_bytes + max(gloo, norm)

    def _pending(self, start: int) -> int:
        """Gradients that did not fit the bucket, waiting for the next reduction."""
        order = self.arrival.numels
        return self.model_bytes * sum(
            order[p]
            for f in self.flushes
            if f.pending and f.position >= start
            for p in f.tensors
            if p < start and order[p] > self.bucket
        )

    def _moment(self, lo: int, hi: int) -> int:
        pos = self.arrival.during(lo, hi)
        flush = max((self._copy(f) for f in self.flushes if f.position in pos), default=0)
        return self.resident + (hi - lo) * self.model_bytes + self._pending(pos.start) + flush

    def at_loss(self, accumulated: bool) -> int:
        return self.resident

    def at_block(self, i: int, written: int, accumulated: bool, current: int = 0) -> int:
        hi = self.arrival.start(i) + written // self.walk_bytes
        return self._moment(hi - current // self.walk_bytes, hi)

    def at_embedding(self, accumulated: bool) -> int:
        ends = self.arrival.ends
        return self._moment(ends[-1] - self.arrival.numels[-1], ends[-1]) if ends else 0

    def at_step(self) -> int:
        return self.resident + self.norms

    def between_steps(self) -> int:
        """The ipg bucket and the gradient partitions (``resident``)."""
        return self.resident

    def tail(self, accumulated: bool) -> tuple[Tail, ...]:
        """The epilogue's reduce-scatter of the last bucket."""
        last = [f for f in self.flushes if f.position == len(self.arrival.numels)]
        if not last:
            return ()
        f = last[0]
        grads = self.resident + self.norms + self._pending(f.position)
        return (Tail("backward epilogue: reduce-scatter the ipg bucket", grads, self._copy(f)),)

    def after_loss(self, accumulated: bool) -> tuple[Tail, ...]:
        """The LM head's and final norm's gradient hooks (a reduction may run)."""
        if not self.arrival.head:
            return ()
        ends = (0, *self.arrival.ends)
        where = "backward: LM head and final norm"
        gathered = self.head_gathered or (None,) * self.arrival.head
        return tuple(
            Tail(where, self._moment(ends[k], ends[k + 1]), 0, gathered[k])
            for k in range(self.arrival.head)
        )

    def extra_candidates(self) -> set[int]:
        return set(range(self.totals.layout.n))


@dataclass(frozen=True)
class Zero3Params:
    """Gathered 16-bit parameters (and all-gather buffers) beyond the partitions and the
    persistent parameters, from the coordinator's play (``fetch.py``)."""

    forward: tuple[int, ...]
    """The most during each layer's forward."""
    backward: tuple[int, ...]
    """The most during each layer's backward."""
    prologue_forward: int
    loss_forward: int
    loss_backward: int
    embedding: int

    def at_forward(self, i: int | None) -> int | None:
        return self.prologue_forward if i is None else self.forward[i]

    def at_loss_forward(self) -> int:
        return self.loss_forward

    def at_loss_backward(self) -> int:
        return self.loss_backward

    def at_block(self, i: int) -> int:
        return self.backward[i]

    def at_embedding(self) -> int:
        return self.embedding
