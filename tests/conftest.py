import json
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
