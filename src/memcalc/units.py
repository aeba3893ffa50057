"""Bytes to text: the only place where a number of bytes becomes a string with a unit.

GiB = 2**30 bytes and GB = 10**9 bytes are never mixed; every label says which one it is.
"""

import math
from enum import Enum

GIB = 2**30
GB = 10**9
MAX_SIZE_BYTES = 2**60
"""Largest size a flag may give (1 EiB: beyond any GPU, host or budget)."""


class Unit(str, Enum):
    """Unit for printed memory sizes."""

    GiB = "GiB"
    """Binary gibibytes, 2**30 bytes (what nvidia-smi and torch call 'GB')."""
    GB = "GB"
    """Decimal gigabytes, 10**9 bytes (what datasheets call 'GB')."""


def bytes_per_unit(unit: Unit) -> int:
    """2**30 for GiB, 10**9 for GB."""
    return GIB if unit is Unit.GiB else GB


def to_unit(num_bytes: int | float, unit: Unit) -> float:
    """Bytes as a float in ``unit``.

    >>> to_unit(3 * 2**30, Unit.GiB)
    3.0
    """
    return num_bytes / bytes_per_unit(unit)


def format_bytes(num_bytes: int | float, unit: Unit = Unit.GiB, digits: int = 2) -> str:
    """Human text with the unit label.

    >>> format_bytes(1.5 * 2**30)
    '1.50 GiB'
    >>> format_bytes(2_000_000_000, Unit.GB)
    '2.00 GB'
    """
    return f"{to_unit(num_bytes, unit):.{digits}f} {unit.value}"


def format_flops(flops: float) -> str:
    """FLOPs with an SI prefix.

    >>> format_flops(1.25e15)
    '1.25 PFLOP'
    """
    for prefix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if abs(flops) >= scale:
            return f"{flops / scale:.2f} {prefix}FLOP"
    return f"{flops:.0f} FLOP"


def format_seconds(seconds: float) -> str:
    """Seconds as ms or s.

    >>> format_seconds(0.0123)
    '12.3 ms'
    """
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


_SIZE_SUFFIXES = {
    "gib": GIB,
    "gb": GB,
    "mib": 2**20,
    "mb": 10**6,
    "kib": 2**10,
    "kb": 10**3,
    "tib": 2**40,
    "tb": 10**12,
    "b": 1,
    "": 1,
}


def parse_size(text: str, field: str = "--budget") -> int:
    """Bytes from '20GiB', '20 GB', '2e10' or '21474836480'.

    >>> parse_size("1.5GiB"), parse_size("2e9"), parse_size("10 MB")
    (1610612736, 2000000000, 10000000)
    """
    from memcalc.errors import MemcalcError

    cleaned = text.strip().lower().replace(" ", "")
    number = cleaned.rstrip("abcdefghijklmnopqrstuvwxyz")
    suffix = cleaned[len(number) :]
    try:
        value = float(number) * _SIZE_SUFFIXES[suffix]
    except (ValueError, KeyError):
        raise MemcalcError(
            f"{field}: cannot read {text[:40]!r} as a size; use a number of bytes or a number with "
            f"one of: GiB, GB, MiB, MB, TiB, TB"
        ) from None
    if not math.isfinite(value) or value > MAX_SIZE_BYTES:
        raise MemcalcError(f"{field}: must be at most 1 EiB (2^60 bytes), got {text[:40]!r}")
    if value < 1:
        raise MemcalcError(f"{field}: must be at least 1 byte, got {text[:40]!r}")
    if not suffix and value < BARE_SIZE_MIN:
        raise MemcalcError(
            f"{field}: {text.strip()[:40]} has no unit, so it would be {int(value)} bytes; "
            f"did you mean {number}GB or {number}GiB?"
        )
    return int(value)


BARE_SIZE_MIN = 2**20
"""A size given without a unit below this many bytes (``--gpu-memory 48``) is taken for a
forgotten unit: no memory, budget or host RAM that small is meant."""


_COUNT_SUFFIXES = {
    "": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "b": 10**9,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
}


def parse_count(text: str, field: str) -> int:
    """A count from '4M' (4e6), '4Mi' (4 x 2^20), '4e6' or '4194304'.

    >>> parse_count("4Mi", "--global-tokens"), parse_count("2.5k", "--global-tokens")
    (4194304, 2500)
    """
    from memcalc.errors import MemcalcError

    cleaned = text.strip().lower().replace(" ", "").replace("_", "").replace(",", "")
    number = cleaned.rstrip("abcdefghijklmnopqrstuvwxyz")
    suffix = cleaned[len(number) :]
    try:
        value = float(number) * _COUNT_SUFFIXES[suffix]
    except (ValueError, KeyError):
        raise MemcalcError(
            f"{field}: cannot read {text[:40]!r} as a count; use a number, optionally with k, M, G "
            "(powers of 10) or Ki, Mi, Gi (powers of 2)"
        ) from None
    if not (math.isfinite(value) and 1 <= value <= 1e15 and value == int(value)):
        raise MemcalcError(f"{field}: must be a whole number from 1 to 1e15, got {text[:40]!r}")
    return int(value)
