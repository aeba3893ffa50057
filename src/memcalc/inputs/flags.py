"""A flag: one input of a command, declared once with its spellings, its parser, its default and
its help. The command line turns flags into click options (``cli/options.py``); the Python API
parses keyword arguments with the same parsers (``inputs/read.py``) -- so a value either refuses
is refused by both, with the same message."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from memcalc.errors import MemcalcError


class FlagError(MemcalcError):
    """A value a flag's parser refuses: ``detail`` is what click's ``fail`` prints after
    "Invalid value for '--flag':"."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


Parse = Callable[[Any], Any]


@dataclass(frozen=True)
class Flag:
    """One input of a command."""

    name: str
    """The keyword (``grad_dtype``): the Python API's argument and the values' key."""
    spellings: tuple[str, ...]
    """The command line's (``--dp``, ``--gpus``); the first is the one errors name."""
    parse: Parse
    """A command-line string or a Python value -> the typed value (raises FlagError)."""
    default: Any = None
    help: str = ""
    switch: str | None = None
    """A boolean's negative spelling (``--no-foreach``); ``""``: a flag with no negative."""
    multiple: bool = False
    """Repeatable (``--offload``): a tuple of parsed values."""
    show_default: bool = True
    hidden: bool = False
    """Not in ``--help`` (deprecated spellings)."""
    metavar: str | None = None
    short: tuple[str, ...] = field(default=())
    """Short spellings (``-b``): the command line's only."""

    @property
    def flag(self) -> str:
        return self.spellings[0]

    @property
    def label(self) -> str:
        """How click names the option in its errors: ``'--batch' / '-b'``."""
        return " / ".join(f"'{s}'" for s in (*self.spellings, *self.short))

    def value_of(self, value: Any) -> Any:
        """``value`` parsed (a tuple of parsed values for a repeatable flag); the error
        names the flag as click does."""
        try:
            if self.multiple:
                items = [value] if isinstance(value, (str, Enum)) else list(value)
                return tuple(self.parse(v) for v in items)
            if self.switch is not None:
                return boolean(value)
            return self.parse(value)
        except FlagError as e:
            raise MemcalcError(f"Invalid value for {self.label}: {e.detail}") from None

    def with_default(self, default: Any, **changes: Any) -> Flag:
        """The same flag with another default (``measure`` runs fp32 by default)."""
        return replace(self, default=default, **changes)


def _named(parse: Parse, metavar: str) -> Parse:
    """``parse`` with the metavar ``--help`` shows for it."""
    parse.metavar = metavar  # type: ignore[attr-defined]
    return parse


def metavar(parse: Parse) -> str:
    """What ``--help`` shows for a flag's value."""
    return str(getattr(parse, "metavar", "TEXT"))


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else repr(str(value))


def choice_of(enum: type[Enum]) -> Parse:
    """An Enum's value, any case, or the member itself."""
    values = [str(m.value) for m in enum]

    def parse(value: Any) -> Any:
        if isinstance(value, enum):
            return value
        text = str(value.value if isinstance(value, Enum) else value)
        for member in enum:
            if str(member.value).lower() == text.lower():
                return member
            listed = ", ".join(repr(v) for v in values)
        raise FlagError(f"{text!r} is not one of {listed}.")

    return _named(parse, "[" + "|".join(values) + "]")


def choice(values: Sequence[str]) -> Parse:
    """One of ``values`` (any case), as the listed spelling."""

    def parse(value: Any) -> Any:
        text = str(value)
        for v in values:
            if v.lower() == text.lower():
                return v
        raise FlagError(f"{text!r} is not one of {', '.join(repr(v) for v in values)}.")

    return _named(parse, "[" + "|".join(values) + "]")


