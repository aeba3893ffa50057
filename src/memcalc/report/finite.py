"""The output boundary: JSON that any strict parser reads, with finite numbers only.

A non-finite number in a result means some input let a time or a rate run off to infinity;
it is reported as an error naming the result field, never written as ``Infinity`` (which is
not JSON).

>>> dumps({"step_seconds": 0.5})
'{\\n  "step_seconds": 0.5\\n}'
>>> dumps({"strategies": [{"step_seconds": float("inf")}]})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
memcalc.errors.MemcalcError: strategies[0].step_seconds: the result is not a finite number (inf)...
"""

from __future__ import annotations

import json
import math
from typing import Any

from memcalc.errors import MemcalcError


def non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """The first non-finite float in ``value`` (nested dicts and lists) and where it is."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path, item
        if isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in reversed(item.items()))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def check_finite(value: Any) -> None:
    """Raise the output-boundary error if ``value`` holds a non-finite number."""
    bad = non_finite(value)
    if bad is not None:
        path, number = bad
        raise MemcalcError(
            f"{path}: the result is not a finite number ({number}) for these inputs; check "
            "the rates and fractions given (FLOP/s, bytes/s, --mfu)"
        )


def dumps(record: Any) -> str:
    """``record`` as indented strict JSON (``allow_nan=False``), after ``check_finite``."""
    check_finite(record)
    return json.dumps(record, indent=2, allow_nan=False)
