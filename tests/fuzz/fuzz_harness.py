"""Run one memcalc invocation in-process and check the promises of the input and output
boundaries (issue 12): exit 2 (or 0 for valid input), no traceback, one ``error:`` line naming
the flag or file, strict JSON with finite numbers where JSON was asked, input files unchanged.

With ``MEMCALC_FUZZ_LOG=path`` a broken promise is written to that file (one JSON line per
case) instead of failing the test, so that ``tools/fuzz_count.py`` can count how many of the
generated cases break one.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import re
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

# Hypothesis profiles: ``ci`` (the default: a fixed, derandomized number of examples per
# test, the whole suite within about a minute) and ``slow`` (ten times as many, random; the
# ``slow``-marked copy of each property, ``pytest -m slow tests/fuzz``).
_QUIET = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.data_too_large,
    HealthCheck.function_scoped_fixture,
]

settings.register_profile(
    "ci",
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=_QUIET,
    print_blob=False,
)
settings.register_profile(
    "slow",
    max_examples=400,
    derandomize=False,
    database=None,
    deadline=None,
    suppress_health_check=_QUIET,
)
# counting mode (tools/fuzz_count.py): every generated case runs, none is shrunk
settings.register_profile(
    "count",
    parent=settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.generate],
)

CASE_SECONDS = 20
"""A case running longer than this is a hang (the promise: bounded work)."""

_NONFINITE = re.compile(r"(?<![\w.])-?(inf|nan|infinity)(?![\w])", re.IGNORECASE)

PROFILES = ["ci", pytest.param("slow", marks=pytest.mark.slow)]
"""Parametrize a property over these: the CI profile, and the slow one for local runs."""


def profile(name: str, examples: int | None = None) -> settings:
    """The settings of profile ``name``; ``examples``: this test's CI example count (the slow
    profile runs ten times as many)."""
    if os.environ.get("MEMCALC_FUZZ_LOG") and name == "ci":
        name = "count"
    base = settings.get_profile(name)
    if examples is None:
        return base
    return settings(base, max_examples=examples * (10 if name == "slow" else 1))


class _Hang(BaseException):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Hang


@dataclass
class Outcome:
    argv: list[str]
    code: int | None
    out: str
    err: str
    escaped: str = ""
    problems: list[str] = field(default_factory=list)


def invoke(argv: Sequence[str]) -> Outcome:
    """``memcalc ARGV`` through the real entry point, stdout and stderr captured."""
    from memcalc.cli import main

    out, err = io.StringIO(), io.StringIO()
    escaped = ""
    code: int | None = None
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    except _Hang:
        escaped = f"hang (over {CASE_SECONDS} s)"
    except BaseException as e:  # noqa: B036 - anything escaping main breaks the promise
        escaped = f"{type(e).__name__}: {str(e)[:200]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return Outcome(list(argv), code, out.getvalue(), err.getvalue(), escaped)


def _digest(paths: Iterable[Path]) -> dict[Path, str | None]:
    result: dict[Path, str | None] = {}
    for p in paths:
        try:
            result[p] = hashlib.sha256(p.read_bytes()).hexdigest()
        except OSError:
            result[p] = None
    return result


def _strict_json(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"non-finite JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _finite(value: object, where: str = "$") -> list[str]:
    if isinstance(value, float) and not math.isfinite(value):
        return [f"non-finite number at {where}"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _finite(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _finite(v, f"{where}[{i}]")]
    return []


def problems(
    result: Outcome,
    *,
    names: Iterable[str],
    valid: bool | None = None,
    json_out: bool = False,
) -> list[str]:
    """What is wrong with ``result``. ``names``: the flag or file the error must name (any
    one of them); ``valid``: True must exit 0, False must exit 2, None either."""
    found: list[str] = []
    if result.escaped:
        return [f"escaped main: {result.escaped}"]
    text = result.out + result.err
    if "Traceback" in text:
        found.append("traceback printed")
    allowed = {True: {0}, False: {2}, None: {0, 2}}[valid]
    if result.code not in allowed:
        found.append(f"exit code {result.code}, expected {sorted(allowed)}")
    errors = [line for line in result.err.splitlines() if line.startswith("error:")]
    if result.code == 2:
        if len(errors) != 1:
            found.append(f"{len(errors)} error: lines, expected 1")
        elif names and not any(n in errors[0] for n in names):
            found.append(f"error line names none of {sorted(set(names))}")
    elif result.code == 0:
        if errors:
            found.append("exit 0 with an error: line")
        if json_out:
            try:
                found.extend(_finite(_strict_json(result.out)))
            except ValueError as e:
                found.append(f"output is not strict JSON: {str(e)[:100]}")
        else:
            echoed = result.out  # the user's own words (a file named NAN.json) do not count
            for arg in sorted(result.argv, key=len, reverse=True):
                if len(arg) > 1:
                    echoed = echoed.replace(arg, " ")
            bad = _NONFINITE.search(echoed)
            if bad:
                found.append(f"non-finite number in the output: {bad.group()!r}")
    return found


def check(
    argv: Sequence[str],
    *,
    names: Iterable[str] = (),
    valid: bool | None = None,
    files: Iterable[Path] = (),
    json_out: bool | None = None,
) -> Outcome:
    """Run ``argv`` and assert the promises (or log the broken ones, see the module doc)."""
    files = list(files)
    before = _digest(files)
    result = invoke(argv)
    if json_out is None:
        json_out = "json" in [a.lower() for a in argv]
    found = problems(result, names=list(names), valid=valid, json_out=json_out)
    if _digest(files) != before:
        found.append("an input file changed")
    result.problems = found
    log = os.environ.get("MEMCALC_FUZZ_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            record = {
                "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                "argv": [a[:200] for a in argv],
                "problems": found,
                "err": result.err[-300:],
            }
            f.write(json.dumps(record) + "\n")
        return result
    assert not found, (
        f"memcalc {' '.join(a[:80] for a in argv)}\n  problems: {found}\n"
        f"  exit: {result.code}\n  stderr: {result.err[-600:]}\n  stdout: {result.out[-300:]}"
    )
    return result
