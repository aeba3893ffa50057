"""The caching allocator replay on small event sequences: each test states the rule of
``c10/cuda/CUDACachingAllocator.cpp`` (or the torch test) its numbers come from."""

from __future__ import annotations

import pytest

from memcalc.alloc_conf import DEFAULT, MIB, AllocConf, alloc_conf_from_env
from memcalc.allocator import CachingAllocator, OutOfMemory, parse_alloc_conf
from memcalc.allocator.sizes import allocation_size, round_size
from memcalc.errors import MemcalcError

GIB = 1 << 30


def allocator(conf: str = "", **kw: int) -> CachingAllocator:
    return CachingAllocator(parse_alloc_conf(conf), device_memory=kw.pop("device", 80 * GIB), **kw)


# --- rounding: round_size / get_allocation_size -------------------------------------------


def test_round_size_512_bytes() -> None:
    """round_size: at least 512 bytes, then multiples of 512."""
    assert [round_size(n, DEFAULT) for n in (0, 1, 512, 513, 1000, 4096)] == [
        512,
        512,
        512,
        1024,
        1024,
        4096,
    ]


@pytest.mark.parametrize(
    ("conf", "nbytes", "allocated"),
    [
        # test/test_cuda.py TestCudaMallocAsync.test_allocator_settings: 21 Mi floats
        ("", 84 * MIB, 84 * MIB),
        ("roundup_power2_divisions:4", 84 * MIB, 96 * MIB),  # power2_div(nbytes, 4)
        ("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]", 84 * MIB, 88 * MIB),
        ("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]", 400 * MIB, 512 * MIB),
    ],
)
def test_allocator_settings_rounding(conf: str, nbytes: int, allocated: int) -> None:
    """The active bytes one torch.rand allocates under each setting, as torch's test asserts."""
    a = allocator(conf)
    a.malloc(nbytes)
    assert a.stats.allocated == allocated
    assert a.stats.requested == nbytes


def test_segment_sizes() -> None:
    """get_allocation_size: 2 MiB small segments, 20 MiB below 10 MiB, else rounded to 2 MiB."""
    assert allocation_size(512, DEFAULT) == 2 * MIB
    assert allocation_size(MIB, DEFAULT) == 2 * MIB
    assert allocation_size(MIB + 512, DEFAULT) == 20 * MIB
    assert allocation_size(10 * MIB - 512, DEFAULT) == 20 * MIB
    assert allocation_size(10 * MIB, DEFAULT) == 10 * MIB
    assert allocation_size(11 * MIB, DEFAULT) == 12 * MIB
    large = parse_alloc_conf("large_segment_size_mb:15")
    assert allocation_size(2 * MIB, large) == 15 * MIB


# --- the two pools ---------------------------------------------------------------------------


def test_small_pool_packs_2mib_segments() -> None:
    """Requests up to 1 MiB share 2 MiB segments (test_memory_snapshot's 512-byte tensors tile
    one segment evenly): 4096 of them fill exactly one, the 4097th opens a second."""
    a = allocator()
    for _ in range(4096):
        a.malloc(100)
    assert (a.stats.reserved, a.stats.segments, a.stats.allocated) == (2 * MIB, 1, 2 * MIB)
    a.malloc(100)
    assert (a.stats.reserved, a.stats.segments) == (4 * MIB, 2)


def test_pools_do_not_mix() -> None:
    """A 1 MiB request is small (a 2 MiB segment); one 512 bytes larger is large (20 MiB), and
    a free small block never serves it."""
    a = allocator()
    a.free(a.malloc(MIB))
    assert a.stats.reserved == 2 * MIB
    a.malloc(MIB + 1)
    assert a.stats.reserved == 22 * MIB
    assert a.stats.allocated == MIB + 512


# --- reuse, splitting, merging -----------------------------------------------------------------


