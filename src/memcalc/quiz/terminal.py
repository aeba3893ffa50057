"""Laying quiz text out on a terminal: wrap to its width without breaking words, and mark
Urdu lines right-to-left with their Latin runs isolated (``bidi.py``).

The width is ``$COLUMNS`` when set, else the terminal's width when output goes to a
terminal; output to a pipe or file is not wrapped (a transcript keeps one paragraph per line).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from dataclasses import dataclass

from memcalc.quiz.bank import Lang
from memcalc.quiz.bidi import rtl_line

_HANGING = re.compile(r"^(\s*(?:\S{1,2}\)\s|\(\S{1,3}\)\s)?)")
"""The indent of a wrapped line's continuation: the leading spaces, and an option's letter."""


def terminal_width() -> int | None:
    """Columns to wrap at: ``$COLUMNS``, or the terminal's when stdout is one, else None."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


_UNITS = (
    "GiB|MiB|KiB|TiB|GB|MB|kB|TB|GB/s|bytes|byte|بائٹس|بائٹ|ms|µs|s|B|M|K|"
    "PFLOP|TFLOP|GFLOP|MFLOP|FLOPs|FLOP|tokens|blocks|layers"
)
_NUMBER_UNIT = re.compile(rf"(\d) (?=(?:{_UNITS})(?![\w]))")
"""A number followed by its unit: the space between them is not a place to wrap."""
_GLUE = "\ue000"
"""A private-use character that stands for that space while a paragraph is wrapped."""


@dataclass(frozen=True)
class Screen:
    """How one quiz prints: its language and the width to wrap at (None: do not wrap)."""

    lang: Lang
    width: int | None = None

    def lines(self, text: str) -> list[str]:
        """``text`` as terminal lines: each paragraph wrapped, Urdu lines marked."""
        out: list[str] = []
        for paragraph in text.split("\n"):
            out += self._wrap(paragraph)
        return [rtl_line(line) for line in out] if self.lang is Lang.ur else out

    def text(self, text: str) -> str:
        """``text`` laid out for the terminal."""
        return "\n".join(self.lines(text))

    def prompt(self, text: str) -> str:
        """A prompt (not wrapped, so the cursor stays after it), marked in Urdu."""
        return rtl_line(text) if self.lang is Lang.ur else text

    def _wrap(self, paragraph: str) -> list[str]:
        if self.width is None or len(paragraph) <= self.width or not paragraph.strip():
            return [paragraph]
        indent = _HANGING.match(paragraph)
        hanging = " " * len(indent.group(1)) if indent else ""
        # a number and its unit are one word for the wrapping (720.53 MiB never splits)
        glued = _NUMBER_UNIT.sub(lambda m: m.group(1) + _GLUE, paragraph)
        lines = textwrap.wrap(
            glued,
            width=max(self.width, len(hanging) + 10),
            subsequent_indent=hanging,
            break_long_words=False,
            break_on_hyphens=False,
        )
        return [line.replace(_GLUE, " ") for line in lines]
