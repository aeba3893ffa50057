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
_RUN = re.compile(
    "(?:--(?=[A-Za-z])|[+\\-−±≈~<>≤≥](?=[0-9])|(?:~|\\.{1,2}|\\$)?/(?=[A-Za-z0-9_.~])|\\$(?=[A-Z_{]))?"
    f"[{_STRONG}][{_INNER}]*"
)
"""A Latin run: an optional lead that belongs to it (a flag's ``--``, a number's sign, a
path's leading ``/``, ``./``, ``~/`` or ``$VAR``), a strong character, then what may follow."""
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


_ABBREVIATIONS = ("et al.", "e.g.", "i.e.", "etc.", "vs.", "cf.")
"""Latin abbreviations whose full stop belongs to them: kept inside the run, so that in an
Urdu sentence the period of ``Chen et al.`` stays beside ``al`` instead of moving to the far
side of the isolate."""


def _trim(run: str) -> str:
    """Drop trailing neutrals (spaces, commas, a full stop) and brackets whose partner is
    outside the run, so that ``adamw)`` in ``(بیچ 1، adamw)`` isolates only ``adamw``; the
    full stop of an abbreviation (``et al.``) stays."""
    while True:
        balanced = _balance(run)
        kept = next((a for a in _ABBREVIATIONS if balanced.rstrip(" ,").endswith(a)), None)
        if kept is not None:
            trimmed = balanced.rstrip(" ,")
        else:
            trimmed = balanced.rstrip(_TAIL)
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


_BLOCK_MARKER = re.compile(r"^(\s*(?:#{1,6} |[-*+] |\d+\. |> )?(?:\*\*)?)(.*)$", re.S)
"""The Markdown syntax that opens a line: a heading's ``#``, a list item's ``- ``, a quote's
``> ``, and a bold run's opening ``**``."""


def rtl_markdown_line(line: str) -> str:
    """One line of Urdu Markdown: the mark after the line's own syntax (``## ``, ``- ``,
    ``**``), which CommonMark must see first to find a heading, a list item or emphasis, then
    the text with its runs isolated.

    >>> rtl_markdown_line("## سوال 1") == "## " + RLM + "سوال " + LRI + "1" + PDI
    True
    """
    if not line.strip():
        return line
    match = _BLOCK_MARKER.match(line)
    assert match is not None  # the pattern matches every line
    prefix, rest = match.groups()
    return prefix + RLM + isolate(rest)


def rtl_markdown(text: str) -> str:
    """Every line of a Markdown document marked right-to-left (``rtl_markdown_line``)."""
    return "\n".join(rtl_markdown_line(line) for line in text.split("\n"))


def rtl_table(table: str) -> str:
    r"""A table in tabulate's ``simple`` format (a dashed line under the headers) with every
    row a right-to-left paragraph and each cell's runs isolated on their own: a row whose
    first cell is Latin (``LoRA``) keeps its columns in the order of the others, where one
    isolate over the whole row would lay it out left to right.

    >>> rows = rtl_table("topic  seen\n-----  ----\nLoRA   1/3").split("\n")
    >>> rows[2] == RLM + LRI + "LoRA" + PDI + "   " + LRI + "1/3" + PDI
    True
    """
    lines = table.split("\n")
    if len(lines) < 2 or not re.fullmatch(r"[- ]+", lines[1]):
        return rtl_text(table)
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]
    out = []
    for index, line in enumerate(lines):
        if index == 1 or not line.strip():
            out.append(line)
            continue
        pieces, pos = [], 0
        for start, end in spans:
            pieces += [line[pos:start], isolate(line[start:end])]
            pos = end
        pieces.append(isolate(line[pos:]))
        out.append(RLM + "".join(pieces))
    return "\n".join(out)


def strip_marks(text: str) -> str:
    """``text`` without the marks this module adds (to compare with unmarked text)."""
    return text.translate({ord(RLM): None, ord(LRI): None, ord(PDI): None})
