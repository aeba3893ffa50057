"""``--typed``: a learner types a number (with its unit) instead of picking a letter.

A memory size may be typed in any unit (``75.3 GiB``, ``80.9 GB``, ``77100 MiB``); it is
compared in bytes, so ``80.86 GB`` for a 75.31 GiB answer is right. Without a unit the
question's own unit is assumed. Western, Urdu (۰-۹) and Arabic-Indic (٠-٩) digits are read.
"""

from __future__ import annotations

import re

from memcalc.quiz.bank import AnswerUnit, Numeric

_DIGITS = str.maketrans("۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩٫٬", "01234567890123456789.,")

_SIZE_BYTES = {
    "tib": 2**40,
    "gib": 2**30,
    "mib": 2**20,
    "kib": 2**10,
    "tb": 10**12,
    "gb": 10**9,
    "mb": 10**6,
    "kb": 10**3,
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "بائٹ": 1,
    "بائٹس": 1,
}
"""Size units a learner may type, in bytes (case ignored)."""

_UNIT_BYTES = {AnswerUnit.GiB: 2**30, AnswerUnit.MiB: 2**20, AnswerUnit.KiB: 2**10}
_UNIT_BYTES |= {AnswerUnit.GB: 10**9, AnswerUnit.MB: 10**6, AnswerUnit.bytes: 1}

_NUMBER = re.compile(r"^\s*([+-]?)\s*(\d[\d,]*(?:\.\d+)?|\.\d+)\s*(\S*?)\s*$")


def parse_typed(text: str, numeric: Numeric) -> float | None:
    """What the learner typed, in ``numeric.unit``; None when it is not a number in a unit
    that fits the question.

    >>> n = Numeric(value=75.31, unit=AnswerUnit.GiB)
    >>> round(parse_typed("80.86 GB", n), 2), parse_typed("75.3", n), parse_typed("75 %", n)
    (75.31, 75.3, None)
    >>> parse_typed("+۳۲٫۷%", Numeric(value=32.7, unit=AnswerUnit.percent))
    32.7
    """
    match = _NUMBER.match(text.translate(_DIGITS))
    if not match:
        return None
    sign, digits, unit = match.groups()
    if "," in digits and not re.fullmatch(r"\d{1,3}(,\d{3})+(\.\d+)?", digits):
        return None  # a comma that is not a thousands separator
    number = float(digits.replace(",", "")) * (-1 if sign == "-" else 1)
    unit = unit.lower()
    if numeric.unit is AnswerUnit.percent:
        return number if unit in ("", "%") else None
    if numeric.unit is AnswerUnit.counted:
        return number if unit == "" and number.is_integer() else None
    if not unit:
        return number
    if unit not in _SIZE_BYTES:
        return None
    return number * _SIZE_BYTES[unit] / _UNIT_BYTES[numeric.unit]


def accepted(value: float, numeric: Numeric) -> bool:
    """True when ``value`` (in ``numeric.unit``) is within the tolerance of the answer.

    >>> n = Numeric(value=100.0, unit=AnswerUnit.GiB, tolerance=0.02)
    >>> accepted(98.1, n), accepted(97.9, n)
    (True, False)
    """
    if numeric.tolerance == 0:
        return value == numeric.value
    return abs(value - numeric.value) <= numeric.tolerance * abs(numeric.value) + 1e-9


def unit_word(numeric: Numeric) -> str:
    """The answer's unit as printed after the number ('' for counts, '%' for percents)."""
    if numeric.unit is AnswerUnit.percent:
        return "%"
    if numeric.unit is AnswerUnit.counted:
        return ""
    return f" {numeric.unit.value}"


def answer_text(numeric: Numeric) -> str:
    """The correct number with its unit, e.g. ``75.31 GiB`` or ``32.7%``."""
    return f"{numeric.value:g}{unit_word(numeric)}"


def tolerance_text(numeric: Numeric, exactly: str) -> str:
    """``2%``, or the word for exactly when the tolerance is 0."""
    return exactly if numeric.tolerance == 0 else f"{100 * numeric.tolerance:g}%"


def option_value(option: str, numeric: Numeric) -> float | None:
    """The number an option states, in ``numeric.unit`` (to tell which mistake a typed
    answer matches); None for options that are not a plain number."""
    return parse_typed(option.split(":")[0], numeric)
