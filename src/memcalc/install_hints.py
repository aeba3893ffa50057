"""What to install for the optional commands, named once.

The distribution is published as ``memcalc-train`` (the name ``memcalc`` on the public package
index belongs to an unrelated calculator); the import and the command stay ``memcalc``. A bare
``torch`` requirement pulls a CUDA build of several GB, so the hints name PyTorch's CPU-only
wheel index for machines without a GPU (https://pytorch.org/get-started/locally/).
"""

from __future__ import annotations

DISTRIBUTION = "memcalc-train"
TORCH_CPU = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
TORCH = f"{TORCH_CPU} (CPU-only; on a GPU machine the CUDA build from pytorch.org)"
TRANSFORMERS = f"pip install '{DISTRIBUTION}[hf]' (after {TORCH_CPU} on a CPU-only machine)"
PEFT = "pip install peft"


def torch_missing(command: str) -> str:
    """The one line a torch-only command prints when torch is not installed."""
    return f"memcalc {command} needs torch: {TORCH}"