def integer(value: Any) -> int:
    """An integer (a whole-number string or an int; not a bool, not 1.5)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise FlagError(f"{_shown(value)} is not a valid integer.") from None


def bounded(low: int, high: int | None = None) -> Parse:
    """An integer from ``low`` to ``high`` (no upper bound: None), said as click's IntRange
    says it."""

    def parse(value: Any) -> int:
        x = integer(value)
        if x < low or (high is not None and x > high):
            where = f"x>={low}" if high is None else f"{low}<=x<={high}"
            raise FlagError(f"{x} is not in the range {where}.")
        return x

    return _named(parse, "INTEGER")


TOKEN_SUFFIXES = {"": 1, "k": 2**10, "ki": 2**10, "m": 2**20, "mi": 2**20}
"""A sequence length as people write context lengths: powers of two (4k = 4,096)."""


def tokens(value: Any) -> int:
    """A number of tokens: a whole number, or with ``k`` / ``M`` (``4k`` = 4,096, ``128k`` =
    131,072, ``1M`` = 1,048,576). A negative one is passed on for the setup's bound to
    name."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raw = str(value).strip().lower().replace("_", "").replace(",", "")
    sign = -1 if raw.startswith("-") else 1
    raw = raw.lstrip("+-") if raw[:1] in "+-" and len(raw) > 1 else raw
    digits = raw.rstrip("kmi")
    scale = TOKEN_SUFFIXES.get(raw[len(digits) :])
    if scale is None or not digits.isascii() or not digits.isdigit() or len(digits) > 4000:
        raise FlagError(f"{str(value)[:40]!r} is not a whole number of tokens (e.g. 4096 or 4k)")
    return sign * int(digits) * scale


def optional_integer(value: Any) -> int | None:
    return None if value is None else integer(value)


def text(value: Any) -> str:
    return str(value)


def optional_text(value: Any) -> str | None:
    return None if value is None else str(value)


def boolean(value: Any) -> bool:
    """A switch's value from Python (True / False) or a word (true, false, yes, no, 1, 0)."""
    if isinstance(value, bool):
        return value
    words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    key = str(value).strip().lower()
    if key not in words:
        raise FlagError(f"{_shown(value)} is not a valid boolean.")
    return words[key]


def optional_boolean(value: Any) -> bool | None:
    return None if value is None else boolean(value)


def number(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Parse:
    """A finite number within the bounds (``nan`` and ``inf`` refused with the range)."""
    allowed = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(value: Any) -> float:
        if isinstance(value, float):
            x = value
        else:
            try:
                x = float(str(value).strip())
            except ValueError:
                raise FlagError(
                    f"{str(value)[:40]!r} is not a number (allowed: {allowed})"
                ) from None
        if isinstance(value, bool) or not math.isfinite(x):
            raise FlagError(f"{str(value)[:40]!r} is not a finite number (allowed: {allowed})")
        low_ok = x > low if low_open else x >= low
        high_ok = x < high if high_open else x <= high
        if not (low_ok and high_ok):
            raise FlagError(f"{x:g} is outside {allowed}")
        return x

    return _named(parse, "NUMBER")


def optional(parse: Parse) -> Parse:
    """``parse``, with None passed through (a flag whose default is "not given")."""
    return _named(lambda value: None if value is None else parse(value), metavar(parse))


def names(value: Any) -> str:
    """Comma-separated names, from a string or a list (``q_proj,v_proj``)."""
    if isinstance(value, str):
        return value
    return ",".join(str(getattr(v, "value", v)) for v in value)


def path(value: Any) -> Path:
    """A file path taken as given: no ``os.stat`` here; the reader (``memcalc.files``) says
    what is wrong with it, naming it."""
    raw = str(value)
    if "\x00" in raw or not raw.strip():
        raise FlagError(f"{raw[:60]!r} is not a usable path")
    return Path(raw)


_named(integer, "INTEGER")
_named(tokens, "TOKENS")
_named(optional_integer, "INTEGER")
_named(names, "NAMES")
_named(path, "PATH")
_named(boolean, "BOOLEAN")
