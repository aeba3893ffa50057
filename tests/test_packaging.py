"""A non-editable install (a wheel) ships the data folders and finds them."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_ships_profiles_and_quiz_bank(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("memcalc_train-*.whl"))  # the distribution memcalc-train
    names = zipfile.ZipFile(wheel).namelist()
    profiles = {Path(n).name for n in names if n.startswith("memcalc/_profiles/")}
    quiz = {Path(n).name for n in names if n.startswith("memcalc/_quiz/")}
    assert profiles == {p.name for p in (ROOT / "profiles").glob("*.toml")}
    assert quiz == {p.name for p in (ROOT / "quiz").glob("*.toml")}
    assert "memcalc/measure/trace/__init__.py" in names
    # every module of the source tree ships (a package missing from pyproject would not)
    sources = {str(p.relative_to(ROOT / "src")) for p in (ROOT / "src" / "memcalc").rglob("*.py")}
    assert sources <= set(names), sorted(sources - set(names))
