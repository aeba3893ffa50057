"""How the quiz shows numbers: one scale (unit and digits) per question, chosen so that every
sum the explanation writes out adds up as printed, and the margin that keeps options apart.

``12 × 0.04 + 0.20 = 0.71`` is what two-decimal GiB printed for a small model: each term was
rounded on its own. ``choose_scale`` tries GiB, MiB and KiB at a few digits and takes the first
scale at which every number has at least two significant digits and every written sum holds
exactly on the printed numbers; exact bytes always hold and are the last resort.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from enum import Enum

MARGIN = 0.05
"""Options of a generated question differ by at least 5% (relative) from each other and from
the answer, so a learner who computes within a few percent can tell them apart."""


def relative_gap(a: float, b: float) -> float:
    """``|a - b| / max(|a|, |b|)``; 0 when both are 0.

    >>> relative_gap(100, 95), relative_gap(0, 3), relative_gap(0, 0)
    (0.05, 1.0, 0.0)
    """
    top = max(abs(a), abs(b))
    return 0.0 if top == 0 else abs(a - b) / top


def far_apart(a: float, b: float, margin: float = MARGIN) -> bool:
    """True when ``a`` and ``b`` differ by at least ``margin`` (relative).

    >>> far_apart(32.1, 33.3), far_apart(75.31, 50.21)
    (False, True)
    """
    return relative_gap(a, b) >= margin - 1e-12


class SizeUnit(str, Enum):
    """Units a memory size is printed in (binary; GB is only ever named as a mistake)."""

    GiB = "GiB"
    MiB = "MiB"
    KiB = "KiB"
    bytes = "bytes"

    @property
    def size(self) -> int:
        """Bytes in one unit."""
        return {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "bytes": 1}[self.value]


@dataclass(frozen=True)
class Sum:
    """A sum written out in an explanation: ``m1 × t1 + m2 × t2 + ... = total`` (bytes).

    A multiplier of 1 is written as a plain term, -1 as a subtraction."""

    terms: tuple[tuple[int, int], ...]
    """(multiplier, bytes) of each term."""
    total: int
    """Bytes of the result."""


@dataclass(frozen=True)
class Scale:
    """A unit and a number of decimals; every size in one question uses the same scale."""

    unit: SizeUnit
    digits: int

    def number(self, num_bytes: int | float) -> Decimal:
        """The printed number: bytes in ``unit``, rounded half up to ``digits``.

        >>> Scale(SizeUnit.GiB, 2).number(1.5 * 2**30)
        Decimal('1.50')
        """
        with localcontext() as ctx:
            ctx.prec = 60
            exact = Decimal(num_bytes) / Decimal(self.unit.size)
            return exact.quantize(Decimal(1).scaleb(-self.digits), rounding=ROUND_HALF_UP)

    def text(self, num_bytes: int | float) -> str:
        """The size as printed, with thousands separators and the unit.

        >>> Scale(SizeUnit.MiB, 1).text(1234.5 * 2**20), Scale(SizeUnit.bytes, 0).text(1164)
        ('1,234.5 MiB', '1,164 bytes')
        """
        return f"{self.number(num_bytes):,.{self.digits}f} {self.unit.value}"

    def shown_bytes(self, num_bytes: int | float) -> float:
        """The bytes the printed number stands for (what a learner reads)."""
        return float(self.number(num_bytes)) * self.unit.size

    def readable(self, num_bytes: int | float) -> bool:
        """At least two significant digits (``0.04 GiB`` is not; ``40.0 MiB`` is); zero is."""
        n = abs(self.number(num_bytes))
        return n == 0 or n >= Decimal(1).scaleb(1 - self.digits)

    def holds(self, s: Sum) -> bool:
        """True when the printed terms add up to the printed total exactly."""
        printed = sum((m * self.number(t) for m, t in s.terms), Decimal(0))
        return printed == self.number(s.total)


EXACT = Scale(SizeUnit.bytes, 0)
"""Exact bytes: every sum holds."""

_NICE: tuple[Scale, ...] = (
    Scale(SizeUnit.GiB, 2),
    Scale(SizeUnit.GiB, 3),
    Scale(SizeUnit.MiB, 0),
    Scale(SizeUnit.MiB, 1),
    Scale(SizeUnit.MiB, 2),
    Scale(SizeUnit.MiB, 3),
)
"""Scales a learner reads at a glance."""
_CANDIDATES: tuple[Scale, ...] = (
    *_NICE,
    Scale(SizeUnit.KiB, 0),
    Scale(SizeUnit.KiB, 1),
    EXACT,
)


def nice_scale(values: Iterable[int | float], sums: Sequence[Sum] = ()) -> Scale | None:
    """Like ``choose_scale`` but only GiB or MiB; None when no such scale makes every sum
    hold (then write fewer sums, or let ``choose_scale`` fall back to KiB or bytes)."""
    scale = choose_scale(values, sums)
    return scale if scale in _NICE else None


def choose_scale(values: Iterable[int | float], sums: Sequence[Sum] = ()) -> Scale:
    """The first scale (largest unit first, fewest digits first) at which every value and
    every term is readable and every sum holds as printed; starts at MiB when everything is
    below 1 GiB, at KiB below 1 MiB.

    >>> GIB, MIB = 2**30, 2**20
    >>> choose_scale([75 * GIB, 50 * GIB], [Sum(((1, 50 * GIB), (1, 25 * GIB)), 75 * GIB)])
    Scale(unit=<SizeUnit.GiB: 'GiB'>, digits=2)
    >>> choose_scale([696 * MIB], [Sum(((12, 41 * MIB), (1, 204 * MIB)), 696 * MIB)])
    Scale(unit=<SizeUnit.MiB: 'MiB'>, digits=0)
    """
    shown = [v for v in values] + [t for s in sums for _, t in s.terms] + [s.total for s in sums]
    largest = max((abs(v) for v in shown), default=0)
    start = 0 if largest >= SizeUnit.GiB.size else 2 if largest >= SizeUnit.MiB.size else 5
    for scale in _CANDIDATES[start:]:
        if all(scale.readable(v) for v in shown) and all(scale.holds(s) for s in sums):
            return scale
    return EXACT


def format_count(x: float) -> str:
    """An integer without decimals, anything else with two.

    >>> format_count(18.0), format_count(12.0078)
    ('18', '12.01')
    """
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


def format_percent(fraction: float, digits: int = 1) -> str:
    """A step-time or FLOPs increase, with its sign.

    >>> format_percent(1 / 3), format_percent(0.25, 0)
    ('+33.3%', '+25%')
    """
    return f"+{100 * fraction:.{digits}f}%"


def format_share(fraction: float) -> str:
    """A share of a whole as a percentage, to three significant digits (one decimal at least).

    >>> format_share(8_388_608 / 6_746_804_224), format_share(3 / 11), format_share(0.0)
    ('0.124%', '27.3%', '0.0%')
    >>> format_share(0.9995), format_share(1.0)
    ('99.95%', '100.0%')
    """
    percent = 100 * fraction
    if percent == 0:
        return "0.0%"
    digits = max(1, 2 - math.floor(math.log10(abs(percent))))
    # a share short of the whole is never printed as the whole: 99.95% stays 99.95%
    while f"{percent:.{digits}f}" == f"{100:.{digits}f}" and percent < 100:
        digits += 1
    return f"{percent:.{digits}f}%"


def share_value(text: str) -> float:
    """The percentage a ``format_share`` text states.

    >>> share_value("0.124%")
    0.124
    """
    return float(text.rstrip("%"))


COUNT_UNITS = ((10**9, "B"), (10**6, "M"), (10**3, "K"))
"""How a parameter count is written: billions, millions, thousands (as model cards do)."""


def format_params(n: float) -> str:
    """A parameter count in billions (two decimals), millions or thousands (one decimal).

    >>> format_params(46_702_792_704), format_params(124_439_808), format_params(8_388_608)
    ('46.70 B', '124.4 M', '8.4 M')
    """
    for size, name in COUNT_UNITS:
        if abs(n) >= size:
            digits = 2 if name == "B" else 1
            return f"{n / size:,.{digits}f} {name}"
    return f"{n:,.0f}"


def params_value(text: str) -> float:
    """The count a ``format_params`` text stands for (as printed).

    >>> params_value("46.70 B"), params_value("124.4 M")
    (46700000000.0, 124400000.0)
    """
    number, _, name = text.partition(" ")
    scale = dict((u, s) for s, u in COUNT_UNITS).get(name, 1)
    return float(number.replace(",", "")) * scale
