"""Right-to-left layout of Urdu text that contains Latin runs and numbers.

A renderer picks a paragraph's direction from its first strong character, so an Urdu sentence
that starts with ``Korthikanti`` or ``ZeRO-Offload`` is laid out left to right, and a run such
as ``16-bit`` between Urdu words shows as ``bit-16``. The fix (Unicode Bidirectional Algorithm,
UAX #9): start each Urdu paragraph with RIGHT-TO-LEFT MARK (U+200F), and wrap each Latin run or
number in LEFT-TO-RIGHT ISOLATE (U+2066) ... POP DIRECTIONAL ISOLATE (U+2069) so its inner order
is kept and it moves as one unit. HTML gets ``dir="rtl"`` and ``<bdi>`` instead (``export.py``).
"""

from __future__ import annotations

import re

RLM = "\u200f"
"""RIGHT-TO-LEFT MARK: makes the paragraph's first strong character right-to-left."""
LRI = "\u2066"
"""LEFT-TO-RIGHT ISOLATE: opens a left-to-right run that does not affect its neighbours."""
PDI = "\u2069"
"""POP DIRECTIONAL ISOLATE: closes the run."""

_STRONG = (
    "A-Za-z0-9\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u0370-\u03ff\u00b2\u00b3\u00b9"
    "\u1d2c-\u1d6a\u2070-\u209f\u221a"
)
"""Latin and Greek letters (not × or ÷), ASCII digits, superscripts and subscripts (ᵀ, ⁻⁵),
√: a run starts here."""
_INNER = _STRONG + r" .,:/\\+\-−–×·=%^_'()\[\]{}*<>≈≤≥~|#&@!?"
"""What a run may contain between its first and last character."""
_RUN = re.compile(f"(?:--(?=[A-Za-z])|[+\\-−±≈~<>≤≥](?=[0-9]))?[{_STRONG}][{_INNER}]*")
_TAIL = " .,:/\\+-−–×·=^_'(\\[{*<>≈≤≥~|#&@!?"
"""Characters a run may contain but not end with (a balanced closing bracket and % may)."""
_PAIRS = {")": "(", "]": "[", "}": "{"}


def _balance(run: str) -> str:
    """``run`` cut before its first bracket whose partner lies outside it."""
    open_at: list[tuple[str, int]] = []
    for i, ch in enumerate(run):
        if ch in "([{":
            open_at.append((ch, i))
        elif ch in _PAIRS:
            if not open_at or open_at[-1][0] != _PAIRS[ch]:
                return run[:i]
            open_at.pop()
    return run[: open_at[0][1]] if open_at else run


def _trim(run: str) -> str:
    """Drop trailing neutrals (spaces, commas, a full stop) and brackets whose partner is
    outside the run, so that ``adamw)`` in ``(بیچ 1، adamw)`` isolates only ``adamw``."""
    while True:
        trimmed = _balance(run).rstrip(_TAIL)
        if trimmed == run:
            return run
        run = trimmed


def segments(text: str) -> list[tuple[bool, str]]:
    """``text`` cut into (is_left_to_right, piece) pieces, in order; joined they give
    ``text`` back.

    >>> [piece for ltr, piece in segments("ہر 16-bit ٹینسر (بیچ 1، bf16-mixed)") if ltr]
    ['16-bit', '1', 'bf16-mixed']
    >>> "".join(piece for _, piece in segments("ہر 16-bit ٹینسر")) == "ہر 16-bit ٹینسر"
    True
    """
    out: list[tuple[bool, str]] = []
    pos, start = 0, 0
    while (m := _RUN.search(text, start)) is not None:
        run = _trim(m.group(0))
        if not run:  # only neutrals after trimming: look again after this character
            start = m.start() + 1
            continue
        if m.start() > pos:
            out.append((False, text[pos : m.start()]))
        out.append((True, run))
        pos = start = m.start() + len(run)
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


def isolate(text: str) -> str:
    """Each Latin run and number of ``text`` wrapped in LRI ... PDI.

    >>> isolate("16-bit گریڈینٹس") == LRI + "16-bit" + PDI + " گریڈینٹس"
    True
    """
    return "".join(f"{LRI}{piece}{PDI}" if ltr else piece for ltr, piece in segments(text))


def rtl_line(line: str) -> str:
    """One line of Urdu for a terminal: RLM first, then the line with its runs isolated; an
    empty line stays empty."""
    if not line.strip():
        return line
    return RLM + isolate(line)


def rtl_text(text: str) -> str:
    """Every line of ``text`` marked as a right-to-left paragraph (a terminal line is a
    paragraph to the bidi algorithm)."""
    return "\n".join(rtl_line(line) for line in text.split("\n"))


def strip_marks(text: str) -> str:
    """``text`` without the marks this module adds (to compare with unmarked text)."""
    return text.translate({ord(RLM): None, ord(LRI): None, ord(PDI): None})
