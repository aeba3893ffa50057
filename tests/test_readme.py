"""Every `memcalc` command shown in the README runs and exits 0."""

import re
import shlex
from pathlib import Path

import pytest

from memcalc.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
NEEDS_TORCH = ("measure", "trace")


def _commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    lines = [ln.split("  #")[0].strip() for b in blocks for ln in b.splitlines()]
    return [ln for ln in lines if ln.startswith("memcalc ")]


def test_readme_has_examples():
    assert len(_commands()) >= 15


@pytest.mark.parametrize("command", _commands())
def test_readme_command_runs(command, capsys, monkeypatch):
    args = shlex.split(command)[1:]
    if args[0] in NEEDS_TORCH:
        pytest.skip(
            "real training steps / traces: covered with small models in "
            "test_measure.py and test_trace.py"
        )
    if args[0] == "quiz" and "--reveal" not in args and "--answers" not in args:
        monkeypatch.setattr("sys.stdin", __import__("io").StringIO("a\n"))
        args += ["--count", "1"]
    monkeypatch.chdir(README.parent)
    assert main(args) == 0, capsys.readouterr().err
