"""How the caching allocator sizes a request and the segment it takes it from.

Source: ``c10/cuda/CUDACachingAllocator.cpp`` (the version ``docs/allocator.md`` names),
``DeviceCachingAllocator::round_size``, ``roundup_power2_next_division``,
``get_allocation_size``; the constants are those of the torch 2.13.0 wheel's
``c10/core/AllocatorConfig.h`` lines 16-25.
"""

from __future__ import annotations

from memcalc.alloc_conf import AllocConf

K_MIN_BLOCK_SIZE = 512
"""``kMinBlockSize``: every size is rounded to a multiple of 512 bytes."""
K_SMALL_SIZE = 1 << 20
"""``kSmallSize``: requests up to 1 MiB go to the small pool."""
K_SMALL_BUFFER = 2 << 20
"""``kSmallBuffer``: the small pool's segments (and expandable pages) are 2 MiB."""
K_MIN_LARGE_ALLOC = 10 << 20
"""``kMinLargeAlloc``: large requests below 10 MiB take a ``large_segment_size`` segment."""
K_ROUND_LARGE = 2 << 20
"""``kRoundLarge``: larger requests take a segment of their size rounded up to 2 MiB."""


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """``roundup_power2_next_division``: the next of ``divisions`` equal steps between the
    powers of two around ``size`` (the source's example: 1200 with 4 divisions is 1280).

    >>> roundup_power2_next_division(1200, 4)
    1280
    >>> roundup_power2_next_division(84 << 20, 8) >> 20  # test_allocator_settings: 88 MiB
    88
    """
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)  # power2_floor >> log2(divisions)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def round_size(size: int, conf: AllocConf) -> int:
    """``round_size``: below 512 bytes, 512; with ``roundup_power2_divisions`` > 1 for the
    size's interval and a size above 512 x divisions, the next division; else the next
    multiple of 512.

    >>> from memcalc.alloc_conf import DEFAULT, parse_alloc_conf
    >>> round_size(1, DEFAULT), round_size(513, DEFAULT), round_size(84 << 20, DEFAULT) >> 20
    (512, 1024, 84)
    >>> round_size(84 << 20, parse_alloc_conf("roundup_power2_divisions:4")) >> 20
    96
    """
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = conf.divisions(size)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK_SIZE * -(-size // K_MIN_BLOCK_SIZE)


def allocation_size(size: int, conf: AllocConf) -> int:
    """``get_allocation_size``: the segment cudaMalloc'ed for a rounded ``size`` that no cached
    block serves: 2 MiB for the small pool, ``large_segment_size`` (20 MiB) below 10 MiB,
    else the size rounded up to 2 MiB.

    >>> from memcalc.alloc_conf import DEFAULT
    >>> [allocation_size(s, DEFAULT) >> 20 for s in (512, 1 << 20, (1 << 20) + 512, 30 << 20)]
    [2, 2, 20, 30]
    """
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return conf.large_segment_size
    return K_ROUND_LARGE * -(-size // K_ROUND_LARGE)


def is_small(size: int) -> bool:
    """``get_pool``: the small pool takes rounded sizes up to 1 MiB."""
    return size <= K_SMALL_SIZE
