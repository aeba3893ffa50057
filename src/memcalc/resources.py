"""Where the data folders (profiles/, quiz/) are: inside the wheel, or at the checkout's top."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_CHECKOUT_ROOT = Path(__file__).resolve().parents[2]


def data_dir(folder: str) -> Path:
    """``profiles`` or ``quiz``: the packaged copy (``memcalc._profiles``) if installed as a
    wheel, else the folder at the top of the source checkout."""
    checkout = _CHECKOUT_ROOT / folder
    if checkout.is_dir():
        return checkout
    try:
        packaged = resources.files(f"memcalc._{folder}")
        return Path(str(packaged))
    except ModuleNotFoundError:  # pragma: no cover - broken install
        return checkout
