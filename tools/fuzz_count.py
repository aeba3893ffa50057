"""Count the fuzz suite's generated cases and the ones that break a promise of issue 12.

    python tools/fuzz_count.py [pytest args...]

Runs ``pytest tests/fuzz`` with ``MEMCALC_FUZZ_LOG`` set (every case is logged, none fails a
test or is shrunk) and prints: cases run, cases failed, and the failures by kind
(``MEMCALC_FUZZ_KEEP=path`` keeps the log of every case).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "cases.jsonl"
        env = os.environ | {"MEMCALC_FUZZ_LOG": str(log)}
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/fuzz"]
        subprocess.run([*args, *sys.argv[1:]], cwd=root, env=env, check=False)
        cases = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        keep = os.environ.get("MEMCALC_FUZZ_KEEP")
        if keep and log.exists():
            Path(keep).write_text(log.read_text())
    failed = [c for c in cases if c["problems"]]
    print(f"fuzz cases run: {len(cases)}, failed: {len(failed)}")
    kinds = collections.Counter(c["problems"][0].split(":")[0][:60] for c in failed)
    for kind, n in kinds.most_common():
        print(f"  {n:5d}  {kind}")
    tests = collections.Counter(c["test"].split("::")[-1].split("[")[0] for c in failed)
    for test, n in tests.most_common():
        print(f"  {n:5d}  {test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
