"""DeepSpeed ZeRO-1 and ZeRO-2 (``runtime/zero/stage_1_and_2.py`` ``DeepSpeedZeroOptimizer``):
what one rank's gradients take while the backward writes them.

* The ipg bucket: ``setup_buckets`` allocates ``torch.empty(reduce_bucket_size)`` in the
  reduction dtype at the first gradient hook of a backward (two with ``overlap_comm``) and
  ``_release_ipg_buffers`` frees it at the end of the backward's epilogue. Stage 1 has the
  hooks too (``create_gradient_handling_hooks`` runs because ``contiguous_gradients``).
* ZeRO-2 (and ZeRO-1 with ``overlap_comm``) reduce in the hooks: each gradient is copied into
  the bucket and autograd's freed (``reduce_independent_p_g_buckets_and_remove_grads``); ZeRO-1
  keeps autograd's full gradients to the end of the backward, where ``reduce_gradients`` copies
  them into the bucket in ``model.parameters()`` order.
* A reduction (``reduce_ipg_grads`` -> ``average_tensor`` -> ``allreduce_and_scatter`` ->
  ``allreduce_bucket``) all-reduces ``self.flatten(bucket slices)``: a copy of what the bucket
  holds when its slices are more than one (torch's flatten of a single tensor is a view), plus
  a ``.to(communication_data_type)`` copy when that differs. Then ``copy_grads_in_partition``
  allocates ``grads_in_partition`` (every tensor in the rank's partition, whole:
  ``flat.FlatGroup.grads_in_partition``) at the first reduction that holds one of them, kept to
  the step; with ``offload_optimizer`` each such tensor's slice is instead normed in fp64
  (``set_norm_for_param_grad_in_gpu``) and copied to the host's fp32 gradient partition.
* ``copy_grads_in_partition`` allocates ``grads_in_partition`` after the reduction that first
  holds one of the rank's tensors has returned (its flattened copy freed), while everything
  else of that moment is still alive: the bucket, the gradients waiting, an oversized one.
* ZeRO-1 (``partition_gradients`` false: ``reduce_ipg_grads``'s "zero stage 1" branch) clears
  no gradient outside the rank's partition. One copied into the bucket lost its own storage
  there (``grad_reduc.data = new_grad_tensor.data``, a view of the bucket); an oversized one
  (``extra_large_param_to_reduce``) never entered the bucket, so autograd's tensor stays whole
  until the epilogue's ``_clear_param_grad_only`` (``Reduction.kept``). ZeRO-2 frees it
  (``clear_grad_attribute``); under offload the partition's own are freed
  (``async_inplace_copy_grad_to_fp32_buffer_from_gpu``), the others' kept all the same.
* With ``offload_optimizer`` (``_offload_gradient_safety_enabled = cpu_offload and not
  zenflow``) an oversized gradient is cloned at its hook, before it waits for its reduction
  (``grad_reduc.data = grad_reduc.detach().clone()`` in
  ``reduce_independent_p_g_buckets_and_remove_grads``): for a moment it is there twice
  (``Reduction.clone``).
* The epilogue (``independent_gradient_partition_epilogue``) reduces the rest and lists the
  partition's gradients, a zero tensor filling the last partition (``get_flat_partition``).

The same on CUDA and on the CPU accelerator (gloo's all-reduce works in place): every rule
here is DeepSpeed's Python. Not modelled on either: a collective's backend may hold its input
after the call returns -- gloo's worker thread drops its reference to the work (and so to the
tensors) only after waking the waiter (torch ``ProcessGroupGloo::runLoop``), so on the CPU a
just-reduced tensor (a flattened copy, the LM head's gradient) is sometimes still alive a
moment later (a timing, not a DeepSpeed buffer; what NCCL's work objects hold on a GPU is not
measured here).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from memcalc.strategies.residency.deepspeed.buckets import Flush, Order, flushes
from memcalc.strategies.residency.deepspeed.flat import FlatGroup
from memcalc.strategies.residency.moments import GradientTotals, Tail


@dataclass(frozen=True)
class Reduction:
    """One rank's bucket reductions over tensors arriving in ``order``, in elements."""

    group: FlatGroup
    rank: int
    order: Order
    tensors: tuple[int, ...]
    """The group index of the tensor at each position of ``order``."""
    bucket: int
    offload: bool
    keeps_unowned: bool = False
    """ZeRO-1: reduced gradients outside the rank's partition are not cleared (``kept``)."""

    @cached_property
    def flushes(self) -> tuple[Flush, ...]:
        return tuple(flushes(self.order.numels, self.bucket, zero3=False))

    @cached_property
    def _mine(self) -> frozenset[int]:
        return frozenset(self.group.in_partition(self.rank))

    def copy(self, f: Flush) -> int:
        """Elements ``allreduce_bucket`` flattens for ``f``: its slices, run by destination
        rank (``average_tensor`` merges consecutive slices of one rank), chunked past the
        bucket's size (``allreduce_and_scatter``); a chunk of one slice is a view."""
        runs: list[list[int]] = []
        for pos in f.tensors:
            for rank, n in self._slices(self.tensors[pos]):
                if runs and runs[-1][0] == rank:
                    runs[-1][1] += n
                else:
                    runs.append([rank, n])
        best, chunk, count = 0, 0, 0
        for _, n in runs:
            chunk, count = chunk + n, count + 1
            if chunk > self.bucket:
                best, chunk, count = max(best, chunk if count > 1 else 0), 0, 0
        return max(best, chunk if count > 1 else 0)

    def _slices(self, j: int) -> list[tuple[int, int]]:
        """(rank, elements) of tensor ``j``'s pieces in each partition, by offset."""
        s, start = self.group.partition, sum(self.group.numels[:j])
        end, out = start + self.group.numels[j], []
        while start < end:
            stop = min(end, (start // s + 1) * s)
            out.append((start // s, stop - start))
            start = stop
        return out

    @cached_property
    def allocation(self) -> int | None:
        """Index of the reduction that allocates ``grads_in_partition`` (None: offload, or
        none of the rank's tensors)."""
        if self.offload:
            return None
        for k, f in enumerate(self.flushes):
            if any(self.tensors[p] in self._mine for p in f.tensors):
                return k
        return None

    def kept(self, start: int) -> int:
        """ZeRO-1: elements of the oversized tensors outside the rank's partition whose
        reduction ran before position ``start`` (autograd's whole gradient, kept to the end of
        the epilogue: ``reduce_ipg_grads`` clears none of them at stage 1)."""
        if not self.keeps_unowned:
            return 0
        order = self.order.numels
        return sum(
            order[p]
            for f in self.flushes
            if f.position < start
            for p in f.tensors
            if order[p] > self.bucket and self.tensors[p] not in self._mine
        )

    def clone(self, pos: int) -> int:
        """Offload: elements of the clone of the tensor at ``pos`` when it is oversized
        (``reduce_independent_p_g_buckets_and_remove_grads``); 0 otherwise."""
        n = self.order.numels[pos]
        return n if self.offload and n > self.bucket else 0

    def norm_slice(self, f: Flush) -> int:
        """Offload: elements of the largest slice of the rank's partition in ``f`` (normed in
        fp64 and cast to fp32 one at a time)."""
        lo, hi = self.rank * self.group.partition, (self.rank + 1) * self.group.partition
        best = 0
        for pos in f.tensors:
            j = self.tensors[pos]
            start = sum(self.group.numels[:j])
            best = max(best, min(hi, start + self.group.numels[j]) - max(lo, start))
        return best


@dataclass(frozen=True)
class Zero12Gradients:
    """The rank's gradient bytes at each moment (see the module docstring)."""

    totals: GradientTotals
    reduction: Reduction
    """Reductions in the hooks' order (ZeRO-2 / overlap) or the epilogue's (ZeRO-1)."""
    arrival: Order
    """Tensors in the backward's order (where the walk's moments fall)."""
    in_hooks: bool
    model_bytes: int
    bucket_bytes: int
    """The ipg buffers' bytes (reduce_bucket_size x dtype, twice with overlap_comm)."""
    comm_bytes: int
    """Bytes per element of the reduction's ``.to(communication_data_type)`` copy (0: none)."""
    partition_bytes: int
    """``grads_in_partition`` + the epilogue's zero padding (0 under offload)."""
    walk_bytes: int
    """Bytes per gradient element the step timeline counts ``written`` in."""
    resident: int = 0
    """Gradient buffers on the device for the whole run (offload's staging buffers; on the
    CPU accelerator its host fp32 gradient partition too)."""
    prunes = False
    accumulates_in_place = False

    @property
    def _full(self) -> int:
        """Every gradient in autograd's ``.grad``, whole."""
        return self.arrival.ends[-1] * self.model_bytes if self.arrival.ends else 0

    def _copy(self, f: Flush) -> int:
        """Bytes a reduction makes beside the bucket: the flattened copy (and its cast), or
        under offload the fp64 norm of the largest slice of the partition (the fp32 cast
        that follows is half of it)."""
        r = self.reduction
        copy = r.copy(f) * self.model_bytes + f.elements * self.comm_bytes
        return max(copy, 8 * r.norm_slice(f)) if r.offload else copy

    def _pending(self, start: int) -> int:
        """Bytes of oversized tensors' gradients (not copied into the bucket) that arrived
        before position ``start`` and wait for a reduction at or after it."""
        order, cap = self.reduction.order.numels, self.reduction.bucket
        return self.model_bytes * sum(
            order[p]
            for f in self.reduction.flushes
            if f.pending and f.position >= start
            for p in f.tensors
            if p < start and order[p] > cap
        )

    def _in_hooks(self, lo: int, hi: int, accumulated: bool) -> int:
        """ZeRO-2: while the gradients in (lo, hi] elements of the arrival order arrive: the
        bucket, those gradients, oversized ones waiting, ``grads_in_partition`` once
        allocated (the earlier micro-batches' too), and a reduction that runs now."""
        r = self.reduction
        held = self.resident + (self.partition_bytes if accumulated else 0)
        if hi <= 0:
            return held
        pos = self.arrival.during(lo, hi)
        out = self.bucket_bytes + (hi - lo) * self.model_bytes + held + self._pending(pos.start)
        out += self.reduction.kept(pos.start) * self.model_bytes
        alloc = r.flushes[r.allocation].position if r.allocation is not None else None
        flush = max((self._copy(f) for f in r.flushes if f.position in pos), default=0)
        # an oversized tensor's clone follows the reduction its hook runs (its copy freed)
        flush = max(flush, max((r.clone(p) for p in pos), default=0) * self.model_bytes)
        if alloc is not None and alloc in pos:
            return out + max(flush, self.partition_bytes)
        before = alloc is not None and alloc < pos.start
        return out + flush + (self.partition_bytes if before else 0)

    def _kept_whole(self, hi: int, current: int, accumulated: bool) -> int:
        """ZeRO-1: the bucket (from the first gradient) and autograd's full gradients written
        so far; a later micro-batch adds each new gradient into the kept ones."""
        if accumulated:
            return self.resident + self.bucket_bytes + self._full + current
        return self.resident + (self.bucket_bytes + hi * self.model_bytes if hi > 0 else 0)

    def at_loss(self, accumulated: bool) -> int:
        if not accumulated:
            return self.resident
        kept = self.partition_bytes if self.in_hooks else self.bucket_bytes + self._full
        return self.resident + kept

    def at_block(self, i: int, written: int, accumulated: bool, current: int = 0) -> int:
        hi = self.arrival.start(i) + written // self.walk_bytes
        now = current // self.walk_bytes
        if not self.in_hooks:
            return self._kept_whole(hi, now * self.model_bytes, accumulated)
        return self._in_hooks(hi - now, hi, accumulated)

    def at_embedding(self, accumulated: bool) -> int:
        ends = self.arrival.ends
        if not ends:
            return self.resident
        if not self.in_hooks:
            last = self.arrival.numels[-1] * self.model_bytes
            return self._kept_whole(ends[-1], last, accumulated)
        return self._in_hooks(ends[-1] - self.arrival.numels[-1], ends[-1], accumulated)

    def at_step(self) -> int:
        return self.resident + self.partition_bytes

    def between_steps(self) -> int:
        """The buffers held for the whole run (``resident``)."""
        return self.resident

    def tail(self, accumulated: bool) -> tuple[Tail, ...]:
        """The epilogue's reductions: the last one (ZeRO-2), or every one of ZeRO-1's
        ``reduce_gradients`` with the gradients not yet copied into the bucket; then the
        partition's gradients listed beside the bucket."""
        r = self.reduction
        held = self.resident + (self.partition_bytes if accumulated and self.in_hooks else 0)
        order = r.order.numels
        best = 0
        for k, f in enumerate(r.flushes):
            if self.in_hooks and f.position < len(order):
                continue
            waiting = 0 if self.in_hooks else sum(order[f.position :]) * self.model_bytes
            out = self.bucket_bytes + held + waiting + self._pending(f.position)
            out += r.kept(f.position) * self.model_bytes
            if k == r.allocation:  # the copy is freed before grads_in_partition is allocated
                best = max(best, out + max(self._copy(f), self.partition_bytes))
                continue
            before = self.partition_bytes if r.allocation is not None and r.allocation < k else 0
            best = max(best, out + self._copy(f) + before)
        if not r.flushes:
            return ()
        if not self.in_hooks:
            best = max(best, self._clones(held))
        kept = r.kept(len(order) + 1) * self.model_bytes  # until _clear_param_grad_only
        best = max(best, self.bucket_bytes + held + self.partition_bytes + kept)
        return (Tail("backward epilogue: reduce the ipg bucket", best, 0),)

    def _clones(self, held: int) -> int:
        """ZeRO-1's ``reduce_gradients`` under offload: the most bytes at an oversized
        tensor's clone, after the reduction its hook ran (``Reduction.clone``)."""
        r, order, b = self.reduction, self.reduction.order.numels, self.model_bytes
        best = 0
        for p in range(len(order)):
            if not r.clone(p):
                continue
            waiting = sum(order[p + 1 :]) * b + self._pending(p + 1) + r.kept(p + 1) * b
            alloc = r.allocation is not None and r.flushes[r.allocation].position <= p
            partition = self.partition_bytes if alloc else 0
            best = max(best, self.bucket_bytes + held + waiting + partition + r.clone(p) * b)
        return best

    def after_loss(self, accumulated: bool) -> tuple[Tail, ...]:
        """The LM head's and final norm's gradient hooks (ZeRO-2: a reduction may run)."""
        if not self.in_hooks or not self.arrival.head:
            return ()
        ends = (0, *self.arrival.ends)
        most = max(
            self._in_hooks(ends[k], ends[k + 1], accumulated) for k in range(self.arrival.head)
        )
        return (Tail("backward: LM head and final norm", most, 0),)

    def extra_candidates(self) -> set[int]:
        """Every layer: where a reduction falls is not affine in the layer."""
        return set(range(self.totals.layout.n))
