"""The input boundary: typed, bounded fields for the frozen dataclasses every input becomes.

A model spec, a training setup and a GPU profile are frozen dataclasses whose fields are
declared with ``spec_field`` (a description, bounds, a default). ``check`` runs when one is
constructed: strict types (a bool is not a number, an int field takes no float, floats are
finite), the bounds, and the class's own cross-field rules (``_check``). ``parse`` builds one
from a mapping read off a file or the command line, refusing unknown keys. Every failure is a
``FieldError`` -- one line naming the field, what is wrong and what is allowed -- which the
loaders prefix with the file or flag it came from.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Toy:
...     layers: int = spec_field("Blocks.", default=1, ge=1, le=10**6)
...     def __post_init__(self) -> None:
...         check(self)
>>> Toy(layers=True)
Traceback (most recent call last):
...
memcalc.validate.FieldError: layers: expected an integer, got True
>>> parse(Toy, {"layers": 0}, "my.toml")
Traceback (most recent call last):
...
memcalc.validate.FieldError: my.toml: layers: must be at least 1 (1 to 1,000,000), got 0
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

from memcalc.errors import MemcalcError

T = TypeVar("T")

_MISSING: Any = dataclasses.MISSING


class FieldError(MemcalcError):
    """A bad value of one field: ``[source: ]field: problem``."""

    def __init__(self, field: str, problem: str, source: str = "") -> None:
        self.field, self.problem, self.source = field, problem, source
        where = f"{field}: " if field else ""
        super().__init__(f"{source}: {where}{problem}" if source else f"{where}{problem}")

    def at(self, source: str, field_name: str | None = None) -> FieldError:
        """The same error located in ``source`` (and renamed, e.g. to a flag)."""
        return FieldError(self.field if field_name is None else field_name, self.problem, source)


def spec_field(
    doc: str,
    *,
    default: Any = _MISSING,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    size: bool = False,
) -> Any:
    """A dataclass field with its description and bounds (inclusive ``ge``/``le``, exclusive
    ``gt``/``lt``). A ``size`` field is a number of bytes: besides an integer it takes a whole
    number written as a float (``48e9``) or a size with its unit (``"48GB"``, ``"80 GiB"``)."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt, "size": size}
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable default")  # pragma: no cover
    return dataclasses.field(default=default, metadata=meta)


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` for a message, shortened when long (a 5,000-digit integer, a deep list).

    >>> _shown(10**200)
    '100000000000000000000000000000... (201 characters)'
    """
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # a very deep list, a huge integer
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else f"{text[: limit // 2]}... ({len(text):,} characters)"


def _number(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) or float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _range(meta: Mapping[str, Any]) -> str:
    lo = meta["ge"] if meta["ge"] is not None else meta["gt"]
    hi = meta["le"] if meta["le"] is not None else meta["lt"]
    lo_s = "" if lo is None else ("> " if meta["ge"] is None else "") + _number(lo)
    hi_s = "" if hi is None else ("< " if meta["le"] is None else "") + _number(hi)
    if lo_s and hi_s:
        return f"{lo_s} to {hi_s}"
    return f"at least {lo_s}" if lo_s else f"at most {hi_s}"


def _check_bounds(name: str, value: float, meta: Mapping[str, Any]) -> None:
    for key, what in (
        ("ge", "must be at least"),
        ("gt", "must be greater than"),
        ("le", "must be at most"),
        ("lt", "must be less than"),
    ):
        bound = meta.get(key)
        if bound is None:
            continue
        ok = {
            "ge": value >= bound,
            "gt": value > bound,
            "le": value <= bound,
            "lt": value < bound,
        }[key]
        if not ok:
            raise FieldError(name, f"{what} {_number(bound)} ({_range(meta)}), got {_shown(value)}")


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved field annotations of ``cls`` (computed once per class)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """``value`` as the annotated type, strictly; a FieldError otherwise."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        present = [arg for arg in args if arg is not type(None)]
        if len(present) == 1:  # Optional[X]: X's own error, with its field path (moe.top_k)
            return _coerce(name, value, present[0])
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(name, value, arg)
            except FieldError as e:
                errors.append(e.problem)
        raise FieldError(name, errors[0] if len(errors) == 1 else "; ".join(errors))
    if origin is frozenset:
        if not isinstance(value, (frozenset, set, list, tuple)):
            raise FieldError(name, f"expected a set, got {_shown(value)}")
        (item,) = typing.get_args(hint)
        return frozenset(_coerce(name, v, item) for v in value)
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            raise FieldError(name, f"expected a list, got {_shown(value)}")
        (item,) = typing.get_args(hint)[:1]
        return tuple(_coerce(f"{name}[{i}]", v, item) for i, v in enumerate(value))
    if hint is typing.Any:
        return value
    if isinstance(hint, type) and issubclass(hint, Enum):
        if isinstance(value, hint):
            return value
        allowed = ", ".join(str(m.value) for m in hint)
        if isinstance(value, str):
            for m in hint:
                if str(m.value).lower() == value.lower():
                    return m
        raise FieldError(name, f"unknown value {_shown(value)}; choose one of: {allowed}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise FieldError(name, f"expected true or false, got {_shown(value)}")
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise FieldError(name, f"expected an integer, got {_shown(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FieldError(name, f"expected a number, got {_shown(value)}")
        if not math.isfinite(value):
            raise FieldError(name, f"must be a finite number, got {_shown(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise FieldError(name, f"expected a string, got {_shown(value)}")
        return value
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if isinstance(value, hint):
            return value
        if isinstance(value, Mapping):
            try:
                return parse(hint, value)
            except FieldError as e:
                raise FieldError(f"{name}.{e.field}" if e.field else name, e.problem) from None
        raise FieldError(name, f"expected a table of {hint.__name__} fields, got {_shown(value)}")
    raise TypeError(f"{name}: unsupported annotation {hint!r}")  # pragma: no cover


def _size(name: str, value: Any) -> Any:
    """Bytes from ``48e9`` or ``"48GB"``; anything else is left for the type check."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        from memcalc.units import parse_size

        try:
            return parse_size(value, name)
        except MemcalcError as e:
            raise FieldError(name, str(e).removeprefix(f"{name}: ")) from None
    return value


def check(obj: Any) -> None:
    """Validate a frozen dataclass in place (from its ``__post_init__``): every field's type
    and bounds, then the class's ``_check`` (cross-field rules). Values are normalised (an
    enum's string becomes the member, an int in a float field a float)."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        hint = hints[f.name]
        if f.metadata.get("size"):
            value = _size(f.name, value)
        if type(value) is not hint:  # the common case (already the right type) needs nothing
            value = _coerce(f.name, value, hint)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and f.metadata:
            _check_bounds(f.name, value, f.metadata)
        if value is not getattr(obj, f.name):
            object.__setattr__(obj, f.name, value)
    rules = getattr(obj, "_check", None)
    if rules is not None:
        rules()


def parse(cls: type[T], data: Mapping[str, Any], source: str = "") -> T:
    """A ``cls`` from a mapping (a parsed file, a set of flags); unknown keys are errors."""
    if not isinstance(data, Mapping):
        raise FieldError("", f"expected a table of fields, got {data!r}", source)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise FieldError(
            str(unknown[0]), f"unknown key; known keys: {', '.join(sorted(names))}", source
        )
    missing = [
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise FieldError(missing[0], "missing (required)", source)
    try:
        return cls(**data)
    except FieldError as e:
        raise e.at(source) if source else e from None


def describe(cls: type) -> dict[str, str]:
    """Field name -> its description (for documentation and error hints)."""
    return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls)}


def replace(obj: T, **changes: Any) -> T:
    """A copy with ``changes``, validated again."""
    return dataclasses.replace(obj, **changes)  # type: ignore[type-var]


def derive(obj: T, **changes: Any) -> T:
    """A copy with ``changes`` the caller knows keep it valid, not validated again (the
    planner's hot loop: a valid layout at another ZeRO stage)."""
    new = copy.copy(obj)
    for name, value in changes.items():
        object.__setattr__(new, name, value)
    return new
