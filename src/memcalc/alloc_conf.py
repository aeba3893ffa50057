"""``PYTORCH_CUDA_ALLOC_CONF``: the options of torch's caching allocator that change what it
reserves, parsed in the variable's own syntax (``expandable_segments:True,max_split_size_mb:128``).

Source (torch 2.13.0; see ``docs/allocator.md`` for how the version was established):
- the tokenizer and the shared options: ``c10/core/AllocatorConfig.h`` of the torch 2.13.0
  wheel, ``ConfigTokenizer`` (lines 35-130: ``,`` ``:`` ``[`` ``]`` are tokens, whitespace is
  dropped, booleans are exactly ``True`` / ``False``) and ``AcceleratorAllocatorConfig``
  (defaults lines 340-353: 20 MiB large segments, unlimited ``max_split_size``, no
  roundup divisions, no garbage collection, no expandable segments);
  ``c10/core/AllocatorConfig.cpp`` ``AcceleratorAllocatorConfig::parseArgs`` and its
  ``parse*`` functions for the bounds of each value;
- the CUDA-only keys: ``c10/cuda/CUDAAllocatorConfig.h`` of the wheel, ``getKeys`` (lines
  158-177) and ``per_process_memory_fraction`` (default 1.0, line 221);
- which variable is read: ``CUDAAllocatorConfig::instance`` (lines 133-154):
  ``PYTORCH_CUDA_ALLOC_CONF`` first, then ``PYTORCH_ALLOC_CONF``;
- the expected values: ``c10/test/core/AllocatorConfig_test.cpp`` (``allocator_config_test``)
  and ``test/test_cuda.py`` ``TestCudaMallocAsync.test_allocator_settings``.

Errors are one line naming the key as written and what it accepts (``MemcalcError``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from memcalc.errors import MemcalcError

MIB = 1 << 20
K_MIN_LARGE_ALLOC = 10 * MIB
"""``kMinLargeAlloc`` (``c10/core/AllocatorConfig.h`` line 23): requests below it share
``large_segment_size`` segments."""
ROUNDUP_INTERVALS = 16
"""``kRoundUpPowerOfTwoIntervals``: one division count per power of two from 1 MiB to 64 GiB
(``AllocatorConfig.cpp``)."""
ENV_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
"""Read in this order, the first that is set wins (``CUDAAllocatorConfig::instance``)."""

_NO_EFFECT = frozenset(
    {
        "release_lock_on_cudamalloc",
        "pinned_use_cuda_host_register",
        "pinned_num_register_threads",
        "pinned_use_background_threads",
        "pinned_max_round_threshold",
        "pinned_max_cached_size",
        "pinned_reserve_segment_size_mb",
        "pinned_free_catch_all",
        "graph_capture_record_stream_reuse",
        "throw_on_cudamalloc_oom",
    }
)
"""Keys torch accepts that do not change which device blocks are reserved (locking, the pinned
host allocator, CUDA-graph capture, when an OOM is raised): accepted, listed in ``ignored``."""

_KEYS = (
    "expandable_segments",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "roundup_power2_divisions",
    "garbage_collection_threshold",
    "large_segment_size_mb",
    "per_process_memory_fraction",
    "backend",
)


@dataclass(frozen=True)
class AllocConf:
    """The caching allocator's settings that change reserved memory (torch's defaults)."""

    expandable_segments: bool = False
    """One segment per pool that grows by mapping pages (2 MiB small, ``large_segment_size``
    large) instead of one cudaMalloc per segment."""
    max_split_size: int | None = None
    """Bytes; blocks this large or larger are never split (None: unlimited, torch's default)."""
    max_non_split_rounding: int | None = None
    """Bytes a request at or above ``max_split_size`` may round up into a cached block
    (None: ``large_segment_size``, as ``AcceleratorAllocatorConfig`` sets it)."""
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    """Divisions per power-of-two interval [2^(20+i), 2^(21+i)) bytes; 0 or 1: 512-byte
    rounding only."""
    garbage_collection_threshold: float = 0.0
    """Fraction of the allowed memory above which cached unsplit blocks are freed before a
    cudaMalloc (0: off). Active only with ``per_process_memory_fraction`` < 1."""
    large_segment_size: int = 20 * MIB
    """Segment for large requests below 10 MiB (``kLargeBuffer``), and the page of an
    expandable large pool."""
    per_process_memory_fraction: float = 1.0
    """Share of the device's memory the allocator may use (1: all of it)."""
    text: str = ""
    """The setting as the user wrote it."""
    ignored: tuple[str, ...] = field(default=(), compare=False)
    """Keys given that have no effect on reserved memory."""

    @property
    def non_split_rounding(self) -> int:
        return (
            self.large_segment_size
            if self.max_non_split_rounding is None
            else self.max_non_split_rounding
        )

    def divisions(self, size: int) -> int:
        """``AcceleratorAllocatorConfig::roundup_power2_divisions(size)``: the entry of the
        power-of-two interval holding ``size`` (below 1 MiB the first, above 64 GiB the last).

        >>> conf = parse_alloc_conf("roundup_power2_divisions:[64:8,128:2,256:4,>:1]")
        >>> conf.divisions(32 * MIB), conf.divisions(200 * MIB), conf.divisions(300 * MIB)
        (8, 2, 4)
        >>> conf.divisions(8192 * MIB)
        1
        """
        index = max(size.bit_length() - 1 - 20, 0)
        return self.roundup_power2_divisions[min(index, ROUNDUP_INTERVALS - 1)]

    def describe(self) -> str:
        """One line for the report's assumptions."""
        return self.text or "torch defaults (no PYTORCH_CUDA_ALLOC_CONF)"


DEFAULT = AllocConf()


def _error(key: str, what: str) -> MemcalcError:
    return MemcalcError(f"--alloc-conf: {key}: {what}")


def _tokens(text: str) -> list[str]:
    """``ConfigTokenizer``: ``,`` ``:`` ``[`` ``]`` are tokens of their own; whitespace is
    dropped.

    >>> _tokens("expandable_segments : True,max_split_size_mb:[256:4]")
    ['expandable_segments', ':', 'True', ',', 'max_split_size_mb', ':', '[', '256', ':', '4', ']']
    """
    out: list[str] = []
    buf = ""
    for ch in text:
        if ch in ",:[]":
            if buf:
                out.append(buf)
                buf = ""
            out.append(ch)
        elif not ch.isspace():
            buf += ch
    if buf:
        out.append(buf)
    return out


class _Reader:
    """Walks the tokens the way ``AcceleratorAllocatorConfig::parseArgs`` does."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.i = 0

    def take(self, key: str, what: str) -> str:
        if self.i >= len(self.tokens):
            raise _error(key, f"missing {what}")
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, key: str, token: str) -> None:
        got = self.take(key, f"'{token}'")
        if got != token:
            raise _error(key, f"expected '{token}', got {got!r}")


def _size_mb(key: str, text: str, minimum_mb: int, strict: bool = False) -> int:
    """A whole number of MiB at least (or, ``strict``, above) ``minimum_mb``, in bytes."""
    if not text.isdigit():
        raise _error(key, f"must be a whole number of MiB, got {text!r}")
    value = int(text)
    if value < minimum_mb or (strict and value == minimum_mb):
        bound = f"> {minimum_mb}" if strict else f">= {minimum_mb}"
        raise _error(key, f"must be {bound} (MiB), got {value}")
    return value * MIB


def _fraction(key: str, text: str, low_open: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _error(key, f"must be a number, got {text!r}") from None
    ok = (0 < value < 1) if low_open else (0 <= value <= 1)
    if not ok or not math.isfinite(value):
        allowed = "in (0.0, 1.0)" if low_open else "in [0.0, 1.0]"
        raise _error(key, f"must be {allowed}, got {text}")
    return value


def _power2(key: str, text: str, what: str, zero_ok: bool) -> int:
    if not text.isdigit():
        raise _error(key, f"{what} must be a whole number, got {text!r}")
    value = int(text)
    if not ((zero_ok and value == 0) or (value > 0 and value & (value - 1) == 0)):
        raise _error(key, f"{what} must be a power of 2{' or 0' if zero_ok else ''}, got {value}")
    return value


def _divisions(r: _Reader, key: str) -> tuple[int, ...]:
    """``parseRoundUpPower2Divisions``: one power of two for every interval, or a list
    ``[MiB:divisions, ..., >:divisions]``: an entry sets the interval starting at that many
    MiB (a power of two); the first entry also fills the intervals below it, ``>`` those above
    the last entry; intervals between entries keep 0. Expected values:
    ``AllocatorConfig_test.cpp`` (``[128:8,256:16,512:1,2048:8,>:2]`` gives 0 at 1024 MiB)."""
    first = r.take(key, "a value")
    table = [0] * ROUNDUP_INTERVALS
    if first != "[":
        value = _power2(key, first, "divisions", zero_ok=False)
        return (value,) * ROUNDUP_INTERVALS
    last_index = 0
    first_value = True
    while True:
        boundary = r.take(key, "']'")
        if boundary == "]":
            break
        r.expect(key, ":")
        value = _power2(key, r.take(key, "a division count"), "divisions", zero_ok=True)
        if boundary == ">":
            for k in range(last_index + 1, ROUNDUP_INTERVALS):
                table[k] = value
        else:
            mb = _power2(key, boundary, f"interval {boundary!r} (MiB)", zero_ok=False)
            index = min(mb.bit_length() - 1, ROUNDUP_INTERVALS - 1)
            if first_value:
                for k in range(index):
                    table[k] = value
                first_value = False
            table[index] = value
            last_index = index
        nxt = r.take(key, "']'")
        if nxt == "]":
            break
        if nxt != ",":
            raise _error(key, f"expected ',' or ']', got {nxt!r}")
    return tuple(table)


def _bool(key: str, text: str) -> bool:
    if text not in ("True", "False"):
        raise _error(key, f"expected True or False (as torch spells them), got {text!r}")
    return text == "True"


def parse_alloc_conf(text: str) -> AllocConf:
    """An ``AllocConf`` from ``PYTORCH_CUDA_ALLOC_CONF`` syntax; unknown keys and bad values
    raise a one-line ``MemcalcError``.

    >>> c = parse_alloc_conf("expandable_segments:True,max_split_size_mb:128")
    >>> c.expandable_segments, c.max_split_size // MIB
    (True, 128)
    >>> parse_alloc_conf("max_split_size_mb:2")
    Traceback (most recent call last):
    ...
    memcalc.errors.MemcalcError: --alloc-conf: max_split_size_mb: must be >= 20 (MiB), got 2
    """
    tokens = _tokens(text)
    # large_segment_size_mb is read first: the bounds of max_split_size_mb and
    # max_non_split_rounding_mb depend on it (AcceleratorAllocatorConfig::parseArgs)
    large = DEFAULT.large_segment_size
    for k, tok in enumerate(tokens):
        if tok == "large_segment_size_mb" and k + 2 < len(tokens) and tokens[k + 1] == ":":
            large = _size_mb(tok, tokens[k + 2], K_MIN_LARGE_ALLOC // MIB, strict=True)
    conf = replace(DEFAULT, large_segment_size=large, text=text)
    ignored: list[str] = []
    r = _Reader(tokens)
    while r.i < len(tokens):
        key = r.take("--alloc-conf", "a key")
        if key not in _KEYS and key not in _NO_EFFECT:
            allowed = ", ".join((*_KEYS, *sorted(_NO_EFFECT)))
            raise MemcalcError(f"--alloc-conf: unknown key {key!r}; torch accepts: {allowed}")
        r.expect(key, ":")
        conf = _apply(conf, key, r, ignored)
        if r.i < len(tokens):
            r.expect(key, ",")
    return replace(conf, ignored=tuple(ignored))


def _apply(conf: AllocConf, key: str, r: _Reader, ignored: list[str]) -> AllocConf:
    """Parse ``key``'s value and return ``conf`` with it set."""
    large_mb = conf.large_segment_size // MIB
    if key == "roundup_power2_divisions":
        return replace(conf, roundup_power2_divisions=_divisions(r, key))
    value = r.take(key, "a value")
    if value == "[":
        raise _error(key, "takes one value, not a list")
    if key == "expandable_segments":
        return replace(conf, expandable_segments=_bool(key, value))
    if key == "max_split_size_mb":
        return replace(conf, max_split_size=_size_mb(key, value, large_mb))
    if key == "max_non_split_rounding_mb":
        return replace(conf, max_non_split_rounding=_size_mb(key, value, large_mb))
    if key == "garbage_collection_threshold":
        return replace(conf, garbage_collection_threshold=_fraction(key, value, low_open=True))
    if key == "per_process_memory_fraction":
        return replace(conf, per_process_memory_fraction=_fraction(key, value, low_open=False))
    if key == "large_segment_size_mb":
        return conf  # read before the others (its bound was checked there)
    if key == "backend":
        if value == "native":
            return conf
        if value == "cudaMallocAsync":
            raise _error(
                key,
                "cudaMallocAsync is not modelled (memcalc models torch's native "
                "caching allocator; use backend:native or leave it out)",
            )
        raise _error(key, f"unknown backend {value!r}; choose one of: native, cudaMallocAsync")
    ignored.append(key)
    return conf


def alloc_conf_from_env(environ: Mapping[str, str] | None = None) -> AllocConf:
    """The setting a torch process would read from its environment (``ENV_VARS``)."""
    env = os.environ if environ is None else environ
    for var in ENV_VARS:
        if var in env:
            return parse_alloc_conf(env[var])
    return DEFAULT
