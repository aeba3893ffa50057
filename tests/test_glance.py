"""Issue 13, everyday use: the default tables fit the terminal under a one-line verdict
(``--wide``: every column), the detailed view indents the activations' parts, CSV and
markdown are what they say, and every command has ``-h``, ``--version`` and an example."""

import csv
import io

import pytest
from click.testing import CliRunner

from memcalc.cli import app
from memcalc.cli import main as cli_main

WIDTHS = (80, 120)
"""Terminal widths the default tables must fit."""


def invoke(*args, columns=None):
    env = {"COLUMNS": str(columns)} if columns else {"COLUMNS": None}
    result = CliRunner().invoke(app, list(args), env=env)
    return result


@pytest.mark.parametrize("columns", WIDTHS)
def test_default_estimate_table_fits_the_terminal(columns):
    r = invoke(
        "estimate", "--model", "llama-3-8b", "--gpu", "h100", "--seq", "8192", columns=columns
    )
    assert r.exit_code == 0, r.output
    widest = max(len(line) for line in r.output.splitlines())
    assert widest <= columns
    header = next(line for line in r.output.splitlines() if line.startswith("strategy"))
    for column in ("peak", "reserved", "fits", "added"):
        assert column in header
    assert "optimizer" not in header and "params" not in header


def test_wide_has_every_column_and_is_not_fitted():
    r = invoke("estimate", "--model", "llama-3-8b", "--seq", "8192", "--wide", columns=80)
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if line.startswith("strategy"))
    for column in ("params", "grads", "optimizer", "activations", "transient", "overhead"):
        assert column in header
    assert max(len(line) for line in r.output.splitlines()) > 80


def test_verdict_line_names_the_cheapest_strategy_that_fits():
    # llama-3-8b at seq 8192 on 8 H100s under ZeRO-3: states fit, the activations do not;
    # full recompute is the cheapest that fits (+32% step time at the default MFU)
    r = invoke(
        "estimate",
        "--model",
        "llama-3-8b",
        "--seq",
        "8192",
        "--gpus",
        "8",
        "--zero",
        "3",
        columns=200,
    )
    lines = r.output.splitlines()
    verdict = lines[lines.index("") + 1]  # the paragraph under the header
    assert verdict.startswith("Fits with full recompute: +")
    assert "step time" in verdict and "the cheapest of the" in verdict


def test_verdict_when_everything_fits_says_nothing_is_needed():
    r = invoke("estimate", "--model", "gpt2", columns=200)
    assert "Fits with no recompute or offload: reserved" in r.output


def test_verdict_when_nothing_fits_names_the_closest_miss():
    r = invoke("estimate", "--model", "llama-3-70b", "--gpu", "4090", columns=200)
    assert "Nothing fits. Closest:" in r.output
    assert "memcalc plan" in r.output


def test_detailed_view_indents_the_activations_parts():
    r = invoke("estimate", "--model", "llama-2-7b", "--recompute", "full", columns=120)
    lines = r.output.splitlines()
    stored = next(i for i, line in enumerate(lines) if line.startswith("activations (stored)"))
    assert lines[stored + 1].startswith("  of which ")


@pytest.mark.parametrize("columns", WIDTHS)
def test_default_plan_table_fits_the_terminal(columns):
    r = invoke("plan", "--model", "llama-2-7b", "--seq", "4096", "--max-gpus", "8", columns=columns)
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= columns
    assert "--wide" in r.output


def test_plan_wide_has_the_step_parts():
    r = invoke("plan", "--model", "llama-2-7b", "--seq", "4096", "--max-gpus", "8", "--wide")
    header = next(line for line in r.output.splitlines() if line.startswith("#"))
    for column in ("ZeRO", "free", "+recomp", "+bubble", "+comm", "+offload"):
        assert column in header


@pytest.mark.parametrize("unit", ["gb", "GB", "gib"])
def test_enum_values_are_case_insensitive(unit):
    r = invoke("estimate", "--unit", unit, "--format", "JSON")
    assert r.exit_code == 0, r.output


def test_csv_honours_the_unit_and_names_model_and_gpu():
    r = invoke("estimate", "--model", "gpt2", "--gpu", "a100", "--unit", "GB", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert rows and rows[0]["model"] == "gpt2" and rows[0]["gpu"] == "a100-sxm-80gb"
    for row in rows:
        assert float(row["peak_GB"]) == pytest.approx(int(row["peak_bytes"]) / 1e9, abs=1e-4)
    plan = invoke("plan", "--model", "gpt2", "--max-gpus", "2", "--unit", "GiB", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(plan.output)))
    assert rows[0]["model"] == "gpt2"
    assert float(rows[0]["peak_GiB"]) == pytest.approx(int(rows[0]["peak_bytes"]) / 2**30, abs=1e-4)


@pytest.mark.parametrize(
    "args",
    [
        ("estimate",),
        ("estimate", "--recompute", "full"),
        ("plan", "--model", "gpt2", "--max-gpus", "2"),
    ],
)
def test_markdown_is_markdown_from_the_first_line(args):
    r = invoke(*args, "--format", "markdown")
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("**") and first.endswith("**")
    assert any(line.startswith("|") for line in r.output.splitlines())


COMMANDS = [
    ("estimate",),
    ("plan",),
    ("profiles",),
    ("profiles", "list"),
    ("profiles", "show"),
    ("models",),
    ("models", "list"),
    ("quiz",),
    ("measure",),
    ("trace",),
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_short_help_an_example_and_version(command, capsys):
    code = cli_main([*command, "-h"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Examples:" in out and f"memcalc {command[0]}" in out.split("Examples:")[1]
    assert cli_main([*command, "--version"]) == 0
    assert "memcalc, version" in capsys.readouterr().out


def test_top_level_help_has_each_summary_whole(capsys):
    from memcalc.cli import COMMANDS as SUMMARIES

    assert cli_main(["-h"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for _, _, summary in SUMMARIES.values():
        assert summary in out
    assert "fewest GPUs of each kind" in out
