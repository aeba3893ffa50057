"""Replay a step's events through the caching allocator: what ``torch.cuda.max_memory_reserved``
would report for the measured step, and whether the device holds it."""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.alloc_conf import AllocConf
from memcalc.allocator.caching import Block, CachingAllocator, OutOfMemory
from memcalc.allocator.events import ALLOC, StepTrace


@dataclass(frozen=True)
class Replay:
    """The caching allocator over one replay, the measured step's figures (bytes)."""

    conf: AllocConf
    reserved_peak_bytes: int
    """``max_memory_reserved()`` of the measured step (segments and mapped pages; no CUDA
    context)."""
    allocated_peak_bytes: int
    """``max_memory_allocated()``: allocated block sizes (requests rounded to 512 bytes, or
    the whole block when the rest was too small to split)."""
    requested_peak_bytes: int
    """The most bytes asked for at once (the event list's own peak)."""
    reserved_at_allocated_peak_bytes: int
    alloc_retries: int
    """``num_alloc_retries`` in the measured step: cudaMalloc failed, the cache was released
    and the allocation retried."""
    out_of_memory: bool
    """An allocation failed even after the cache was released."""
    oom_where: str
    capacity_bytes: int | None
    """What the driver could give (None: unlimited)."""
    events: int

    @property
    def fragmentation_bytes(self) -> int:
        """Reserved minus allocated at the measured step's allocated peak (the tightest
        moment): the cache and the unusable ends of segments."""
        return self.reserved_at_allocated_peak_bytes - self.allocated_peak_bytes


def replay(
    st: StepTrace, conf: AllocConf, *, device_memory: int, capacity: int | None = None
) -> Replay:
    """Run every event; peaks are those of the measured step (``reset_peak_memory_stats``
    before it), as ``memcalc measure`` reads them."""
    alloc = CachingAllocator(conf, device_memory=device_memory, capacity=capacity)
    tr = st.trace
    kinds, ids, sizes = tr.kinds, tr.ids, tr.sizes
    live: dict[int, Block] = {}
    malloc, free = alloc.malloc, alloc.free
    start = st.measured_from
    retries = 0
    oom_where = ""
    i = 0
    try:
        for i in range(len(kinds)):
            if i == start:
                alloc.reset_peak()
                retries = alloc.stats.num_alloc_retries
            if kinds[i] == ALLOC:
                live[ids[i]] = malloc(sizes[i])
            else:
                free(live.pop(ids[i]))
    except OutOfMemory:
        oom_where = tr.label_at(i)
    s = alloc.stats
    return Replay(
        conf,
        s.reserved_peak,
        s.allocated_peak,
        s.requested_peak,
        s.reserved_at_allocated_peak,
        s.num_alloc_retries - retries,
        bool(oom_where),
        oom_where,
        capacity,
        len(kinds),
    )
