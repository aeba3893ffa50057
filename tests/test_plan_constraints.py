"""memcalc plan's constraints (issue 23): fixed degrees or sets, ZeRO / recompute / offload
choices, step-time and throughput limits, impractical configurations, eager attention without
context parallelism, per-kind answers -- each checked on every row the plan returns."""

import json

import pytest

from memcalc.cli import main
from memcalc.errors import MemcalcError
from memcalc.plan.constraints import parse_constraints


def _plan(capsys, *argv):
    code = main(["plan", *argv, "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def _rows(out):
    rows = list(out["rows"])
    rows += [g["fewest"] for g in out["gpus"] if g["fewest"]]
    return rows


BASE = ("--model", "llama-2-7b", "--gpu", "h100", "--seq", "4096", "--max-gpus", "16")


def test_degrees_and_strategies_are_kept_to_the_sets_given(capsys):
    out = _plan(
        capsys, *BASE, "--tp", "2,4", "--zero", "1,3", "--no-offload", "--recompute", "none,full"
    )
    rows = _rows(out)
    assert rows
    for row in rows:
        assert row["layout"]["tp"] in (2, 4)
        assert row["layout"]["dp"] == 1 or row["layout"]["zero"] in (1, 3)
        assert row["offload"] == []
        assert row["recompute"] in ("none", "full")
    assert "tp in {2, 4}" in out["constraints"]


def test_offload_combinations_and_fixed_pipeline(capsys):
    out = _plan(capsys, *BASE, "--pp", "1", "--offload", "optimizer=cpu")
    for row in _rows(out):
        assert row["layout"]["pp"] == 1
        assert row["offload"] == ["optimizer=cpu"]


def test_step_time_and_throughput_limits_hold_for_every_row(capsys):
    out = _plan(capsys, *BASE, "--max-step-time", "2s", "--min-tokens-per-s", "5000/gpu")
    rows = _rows(out)
    assert rows
    for row in rows:
        assert row["step_seconds"] <= 2.0
        assert row["tokens_per_second_per_gpu"] >= 5000
    out = _plan(capsys, *BASE, "--min-tokens-per-s", "100k")
    for row in _rows(out):
        assert row["tokens_per_step"] / row["step_seconds"] >= 100_000


def test_eager_attention_leaves_context_parallel_layouts_out(capsys):
    out = _plan(capsys, "--model", "gpt2", "--attention", "eager", "--max-gpus", "8")
    assert all(row["layout"]["cp"] == 1 for row in _rows(out))
    assert out["min_gpus"]["h100-sxm-80gb"] == 1


def test_impractical_configurations_are_not_the_headline(capsys):
    """Llama-2-7B fits one H100 only with its optimizer on the CPU: a step of ~16 s for 4096
    tokens, under a tenth of the 8-GPU rate -- named in one line, offered with --impractical."""
    code = main(["plan", *BASE])
    text = capsys.readouterr().out
    assert code == 0
    assert "impractical" in text and "--impractical" in text
    out = _plan(capsys, *BASE)
    kind = out["gpus"][0]
    assert kind["impractical"]["gpus"] == 1 and out["min_gpus"]["h100-sxm-80gb"] > 1
    shown = _plan(capsys, *BASE, "--impractical")
    assert shown["min_gpus"]["h100-sxm-80gb"] == 1


def test_each_kind_gets_its_fastest_and_fewest_line(capsys):
    code = main(
        [
            "plan",
            "--model",
            "llama-2-7b",
            "--gpu",
            "h100",
            "--gpu",
            "a100",
            "--seq",
            "4096",
            "--max-gpus",
            "16",
        ]
    )
    text = " ".join(capsys.readouterr().out.split())
    assert code == 0
    for name in ("NVIDIA H100 SXM5 80GB", "NVIDIA A100 SXM4 80GB"):
        assert f"{name}: fewest GPUs" in text
        assert f"{name}: fastest within 16 GPUs" in text


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--tp", "4;8", "--tp: expected whole numbers"),
        ("--zero", "4", "--zero: expected whole numbers from 0 to 3"),
        ("--recompute", "some", "--recompute: unknown value 'some'"),
        ("--offload", "activations=nvme", "--offload: activations=nvme is not modelled"),
        ("--offload", "params=cpu+optimizer=nvme+activations=cpu", "--offload: unknown value"),
        ("--max-step-time", "soon", "--max-step-time: cannot read 'soon'"),
        ("--min-tokens-per-s", "lots", "--min-tokens-per-s: cannot read"),
    ],
)
def test_bad_constraints_are_one_line_errors(capsys, flag, value, message):
    code = main(["plan", "--model", "gpt2", flag, value])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: {message}") and err.count("\n") == 1


def test_no_offload_and_offload_are_exclusive():
    with pytest.raises(MemcalcError, match="--no-offload: give --no-offload or --offload"):
        parse_constraints(offload=["optimizer=cpu"], no_offload=True)
