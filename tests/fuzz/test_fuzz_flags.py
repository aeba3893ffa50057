"""Every flag of every torch-free command with generated bad values (issue 12): each run
exits 0 or 2, prints no traceback, and an error is one ``error:`` line naming the flag."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import click
import pytest
from fuzz_harness import PROFILES, check, profile
from hypothesis import given
from hypothesis import strategies as st

from memcalc.cli import COMMANDS

ODD_TEXT = [
    "",
    " ",
    "0",
    "-0",
    "-1",
    "1.5",
    "0.0",
    "-0.0",
    "1e-320",
    "5e-324",
    "1e400",
    "-1e400",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "true",
    "false",
    "None",
    "null",
    "1" + "0" * 200,
    "9" * 5000,
    "9223372036854775807",
    "18446744073709551616",
    "0x10",
    "1_000",
    "²",
    "١٢",
    "1e9",
    "1e15",
    "10%",
    "-10%",
    "1000%",
    "nan%",
    "a=b",
    "optimizer=",
    "=cpu",
    "optimizer=cpu=cpu",
    "x" * 300,
    "\x00",
    "é",
    "GiB",
    "1e400GiB",
    "-5GB",
    "0GiB",
]
"""Values any flag might get: numbers at and past every edge, non-numbers, odd text."""


def odd_values() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(ODD_TEXT),
        st.integers(min_value=-(10**30), max_value=10**30).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(max_size=20),
    )


BASE = {
    "estimate": ["estimate"],
    "plan": ["plan", "--max-gpus", "2", "--top", "2"],
    "quiz": ["quiz", "--answers", "a", "--count", "1", "--format", "json", "--seed", "1"],
    "profiles show": ["profiles", "show"],
    "profiles list": ["profiles", "list"],
    "models list": ["models", "list"],
}
"""The command line each case adds one flag to (plan kept small so a case stays fast)."""

SLOW_VALID = {("plan", "--max-gpus"), ("plan", "--top"), ("plan", "--global-batch")}
"""Flags whose valid values can make a case slow: only bad values are generated for them."""


def _not_a_large_count(value: str) -> bool:
    try:
        return not 2 < float(value) <= 10**6
    except (ValueError, OverflowError):
        return True


def _command(name: str) -> click.Command:
    head = name.split()[0]
    module, attribute, _ = COMMANDS[head]
    cmd = getattr(importlib.import_module(module), attribute)
    if " " in name:
        assert isinstance(cmd, click.Group)
        cmd = cmd.commands[name.split()[1]]
    return cmd


NON_FINITE = {"nan", "inf", "-inf", "infinity", "-infinity", "1e400", "-1e400"}
NUMERIC = {"--budget", "--gpu-memory", "--host-memory", "--headroom", "--global-tokens"}
"""Flags read as numbers besides those click types as int or float."""


def _numeric(command: str, flag: str) -> bool:
    for param in _command(command).params:
        if isinstance(param, click.Option) and param.opts[0] == flag:
            return flag in NUMERIC or isinstance(
                param.type, (click.types.IntParamType, click.types.FloatParamType)
            )
    return False


def expected(command: str, flag: str, value: str) -> bool | None:
    """False where any valid reading is impossible (a non-finite number for a number flag);
    None where the value may be valid."""
    v = value.strip().lower().rstrip("%").removesuffix("gib")
    if _numeric(command, flag) and (v in NON_FINITE or v.lstrip("-").isdigit() and len(v) > 100):
        return False
    return None


def _flags() -> list[tuple[str, str, tuple[str, ...]]]:
    """(command, flag, every spelling of it) for each option that takes a value."""
    out = []
    for name in BASE:
        for param in _command(name).params:
            if isinstance(param, click.Option) and not param.is_flag and param.name != "help":
                out.append((name, param.opts[0], tuple(param.opts + param.secondary_opts)))
    return out


FLAGS = _flags()
PROGRESS = str(Path(tempfile.mkdtemp(prefix="memcalc-fuzz-")) / "quiz.json")
"""The quiz's progress file for this run (a fresh folder: a path outside any writable folder
is created by a root user, and kept between runs, a later version then reads it)."""


def _names(spellings: tuple[str, ...]) -> list[str]:
    """What an error about this flag may name: a spelling, or its field (``batch``)."""
    return [*spellings, *(s.lstrip("-").replace("-", "_") for s in spellings)]


def _args(command: str, flag: str, value: str) -> list[str]:
    base = list(BASE[command])
    if command == "quiz" and flag == "--progress":
        return [*base, flag, value]
    if command == "quiz":
        base += ["--progress", PROGRESS]
    if flag in base:  # replace the base's value of this flag
        i = base.index(flag)
        del base[i : i + 2]
    return [*base, f"{flag}={value}"]


@pytest.mark.parametrize("profile_name", PROFILES)
@pytest.mark.parametrize(
    ("command", "flag", "spellings"), FLAGS, ids=[f"{c}:{f}" for c, f, _ in FLAGS]
)
def test_every_flag_with_odd_values(profile_name, command, flag, spellings, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative --progress path is written here, not in the repo
    values = odd_values()
    if (command, flag) in SLOW_VALID:
        values = values.filter(_not_a_large_count)

    @profile(profile_name, examples=12)
    @given(value=values)
    def run(value: str) -> None:
        check(
            _args(command, flag, value),
            names=_names(spellings),
            valid=expected(command, flag, value),
        )

    run()


@pytest.mark.parametrize("profile_name", PROFILES)
def test_estimate_flag_combinations(profile_name):
    """Several odd flags at once: whichever is reported, it is one of them."""
    estimate = [(f, s) for c, f, s in FLAGS if c == "estimate"]

    @profile(profile_name)
    @given(
        picks=st.lists(st.tuples(st.sampled_from(estimate), odd_values()), min_size=2, max_size=4),
        fmt=st.sampled_from(["table", "json"]),
    )
    def run(picks, fmt):
        argv = ["estimate", "--format", fmt]
        names: list[str] = []
        for (flag, spellings), value in picks:
            argv += [f"{flag}={value}"]
            names += _names(spellings)
        check(
            argv,
            names=names,
            json_out=fmt == "json" and "--format" not in [f for (f, _), _ in picks],
        )

    run()


def _whole(text: str, lo: int, hi: int) -> bool:
    try:
        return lo <= int(text) <= hi
    except ValueError:
        return False


RECOMPUTE = ["none", "selective", "full", "every-k", "budget", "bogus"]


@pytest.mark.parametrize("profile_name", PROFILES)
def test_strategy_flags_together(profile_name):
    """--recompute with --every / --budget / repeated --offload: a flag with no effect, a
    conflicting repeat or an out-of-range k is an error naming that flag."""

    @profile(profile_name, examples=100)
    @given(
        recompute=st.sampled_from(RECOMPUTE),
        every=st.one_of(
            st.none(),
            st.none(),
            st.integers(-3, 40).map(str),
            st.sampled_from(["-0", "0", "+1", "1e400", "nan", "1.5"]),
        ),
        budget=st.one_of(
            st.none(),
            st.none(),
            st.sampled_from(["1GiB", "100MiB", "2e9", "0", "1e400", "nan", "-1GB", "inf"]),
        ),
        offload=st.lists(
            st.sampled_from(
                ["optimizer=cpu", "optimizer=nvme", "params=cpu", "activations=cpu", "x=y"]
            ),
            max_size=2,
        ),
        model=st.sampled_from(["gpt2", "llama-2-7b"]),
        fmt=st.sampled_from(["table", "json"]),
    )
    def run(recompute, every, budget, offload, model, fmt):
        blocks = {"gpt2": 12, "llama-2-7b": 32}[model]
        bad = (
            recompute == "bogus"
            or every is not None
            and (recompute != "every-k" or not _whole(every, 1, blocks))
            or budget is not None
            and recompute != "budget"
            or len({o.split("=")[0] for o in offload}) < len(offload)
            or "x=y" in offload
        )
        argv = ["estimate", "--model", model, "--recompute", recompute, "--format", fmt]
        if every is not None:
            argv.append(f"--every={every}")
        if budget is not None:
            argv.append(f"--budget={budget}")
        for o in offload:
            argv += ["--offload", o]
        check(
            argv,
            names=["--recompute", "--every", "--budget", "--offload"],
            valid=False if bad else None,
        )

    run()


@pytest.mark.parametrize("profile_name", PROFILES)
def test_valid_setups_give_strict_finite_json(profile_name):
    """Setups within every bound: exit 0 (or 2 where the model cannot run them, e.g. a
    sequence past its position table), and JSON with finite numbers only."""
    from memcalc.spec.presets import PRESETS

    @profile(profile_name, examples=30)
    @given(
        model=st.sampled_from(sorted(PRESETS)),
        batch=st.integers(1, 64),
        seq=st.sampled_from([1, 7, 128, 1024, 2048, 4096]),
        recompute=st.sampled_from(["none", "selective", "full", "every-k"]),
        mfu=st.floats(0.001, 1.0),
        gpu=st.sampled_from(["h100", "a100", "4090", "mi300x"]),
        command=st.sampled_from(["estimate", "plan"]),
    )
    def run(model, batch, seq, recompute, mfu, gpu, command):
        argv = [command, "--model", model, "--batch", str(batch), "--seq", str(seq)]
        argv += ["--mfu", repr(mfu), "--gpu", gpu, "--format", "json"]
        if command == "estimate":
            argv += ["--recompute", recompute]
        else:
            argv += ["--max-gpus", "2", "--top", "2"]
        check(argv, names=["--model", "--batch", "--seq", "--gpu", "seq", "batch"], json_out=True)

    run()
