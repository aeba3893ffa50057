"""A pure-Python replay of torch's CUDA caching allocator policy, one device and one stream.

Every rule mirrors ``c10/cuda/CUDACachingAllocator.cpp`` (``docs/allocator.md`` names the
version read and how it matches torch 2.13.0); each function below names the C++ function it
follows. What is left out changes nothing on one stream without CUDA graphs: other streams
(``BlockComparatorSize`` orders by stream first, so a block freed on one stream is never reused
on another; a training step on the default stream uses one pool per size class), cross-stream
events (``record_stream``), private pools (CUDA graphs, ``MemPool``) and the free-memory
callbacks (none are registered by default).

Addresses are simulated: each cudaMalloc takes the next free range of a monotonic address
space, so ties in best fit (same size) go to the older segment, as they do on a device whose
driver hands out increasing addresses.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from memcalc.alloc_conf import DEFAULT, AllocConf
from memcalc.allocator.sizes import (
    K_MIN_BLOCK_SIZE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    allocation_size,
    round_size,
)

_ALIGN = 2 << 20
_NO_LIMIT = 1 << 62
_KEY = 1 << 52
"""Addresses stay below 2^52, so size x 2^52 + address orders blocks by size, then address."""


class OutOfMemory(Exception):
    """The replay's ``OutOfMemoryError``: no cached block fits, and cudaMalloc (or mapping
    pages) failed even after the cache was released."""

    def __init__(self, size: int, reserved: int, allocated: int) -> None:
        super().__init__(f"out of memory allocating {size} bytes")
        self.size = size
        self.reserved = reserved
        self.allocated = allocated


class Segment:
    """``ExpandableSegment``: a virtual range of ``pages`` pages of ``page`` bytes (1 1/8 of the
    device's memory), of which the mapped pages hold physical memory."""

    __slots__ = ("base", "page", "pages", "mapped")

    def __init__(self, base: int, page: int, device_memory: int) -> None:
        self.base = base
        self.page = page
        # max_handles_ = numSegments(totalGlobalMem + totalGlobalMem / 8)
        self.pages = -(-(device_memory + device_memory // 8) // page)
        self.mapped: set[int] = set()

    @property
    def size(self) -> int:
        return self.pages * self.page


class Block:
    """``Block``: a range of a segment, allocated or free (``prev``/``next``: its neighbours in
    the segment; both None: an unsplit segment)."""

    __slots__ = (
        "ptr",
        "size",
        "requested",
        "allocated",
        "prev",
        "next",
        "small",
        "segment",
        "mapped",
        "gc_base",
    )

    def __init__(
        self, ptr: int, size: int, small: bool, segment: Segment | None = None, mapped: bool = True
    ) -> None:
        self.ptr = ptr
        self.size = size
        self.requested = 0
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.small = small
        self.segment = segment
        self.mapped = mapped
        self.gc_base = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class Pool:
    """``BlockPool``: the free blocks of one size class, ordered by (size, address) as
    ``BlockComparatorSize`` orders them (one int per block: size x 2^52 + address); the
    unmapped ranges of its expandable segments ordered by address
    (``BlockComparatorAddress``)."""

    __slots__ = ("small", "keys", "blocks", "unmapped_keys", "unmapped", "calls")

    def __init__(self, small: bool) -> None:
        self.small = small
        self.keys: list[int] = []
        self.blocks: dict[int, Block] = {}
        self.unmapped_keys: list[int] = []
        self.unmapped: dict[int, Block] = {}
        self.calls = 0
        """``get_free_blocks_call_count`` (counted only while garbage collection is on)."""

    def insert(self, b: Block) -> None:
        """``insert_into_blocks``: also stamps the block's garbage-collection age."""
        b.gc_base = self.calls
        key = b.size * _KEY + b.ptr
        bisect.insort(self.keys, key)
        self.blocks[key] = b

    def remove(self, b: Block) -> None:
        key = b.size * _KEY + b.ptr
        keys = self.keys
        del keys[bisect.bisect_left(keys, key)]
        del self.blocks[key]

    def insert_unmapped(self, b: Block) -> None:
        bisect.insort(self.unmapped_keys, b.ptr)
        self.unmapped[b.ptr] = b

    def remove_unmapped(self, b: Block) -> None:
        keys = self.unmapped_keys
        del keys[bisect.bisect_left(keys, b.ptr)]
        del self.unmapped[b.ptr]


@dataclass
class Stats:
    """The ``memory_stats`` a replay reports (bytes; peaks since the last ``reset_peak``)."""

    allocated: int = 0
    """``allocated_bytes.all.current``: sizes of the allocated blocks (rounded requests, or the
    whole block when it was not split)."""
    requested: int = 0
    """``requested_bytes.all.current``: the sizes asked for."""
    reserved: int = 0
    """``reserved_bytes.all.current``: cudaMalloc'ed segments plus mapped expandable pages."""
    allocated_peak: int = 0
    requested_peak: int = 0
    reserved_peak: int = 0
    reserved_at_allocated_peak: int = 0
    """Reserved bytes when allocated memory reached its peak."""
    segments: int = 0
    num_alloc_retries: int = 0
    num_ooms: int = 0
    num_device_alloc: int = 0
    num_device_free: int = 0


class CachingAllocator:
    """``DeviceCachingAllocator`` for one device and one stream.

    ``device_memory``: ``totalGlobalMem`` (sizes an expandable segment's address range and the
    memory fraction). ``capacity``: bytes the driver can still give this process (the device's
    memory less the CUDA context and other processes); None: unlimited, so nothing fails.
    """

    def __init__(
        self,
        conf: AllocConf = DEFAULT,
        *,
        device_memory: int = 80 << 30,
        capacity: int | None = None,
    ) -> None:
        self.conf = conf
        self.device_memory = device_memory
        self.capacity = _NO_LIMIT if capacity is None else capacity
        self.small = Pool(True)
        self.large = Pool(False)
        self.stats = Stats()
        self._next_address = 1 << 40
        self.max_split = _NO_LIMIT if conf.max_split_size is None else conf.max_split_size
        self.non_split_rounding = conf.non_split_rounding
        # setMemoryFraction: allowed_memory_maximum only below a fraction of 1
        fraction = conf.per_process_memory_fraction
        self.allowed: int | None = int(fraction * device_memory) if fraction < 1.0 else None
        self.gc_on = self.allowed is not None and conf.garbage_collection_threshold > 0
        self._plain_rounding = all(d <= 1 for d in conf.roundup_power2_divisions)

    # --- public API ------------------------------------------------------------------------

    def malloc(self, orig_size: int) -> Block:
        """``DeviceCachingAllocator::malloc``: best fit from the cache, else a new segment;
        on failure free oversize cached blocks, then every unsplit cached block (one
        ``num_alloc_retries``), then give up (``OutOfMemory``)."""
        if self._plain_rounding:
            size = ((orig_size + 511) >> 9) << 9 if orig_size > K_MIN_BLOCK_SIZE else 512
        else:
            size = round_size(orig_size, self.conf)
        pool = self.small if size <= K_SMALL_SIZE else self.large
        expandable = self.conf.expandable_segments
        block = self._get_free_block(pool, size, expandable)
        if block is None:
            alloc_size = allocation_size(size, self.conf)
            if self.gc_on:
                self._garbage_collect()
            block = self._alloc_block(pool, size, alloc_size, expandable, False)
            if block is None and self._release_available_cached_blocks(pool, size):
                block = self._alloc_block(pool, size, alloc_size, expandable, False)
            if block is None:
                self.release_cached_blocks()
                block = self._alloc_block(pool, size, alloc_size, expandable, True)
            if block is None:
                self.stats.num_ooms += 1
                raise OutOfMemory(orig_size, self.stats.reserved, self.stats.allocated)
        block = self._alloc_found_block(
            pool, block, size, orig_size, self._should_split(block, size, expandable)
        )
        st = self.stats
        if st.reserved > st.reserved_peak:
            st.reserved_peak = st.reserved
        return block

    def free(self, block: Block) -> None:
        """``DeviceCachingAllocator::free`` then ``free_block`` (one stream: no events)."""
        block.allocated = False
        st = self.stats
        st.allocated -= block.size
        st.requested -= block.requested
        pool = self.small if block.small else self.large
        self._merge(block, block.prev, pool)
        self._merge(block, block.next, pool)
        pool.insert(block)

    def release_cached_blocks(self) -> None:
        """``release_cached_blocks`` (what ``torch.cuda.empty_cache()`` does): cudaFree every
        unsplit free segment; unmap every whole free page of an expandable segment, and release
        the segment once nothing of it is mapped. A segment with one allocated block keeps its
        whole size reserved."""
        for pool in (self.large, self.small):
            to_unmap = []
            for key in list(pool.keys):
                b = pool.blocks[key]
                if b.segment is not None:
                    to_unmap.append(b)
                elif b.prev is None and b.next is None:
                    self._release_block(pool, b)
            for b in to_unmap:
                self._unmap_block(pool, b)
                if not b.mapped and b.prev is None and b.next is None:
                    pool.remove_unmapped(b)  # release_expandable_segment

    def reset_peak(self) -> None:
        """``resetPeakStats``: peaks restart from the current values."""
        st = self.stats
        st.allocated_peak = st.allocated
        st.requested_peak = st.requested
        st.reserved_peak = st.reserved
        st.reserved_at_allocated_peak = st.reserved

    # --- search and split ------------------------------------------------------------------

    def _get_free_block(self, pool: Pool, size: int, expandable: bool) -> Block | None:
        """``get_free_block``: the smallest cached block of at least ``size`` bytes (lowest
        address on ties), except that an oversize block (>= max_split_size) serves only a
        request of at least max_split_size, and that one no more than
        ``max_non_split_rounding`` larger than it. Expandable blocks count with the unmapped
        space after them."""
        if self.gc_on:
            pool.calls += 1
        keys = pool.keys
        i = bisect.bisect_left(keys, size * _KEY)
        n = len(keys)
        if i == n:
            return None
        blocks = pool.blocks
        b = blocks[keys[i]]
        if b.segment is not None:
            if expandable:

                def grown(x: Block) -> int:
                    nxt = x.next
                    return x.size + (nxt.size if nxt is not None and not nxt.mapped else 0)

                while b.segment is not None and i + 1 < n:
                    nb = blocks[keys[i + 1]]
                    if grown(nb) >= grown(b):
                        break
                    i += 1
                    b = nb
            else:
                i += 1
                while i < n and blocks[keys[i]].segment is not None:
                    i += 1
                if i == n:
                    return None
                b = blocks[keys[i]]
        max_split = self.max_split
        if size < max_split and b.size >= max_split:
            return None
        if size >= max_split and b.size >= size + self.non_split_rounding:
            return None
        pool.remove(b)
        return b

    def _should_split(self, block: Block, size: int, expandable: bool) -> bool:
        """``should_split``: split off the rest when it is at least 512 bytes (small pool, or
        expandable segments), or, in the large pool, when the request is below max_split_size
        and the rest is more than 1 MiB."""
        remaining = block.size - size
        if block.small or expandable:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.max_split and remaining > K_SMALL_SIZE

    def _alloc_found_block(
        self, pool: Pool, block: Block, size: int, orig_size: int, split: bool
    ) -> Block:
        """``alloc_found_block``: the request takes the front of the block; the rest goes back
        to the pool."""
        if split:
            rest = block
            block = Block(rest.ptr, size, rest.small, rest.segment)
            block.prev = rest.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = rest
            rest.prev = block
            rest.ptr += size
            rest.size -= size
            pool.insert(rest)
        block.allocated = True
        block.requested = orig_size
        st = self.stats
        st.allocated += block.size
        st.requested += orig_size
        if st.allocated > st.allocated_peak:
            st.allocated_peak = st.allocated
            st.reserved_at_allocated_peak = st.reserved
        if st.requested > st.requested_peak:
            st.requested_peak = st.requested
        return block

    def _merge(self, dst: Block, src: Block | None, pool: Pool) -> int:
        """``try_merge_blocks``: absorb a free neighbour in the same mapped state."""
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        if dst.prev is src:
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        dst.size += src.size
        return src.size

    # --- new memory --------------------------------------------------------------------------

    def _address(self, size: int) -> int:
        ptr = self._next_address
        self._next_address += -(-size // _ALIGN) * _ALIGN + _ALIGN
        if self._next_address >= _KEY:
            raise OverflowError("simulated address space exhausted")
        return ptr

    def _grow_reserved(self, amount: int) -> None:
        st = self.stats
        st.reserved += amount
        st.num_device_alloc += 1

    def _alloc_block(
        self, pool: Pool, size: int, alloc_size: int, expandable: bool, retry: bool
    ) -> Block | None:
        """``alloc_block``: a new segment of ``alloc_size`` bytes (cudaMalloc), or, with
        expandable segments, ``size`` bytes mapped into the pool's growing segment."""
        st = self.stats
        if retry:
            st.num_alloc_retries += 1
        if self.allowed is not None and st.reserved + alloc_size > self.allowed:
            return None
        if expandable:
            return self._try_allocate_expandable_block(pool, size)
        if st.reserved + alloc_size > self.capacity:
            return None  # cudaMalloc: cudaErrorMemoryAllocation
        self._grow_reserved(alloc_size)
        st.segments += 1
        return Block(self._address(alloc_size), alloc_size, pool.small)

    def _release_block(self, pool: Pool, b: Block) -> None:
        """``release_block``: cudaFree an unsplit cached segment."""
        pool.remove(b)
        st = self.stats
        st.reserved -= b.size
        st.segments -= 1
        st.num_device_free += 1

    def _release_available_cached_blocks(self, pool: Pool, size: int) -> bool:
        """``release_available_cached_blocks``: with max_split_size set, cudaFree the smallest
        oversize cached block of at least max(size, max_split_size), or else oversize blocks
        from the largest down until that many bytes are freed."""
        max_split = self.max_split
        if max_split == _NO_LIMIT:
            return False
        key = max(size, max_split)
        keys, blocks = pool.keys, pool.blocks
        i = bisect.bisect_left(keys, key * _KEY)
        if i < len(keys) and blocks[keys[i]].segment is None:
            self._release_block(pool, blocks[keys[i]])
            return True
        if i == 0:
            return False
        released = 0
        i -= 1
        while released < key and blocks[keys[i]].size >= max_split:
            cur = i
            first = cur == 0
            if not first:
                i -= 1
            b = blocks[keys[cur]]
            if b.segment is None:
                released += b.size
                self._release_block(pool, b)
            if first:
                break
        return released >= key

    def _garbage_collect(self) -> None:
        """``garbage_collect_cached_blocks``: above ``garbage_collection_threshold`` of the
        allowed memory, cudaFree unsplit large cached blocks at least as old (in searches of
        the pool since they were cached) as the average, until the excess is reclaimed."""
        assert self.allowed is not None
        threshold = int(self.conf.garbage_collection_threshold * self.allowed)
        st = self.stats
        if st.reserved <= threshold:
            return
        target = st.reserved - threshold
        pool = self.large
        ages = [pool.calls - b.gc_base for b in pool.blocks.values() if not b.is_split()]
        count, total_age = len(ages), sum(ages)
        reclaimed = 0
        freed = True
        while reclaimed < target and freed and count > 0:
            limit = total_age / count
            freed = False
            for k in list(pool.keys):
                b = pool.blocks.get(k)
                if b is None or b.is_split() or b.segment is not None:
                    continue
                age = pool.calls - b.gc_base
                if age >= limit:
                    freed = True
                    reclaimed += b.size
                    total_age -= age
                    count -= 1
                    self._release_block(pool, b)

    # --- expandable segments -----------------------------------------------------------------

    def _find_expandable_block(self, pool: Pool, size: int) -> Block:
        """``find_expandable_block``: the lowest unmapped range (joined with the free block
        before it) with room for ``size``; else a new segment, whose page is 2 MiB for the
        small pool and ``large_segment_size`` for the large one."""
        for ptr in pool.unmapped_keys:
            c = pool.unmapped[ptr]
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            room = 0
            x: Block | None = c
            while room < size and x is not None and not x.allocated:
                room += x.size
                x = x.next
            if room >= size:
                return c
        page = K_SMALL_BUFFER if pool.small else self.conf.large_segment_size
        seg = Segment(0, page, self.device_memory)
        seg.base = self._address(seg.size)
        candidate = Block(seg.base, seg.size, pool.small, seg, mapped=False)
        pool.insert_unmapped(candidate)
        return candidate

    def _map(self, seg: Segment, ptr: int, size: int) -> int:
        """``ExpandableSegment::map``: map the pages covering [ptr, ptr + size); the bytes
        mapped, 0 when the device is out of memory."""
        first = (ptr - seg.base) // seg.page
        last = -(-(ptr + size - seg.base) // seg.page)
        mapped = (last - first) * seg.page
        if self.stats.reserved + mapped > self.capacity:
            return 0  # cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY
        seg.mapped.update(range(first, last))
        return mapped

    def _map_block(self, pool: Pool, to_map: Block, size: int) -> bool:
        """``map_block``: map the front of an unmapped range and merge it with free mapped
        neighbours."""
        seg = to_map.segment
        assert seg is not None and not to_map.mapped
        mapped = self._map(seg, to_map.ptr, size)
        if mapped == 0:
            return False
        pool.remove_unmapped(to_map)
        to_map.mapped = True
        if mapped < to_map.size:
            rest = Block(to_map.ptr + mapped, to_map.size - mapped, pool.small, seg, False)
            rest.prev = to_map
            rest.next = to_map.next
            if rest.next is not None:
                rest.next.prev = rest
            to_map.next = rest
            pool.insert_unmapped(rest)
            to_map.size = mapped
        self._merge(to_map, to_map.prev, pool)
        self._merge(to_map, to_map.next, pool)
        pool.insert(to_map)
        self._grow_reserved(mapped)
        return True

    def _try_allocate_expandable_block(self, pool: Pool, size: int) -> Block | None:
        """``try_allocate_expandable_block``: map pages until a free range of ``size`` bytes
        exists, then take it out of the pool."""
        c = self._find_expandable_block(pool, size)
        if not c.mapped and not self._map_block(pool, c, min(c.size, size)):
            return None
        while c.size < size:
            nxt = c.next
            assert nxt is not None and not nxt.mapped
            if not self._map_block(pool, nxt, min(size - c.size, nxt.size)):
                return None
            c = nxt
        pool.remove(c)
        return c

    def _unmap_block(self, pool: Pool, b: Block) -> None:
        """``unmap_block``: unmap the whole pages inside a free block; what is left on either
        side stays a free mapped block."""
        seg = b.segment
        assert seg is not None
        first = -(-(b.ptr - seg.base) // seg.page)
        last = (b.ptr + b.size - seg.base) // seg.page
        if first >= last:
            return
        start = seg.base + first * seg.page
        length = (last - first) * seg.page
        pool.remove(b)
        before = start - b.ptr
        if before > 0:
            bf = Block(b.ptr, before, b.small, seg)
            bf.prev, bf.next = b.prev, b
            if b.prev is not None:
                b.prev.next = bf
            b.prev = bf
            pool.insert(bf)
        after = b.size - before - length
        if after > 0:
            af = Block(start + length, after, b.small, seg)
            af.prev, af.next = b, b.next
            if b.next is not None:
                b.next.prev = af
            b.next = af
            pool.insert(af)
        b.ptr, b.size, b.mapped = start, length, False
        self._merge(b, b.prev, pool)
        self._merge(b, b.next, pool)
        pool.insert_unmapped(b)
        seg.mapped.difference_update(range(first, last))
        st = self.stats
        st.reserved -= length
        st.num_device_free += 1