def test_large_pool_splits_20mib_segment() -> None:
    """Requests between 1 and 10 MiB split one 20 MiB segment (should_split: the rest is more
    than 1 MiB)."""
    a = allocator()
    for _ in range(6):
        a.malloc(3 * MIB)
    assert (a.stats.reserved, a.stats.segments) == (20 * MIB, 1)
    a.malloc(3 * MIB)  # 2 MiB left: too small, a second segment
    assert (a.stats.reserved, a.stats.segments) == (40 * MIB, 2)


def test_best_fit_reuse_and_split() -> None:
    """get_free_block takes the smallest cached block that fits; the rest (2 MiB > 1 MiB) is
    split off and stays cached."""
    a = allocator()
    b12 = a.malloc(12 * MIB)
    b16 = a.malloc(16 * MIB)
    a.free(b12)
    a.free(b16)
    x = a.malloc(10 * MIB)
    assert x.size == 10 * MIB and a.stats.reserved == 28 * MIB
    assert sorted(k // (1 << 52) for k in a.large.keys) == [2 * MIB, 16 * MIB]


def test_rest_of_1mib_is_not_split() -> None:
    """should_split (large pool): a rest of at most 1 MiB stays with the block, and
    memory_allocated counts the whole block."""
    a = allocator()
    a.free(a.malloc(12 * MIB))
    x = a.malloc(11 * MIB + 512 * 1024)
    assert x.size == 12 * MIB
    assert a.stats.allocated == 12 * MIB and a.stats.requested == 11 * MIB + 512 * 1024


def test_free_merges_neighbours() -> None:
    """free_block / try_merge_blocks: freed neighbours of a segment join again, so a request
    the pieces could not serve alone fits the joined block."""
    a = allocator()
    x, y, z = a.malloc(5 * MIB), a.malloc(5 * MIB), a.malloc(5 * MIB)
    a.free(x)
    a.free(z)
    a.free(y)
    assert a.large.keys == [20 * MIB * (1 << 52) + x.ptr]
    a.malloc(18 * MIB)
    assert a.stats.reserved == 20 * MIB


def test_empty_cache_keeps_segments_in_use() -> None:
    """release_cached_blocks (empty_cache) frees only unsplit cached segments: a segment with
    one live block stays whole."""
    a = allocator()
    keep = a.malloc(2 * MIB)
    a.free(a.malloc(2 * MIB))  # same 20 MiB segment
    a.free(a.malloc(30 * MIB))  # its own segment
    a.malloc(256)  # small pool
    assert a.stats.reserved == 52 * MIB
    a.release_cached_blocks()
    assert a.stats.reserved == 22 * MIB
    a.free(keep)
    a.release_cached_blocks()
    assert a.stats.reserved == 2 * MIB


# --- max_split_size_mb -------------------------------------------------------------------------


def test_oversize_blocks_serve_only_large_requests() -> None:
    """get_free_block with max_split_size_mb:40: a cached 64 MiB block is not split for a
    smaller request, and serves a request at least max_split_size only within
    max_non_split_rounding (20 MiB) of its size, whole."""
    a = allocator("max_split_size_mb:40")
    a.free(a.malloc(64 * MIB))
    a.malloc(30 * MIB)
    assert a.stats.reserved == 94 * MIB
    big = a.malloc(50 * MIB)
    assert big.size == 64 * MIB and a.stats.reserved == 94 * MIB
    a.free(big)
    a.malloc(44 * MIB)  # 64 >= 44 + 20: not served from the cached block
    assert a.stats.reserved == 138 * MIB


def test_max_split_expandable_oom_then_retry() -> None:
    """test/test_cuda.py TestCudaMallocAsync.test_max_split_expandable: 120 MiB allowed
    (per_process_memory_fraction), three 40 MiB blocks (the middle one expandable), a fourth is
    out of memory; after freeing them a 120 MiB block fits once the cache is released (one
    num_alloc_retries)."""
    device = 80 * GIB
    conf = parse_alloc_conf(
        f"max_split_size_mb:40,per_process_memory_fraction:{120 * MIB / device!r}"
    )
    a = CachingAllocator(conf, device_memory=device)
    x = a.malloc(40 * MIB)
    a.conf = AllocConf(**{**conf.__dict__, "expandable_segments": True})
    y = a.malloc(40 * MIB)
    a.conf = conf
    z = a.malloc(40 * MIB)
    with pytest.raises(OutOfMemory):
        a.malloc(40 * MIB)
    assert (a.stats.num_ooms, a.stats.num_alloc_retries) == (1, 1)
    for b in (x, y, z):
        a.free(b)
    a.malloc(120 * MIB)
    assert a.stats.num_alloc_retries == 2 and a.stats.reserved == 120 * MIB


# --- expandable segments -----------------------------------------------------------------------


def test_expandable_maps_pages() -> None:
    """Expandable segments map 2 MiB pages (small pool) and 20 MiB pages (large pool) as
    needed, the rounded size only (no 20 MiB segment for a 3 MiB request)."""
    a = allocator("expandable_segments:True")
    a.malloc(100)
    assert a.stats.reserved == 2 * MIB
    a.malloc(3 * MIB)
    assert a.stats.reserved == 22 * MIB
    a.malloc(30 * MIB)  # 17 MiB left of the first page run: one more page
    assert a.stats.reserved == 42 * MIB


def test_expandable_absorbs_growing_requests() -> None:
    """Note [Expandable Segments]: a slightly larger request after a free reuses the freed
    range and its mapped tail; without expandable segments it needs a new segment."""
    plain, grown = allocator(), allocator("expandable_segments:True")
    for a in (plain, grown):
        a.free(a.malloc(30 * MIB))
        a.malloc(32 * MIB)
    assert plain.stats.reserved == 62 * MIB
    assert grown.stats.reserved == 40 * MIB


def test_expandable_empty_cache_unmaps_free_pages() -> None:
    """release_cached_blocks on an expandable segment unmaps the whole free pages: what a live
    block touches stays mapped."""
    a = allocator("expandable_segments:True")
    live = a.malloc(30 * MIB)
    a.free(a.malloc(50 * MIB))
    assert a.stats.reserved == 80 * MIB
    a.release_cached_blocks()
    assert a.stats.reserved == 40 * MIB  # pages 0-1 hold the live 30 MiB
    a.free(live)
    a.release_cached_blocks()
    assert a.stats.reserved == 0


# --- garbage collection, the retry path ----------------------------------------------------------


def test_garbage_collection_frees_before_cudamalloc() -> None:
    """garbage_collect_cached_blocks (only with a memory fraction below 1): above half of the
    allowed 100 MiB, old unsplit cached blocks are cudaFree'd before the cudaMalloc, so no
    release-all retry is needed; without it the same request takes one retry."""
    device = 100 * MIB * 1000
    frac = f"per_process_memory_fraction:{(100 * MIB) / device!r}"
    for conf, retries in ((frac, 1), (frac + ",garbage_collection_threshold:0.5", 0)):
        a = CachingAllocator(parse_alloc_conf(conf), device_memory=device)
        x, y = a.malloc(40 * MIB), a.malloc(20 * MIB)
        a.free(x)
        a.free(y)
        a.malloc(60 * MIB)
        assert (a.stats.num_alloc_retries, a.stats.reserved) == (retries, 60 * MIB)


def test_capacity_retry_then_oom() -> None:
    """malloc: when cudaMalloc fails, every unsplit cached block is released and the
    allocation retried (num_alloc_retries); a split segment in use is not released."""
    a = CachingAllocator(DEFAULT, device_memory=GIB, capacity=64 * MIB)
    a.free(a.malloc(40 * MIB))
    a.malloc(40 * MIB + 2 * MIB)  # the cached 40 MiB is too small: released, retried
    assert (a.stats.num_alloc_retries, a.stats.reserved) == (1, 42 * MIB)
    with pytest.raises(OutOfMemory):
        a.malloc(30 * MIB)
    assert a.stats.num_ooms == 1


# --- PYTORCH_CUDA_ALLOC_CONF -----------------------------------------------------------------


def test_parse_matches_allocator_config_test() -> None:
    """c10/test/core/AllocatorConfig_test.cpp allocator_config_test, the values it expects."""
    c = parse_alloc_conf(
        "max_split_size_mb:40,max_non_split_rounding_mb:30,garbage_collection_threshold:0.5,"
        "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],expandable_segments:True,"
        "pinned_use_background_threads:True"
    )
    assert (c.large_segment_size, c.max_split_size, c.non_split_rounding) == (
        20 * MIB,
        40 * MIB,
        30 * MIB,
    )
    assert c.garbage_collection_threshold == 0.5 and c.expandable_segments
    sizes = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    assert [c.divisions(s * MIB) for s in sizes] == [8, 8, 2, 4, 2, 4, 1, 1, 1]
    c = parse_alloc_conf(
        "large_segment_size_mb:15,max_split_size_mb:20,max_non_split_rounding_mb:40"
    )
    assert (c.large_segment_size, c.max_split_size, c.non_split_rounding) == (
        15 * MIB,
        20 * MIB,
        40 * MIB,
    )
    c = parse_alloc_conf("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]")
    assert [c.divisions(s * MIB) for s in (64, 128, 256, 512, 1024, 2048, 4096)] == [
        8,
        8,
        16,
        1,
        0,
        8,
        2,
    ]
    c = parse_alloc_conf("roundup_power2_divisions:4")
    assert {c.divisions(s * MIB) for s in (64, 256, 2048)} == {4}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo:123,bar:456", "--alloc-conf: unknown key 'foo'; torch accepts: expandable_segments"),
        ("max_split_size_mb:2", "max_split_size_mb: must be >= 20 (MiB), got 2"),
        ("max_split_size_mb:20,large_segment_size_mb:25", "must be >= 25 (MiB), got 20"),
        ("garbage_collection_threshold:1.2", "must be in (0.0, 1.0), got 1.2"),
        ("expandable_segments:true", "expected True or False (as torch spells them)"),
        ("max_split_size_mb", "max_split_size_mb: missing ':'"),
        ("garbage_collection_threshold:", "missing a value"),
        ("roundup_power2_divisions:[64:8", "missing ']'"),
        ("roundup_power2_divisions:[64:3]", "divisions must be a power of 2 or 0, got 3"),
        ("large_segment_size_mb:10", "must be > 10 (MiB), got 10"),
        ("backend:cudaMallocAsync", "cudaMallocAsync is not modelled"),
        ("per_process_memory_fraction:1.5", "must be in [0.0, 1.0], got 1.5"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    """Bad settings are one line naming the key (torch rejects the same ones:
    test_allocator_settings' ValueErrors, AllocatorConfig_test's throws)."""
    with pytest.raises(MemcalcError) as err:
        parse_alloc_conf(text)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_no_effect_keys_and_env() -> None:
    """Keys that change no device block are accepted and listed; PYTORCH_CUDA_ALLOC_CONF wins
    over PYTORCH_ALLOC_CONF (CUDAAllocatorConfig::instance)."""
    c = parse_alloc_conf("release_lock_on_cudamalloc:True, expandable_segments:True")
    assert c.ignored == ("release_lock_on_cudamalloc",) and c.expandable_segments
    env = {
        "PYTORCH_ALLOC_CONF": "max_split_size_mb:64",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    assert alloc_conf_from_env(env).expandable_segments
    assert (
        alloc_conf_from_env({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"}).max_split_size
        == 64 * MIB
    )
    assert alloc_conf_from_env({}) == DEFAULT
