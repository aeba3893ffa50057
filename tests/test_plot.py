"""``--plot FILE`` on estimate and plan (issue 13): every chart kind rendered to every format,
the files checked (size, and for SVG the labels); a missing plot extra or a bad name is one
line and exit 2, before anything is computed."""

import importlib.util
import re

import pytest

from conftest import run_cli

pytest.importorskip("matplotlib", reason="the plot extra: pip install -e '.[plot]'")

MIN_BYTES = {".png": 20_000, ".svg": 10_000, ".html": 10_000}
"""A chart with its bars, lines and labels is well over these (an empty figure is ~2-5 kB)."""
COMPONENTS = ("parameters", "gradients", "optimizer", "activations", "transient", "overhead")

ESTIMATE = ("estimate", "--model", "llama-3-8b", "--gpu", "h100", "--seq", "8192")
PLAN = ("plan", "--model", "llama-2-7b", "--seq", "4096", "--max-gpus", "8")


def _svg_text(path):
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("suffix", [".png", ".svg", ".html"])
@pytest.mark.parametrize(
    "kind, args",
    [
        ("strategies", ESTIMATE),
        ("timeline", (*ESTIMATE, "--recompute", "full")),
        ("plan", PLAN),
    ],
)
def test_every_chart_renders_to_every_format(tmp_path, kind, args, suffix):
    path = tmp_path / f"{kind}{suffix}"
    r = run_cli(*args, "--plot", str(path))
    assert r.exit_code == 0, r.stderr
    assert f"chart: {path}" in r.stderr
    assert path.stat().st_size > MIN_BYTES[suffix]
    if suffix == ".png":
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        return
    text = _svg_text(path)
    if suffix == ".html":
        assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "</html>" in text
    for label in COMPONENTS:
        assert re.search(rf">\s*{label}\s*<", text), label  # text kept as text
    if kind == "timeline":
        assert "peak 165.53 GiB" in text and "backward" in text
    else:
        assert "usable" in text
    if kind == "strategies":
        assert "h100-sxm-80gb memory (79.19 GiB)" in text
        for strategy in ("selective", "offload optimizer=cpu"):
            assert strategy in text


def test_the_svg_is_reproducible(tmp_path):
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    run_cli(*ESTIMATE, "--plot", str(a))
    run_cli(*ESTIMATE, "--plot", str(b))
    assert a.read_bytes() == b.read_bytes()


def test_a_file_memcalc_cannot_draw_is_one_line_exit_2(tmp_path):
    r = run_cli(*ESTIMATE, "--plot", str(tmp_path / "chart.pdf"))
    assert r.exit_code == 2
    assert r.stderr.strip().count("\n") == 0
    assert ".png, .svg, .html" in r.stderr


def test_without_matplotlib_the_error_names_the_extra(tmp_path, monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "matplotlib" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    for args in (ESTIMATE, PLAN):
        r = run_cli(*args, "--plot", str(tmp_path / "chart.svg"))
        assert r.exit_code == 2
        assert r.stderr.startswith("error: --plot: charts need matplotlib")
        assert "'.[plot]'" in r.stderr and r.stdout == ""
    assert not (tmp_path / "chart.svg").exists()


def test_a_plan_where_nothing_fits_draws_nothing_and_says_so(tmp_path):
    path = tmp_path / "plan.svg"
    r = run_cli("plan", "--model", "llama-3-70b", "--gpu", "4090", "--max-gpus", "1",
                "--plot", str(path))  # fmt: skip
    assert r.exit_code == 0
    assert "nothing fits" in r.stderr and not path.exists()
