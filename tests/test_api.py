"""The Python API (issue 13): ``memcalc.estimate`` / ``memcalc.plan`` take the command line's
strings and give what the commands print, ``to_dict()`` is their JSON, docs/api.md runs as
written, and ``import memcalc`` (and the JSON path of ``memcalc estimate``) stays cheap."""

import doctest
import json
import subprocess
import sys
from pathlib import Path

import pytest

import memcalc
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


def test_docs_api_md_runs_as_written():
    result = doctest.testfile(
        str(ROOT / "docs" / "api.md"), module_relative=False, optionflags=doctest.ELLIPSIS
    )
    assert result.attempted > 10 and result.failed == 0


@pytest.mark.parametrize("module", ["memcalc.api", "memcalc.report.records", "memcalc.units"])
def test_docstring_examples_run(module):
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_estimate_to_dict_is_the_commands_json():
    b = memcalc.estimate(
        "llama-3-8b", gpu="h100", seq=8192, recompute="full", offload=["optimizer=cpu"]
    )
    r = run_cli(
        "estimate", "--model", "llama-3-8b", "--gpu", "h100", "--seq", "8192",
        "--recompute", "full", "--offload", "optimizer=cpu", "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0
    assert b.to_dict() == json.loads(r.stdout)
    assert isinstance(b, memcalc.estimate.Breakdown)


def test_a_plain_estimate_is_the_tables_first_row():
    b = memcalc.estimate("gpt2")
    table = json.loads(run_cli("estimate", "--model", "gpt2", "--format", "json").stdout)
    assert b.to_dict()["strategies"][0] == table["strategies"][0]


def test_plan_to_dict_is_the_commands_json():
    p = memcalc.plan("llama-2-7b", gpu="h100", seq=4096, max_gpus=8)
    r = run_cli(
        "plan", "--model", "llama-2-7b", "--gpu", "h100", "--seq", "4096", "--max-gpus", "8",
        "--format", "json",
    )  # fmt: skip
    want, got = json.loads(r.stdout), p.to_dict()
    for d in (want, got):
        d.pop("search_seconds")  # wall time of the search
    assert got == want


def test_strings_as_the_command_line_takes_them():
    a = memcalc.estimate("Llama-3-8B", gpu="H100", recompute="every-k", every=4)
    b = memcalc.estimate("llama-3-8b", gpu="h100-sxm-80gb", recompute="every-k", every="4")
    assert a.peak_bytes == b.peak_bytes
    c = memcalc.estimate("gpt2", offload="activations=cpu", recompute="full", headroom="20%")
    assert c.options.headroom == 0.2 and c.host_bytes > 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"recompute": "fulll"}, "--recompute"),
        ({"sequence": 4096}, "unknown option 'sequence'"),
        ({"gpu": "h1000"}, "--gpu"),
        ({"offload": ["optimizer=gpu"]}, "--offload"),
    ],
)
def test_bad_values_raise_the_commands_one_line(kwargs, message):
    with pytest.raises(memcalc.MemcalcError, match="^.*" + message.replace("-", r"\-")) as e:
        memcalc.estimate("gpt2", **kwargs)
    assert "\n" not in str(e.value)


def test_estimate_and_plan_stay_submodules():
    from memcalc.estimate import Options
    from memcalc.plan import PlanRequest

    assert Options().recompute.value == "none" and PlanRequest is not None
    assert callable(memcalc.estimate) and callable(memcalc.plan)


def _imported(code: str) -> set[str]:
    """Top-level module names ``python -X importtime -c code`` imports."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stderr
    return {line.split("|")[-1].strip() for line in out.splitlines() if "|" in line}


def test_import_memcalc_loads_nothing_else():
    mods = _imported("import memcalc")
    assert {m for m in mods if m.startswith("memcalc.")} == set()
    assert not {"click", "pydantic", "tabulate", "matplotlib", "torch"} & mods


def test_estimate_json_path_imports_no_tabulate_matplotlib_or_torch():
    mods = _imported(
        "import sys; from memcalc.cli import main; "
        "sys.exit(main(['estimate', '--model', 'llama-3-8b', '--format', 'json']))"
    )
    assert "memcalc.estimate" in mods
    assert not {"tabulate", "matplotlib", "torch", "rich"} & mods


def test_the_readme_python_api_example_runs_and_says_true():
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"## Python API.*?```python\n(.*?)```", readme, re.S)
    scope: dict = {}
    exec(block, scope)
    b = scope["b"]
    # the comment beside ``b.fits, b.peak_bytes, b.optimizer_bytes`` is the real value
    shown = re.search(r"# \((True|False), (\d+), (\d+)\)", block)
    assert shown is not None
    assert (str(b.fits), str(b.peak_bytes), str(b.optimizer_bytes)) == shown.groups()
    assert scope["p"].fastest is not None


def test_the_api_leaves_the_commands_short_help_alone(capsys):
    from memcalc.cli import main

    memcalc.estimate("gpt2")
    memcalc.plan("gpt2", max_gpus=1)
    assert main(["estimate", "-h"]) == 0 and main(["plan", "-h"]) == 0
    assert "Examples:" in capsys.readouterr().out
