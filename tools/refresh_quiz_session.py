"""Rerun the README's example quiz session with the answers it shows and paste the new
transcript in place (after a change of wording or of the estimate's numbers).

Run: python tools/refresh_quiz_session.py   (tests/test_quiz.py checks the result)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from quiz_helpers import quiz  # noqa: E402

README = ROOT / "README.md"


def main() -> None:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"(<!-- example-session -->\s*```text\n)(.*?)(```)", text, re.S)
    if block is None:
        raise SystemExit("README.md: no ```text block after <!-- example-session -->")
    first, _, transcript = block.group(2).partition("\n")
    args = first.removeprefix("$ memcalc quiz ").split()
    typed = re.findall(r"^(?:Your answer \(a-d, q to quit\): )(.*)$", transcript, re.M)
    result = quiz(*args, input="".join(f"{t}\n" for t in typed))
    if result.exit_code:
        raise SystemExit(f"quiz exited {result.exit_code}: {result.output}")
    new = block.group(1) + first + "\n" + result.stdout.rstrip("\n") + "\n" + block.group(3)
    README.write_text(text[: block.start()] + new + text[block.end() :], encoding="utf-8")
    print("README.md example session refreshed")


if __name__ == "__main__":
    main()
