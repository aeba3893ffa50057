"""A benchmark that needs optional packages says so in one line and exits 2, instead of
failing on an import deep inside memcalc."""

from __future__ import annotations

import importlib.util
import sys

HINTS = {
    "torch": "pip install torch --index-url https://download.pytorch.org/whl/cpu  (or the CUDA "
    "build you use)",
    "transformers": "pip install transformers",
    "torchtitan": "pip install -e '.[torchtitan]'",
    "deepspeed": "DS_BUILD_OPS=0 pip install --no-build-isolation torch==2.13.0 -e '.[deepspeed]'",
}


def require(*modules: str) -> None:
    """Exit with a one-line message when any of ``modules`` is not installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        hints = "; ".join(HINTS.get(m, f"pip install {m}") for m in missing)
        name = sys.argv[0].rsplit("/", 1)[-1]
        print(f"{name} needs {', '.join(missing)}: {hints}", file=sys.stderr)
        sys.exit(2)
