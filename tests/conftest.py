import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if "slow" not in (config.getoption("markexpr") or ""):
        # the default run stays within its CI budget; `pytest -m slow` runs these
        slow = pytest.mark.skip(reason="slow: run with -m slow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(slow)
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def reference_cases():
    """Measured HF GPT-2 training steps (copied from shared/reference, protocol in its README)."""
    return json.loads((DATA / "gpt2-cases.json").read_text())


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> CliResult:
    """``memcalc ARGS`` in-process, through the real entry point (its error handling)."""
    from memcalc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return CliResult(code, out.getvalue(), err.getvalue())
