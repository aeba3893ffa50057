"""Shared helpers of the quiz tests: the quiz command run by click's test runner, a study
sheet as JSON, the real CLI entry point, a fixture that keeps progress files out of the user's home,
and a parser for the sizes options print."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memcalc.cli import main
from memcalc.cli.quiz import quiz as quiz_click

ROOT = Path(__file__).resolve().parents[1]

UNIT_BYTES = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "bytes": 1, "بائٹس": 1}
SIZE = re.compile(r"^([\d,]+(?:\.(\d+))?) (GiB|MiB|KiB|bytes|بائٹس)")


def quiz(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:  # noqa: A002
    """Run ``memcalc quiz ARGS`` with ``input`` on stdin (not a terminal: no wrapping unless
    COLUMNS is given, no pause, no progress file unless --progress)."""
    return CliRunner().invoke(
        quiz_click, list(args), input=input, env={"COLUMNS": None, **(env or {})}
    )


def reveal(*args: str, lang: str = "en") -> dict:
    """The study sheet as JSON: the questions a run with the same flags asks, and answers."""
    result = quiz(*args, "--reveal", "--format", "json", "--lang", lang)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The real command line (``memcalc.cli.main``): exit code, stdout, stderr."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def size_of(text: str) -> tuple[float, float]:
    """The bytes a printed size stands for, and half its last digit (the rounding)."""
    match = SIZE.match(text)
    assert match, f"not a size: {text!r}"
    number, decimals, unit = match.groups()
    unit_bytes = UNIT_BYTES[unit]
    digits = len(decimals or "")
    return float(number.replace(",", "")) * unit_bytes, 0.5 * 10**-digits * unit_bytes


def shows(text: str, num_bytes: int | float) -> bool:
    """True when ``text`` (a size as printed) is ``num_bytes`` rounded (compared in exact
    decimals: a figure exactly half-way, printed rounded up, is shown)."""
    match = SIZE.match(text)
    assert match, f"not a size: {text!r}"
    number, decimals, unit = match.groups()
    value = Decimal(number.replace(",", "")) * UNIT_BYTES[unit]
    half_ulp = Decimal(5).scaleb(-len(decimals or "") - 1) * UNIT_BYTES[unit]
    return abs(value - Decimal(num_bytes)) <= half_ulp


@pytest.fixture
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$XDG_STATE_HOME`` in a temporary folder (the default progress file lands there),
    and no ``$COLUMNS``."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.delenv("COLUMNS", raising=False)
    return state
