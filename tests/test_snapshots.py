"""Engine changes that must not change a number: the JSON of every README example (whole) and of
a grid of presets x setups x strategies (hashed) equals the snapshot in tests/snapshots/.

A deliberate change of output regenerates the snapshot (``python tests/snapshots/cases.py``)
in the same commit, which says what changed and why.
"""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "snapshots"))
import cases  # noqa: E402

SNAPSHOT = json.loads(cases.SNAPSHOT.read_text())


@pytest.fixture(autouse=True)
def _at_repository_root(monkeypatch):
    monkeypatch.chdir(cases.ROOT)


@pytest.mark.parametrize("command", cases.README_CASES)
def test_readme_example_json_is_unchanged(command):
    code, data = cases.run_json(command)
    assert code == 0
    want = SNAPSHOT["readme"][command]
    assert cases.numbers(data, want) == want


def test_grid_json_is_unchanged():
    changed = []
    for command in cases.grid_cases():
        code, data = cases.run_json(command)
        got = cases.digest(data) if code == 0 else f"exit {code}"
        if got != SNAPSHOT["grid"][command]:
            changed.append(command)
    assert not changed, f"{len(changed)} outputs changed, e.g. {changed[:3]}"


def test_layout_json_is_unchanged():
    """The whole JSON of every preset under parallel layouts, offload and fine-tuning (times,
    layout, stages and assumptions included), and of a few plans."""
    changed, missing = [], []
    for command in cases.layout_cases():
        want = SNAPSHOT["layouts"].get(command)
        if want is None:
            missing.append(command)
            continue
        code, data = cases.run_json(command)
        got = cases.full_digest(data) if code == 0 else f"exit {code}"
        if got != want:
            changed.append(command)
    assert not missing, f"{len(missing)} cases not in the snapshot, e.g. {missing[:3]}"
    assert not changed, f"{len(changed)} outputs changed, e.g. {changed[:3]}"


@pytest.mark.parametrize("command", cases.TEXT_CASES)
def test_printed_text_is_unchanged(command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    code, out = cases.run_text(command)
    got = cases.text_digest(out) if code == 0 else f"exit {code}"
    assert got == SNAPSHOT["text"][command], out
