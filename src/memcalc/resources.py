"""Where the data folders (profiles/, quiz/) are: inside the installed package, or at the top of
the source checkout (editable installs and running from the repository)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT_ROOT = _PACKAGE.parents[1]


def data_dir(folder: str) -> Path:
    """``profiles`` or ``quiz``: the copy a wheel ships as ``memcalc/_profiles`` (``_quiz``),
    else the folder at the top of the checkout."""
    packaged = _PACKAGE / f"_{folder}"
    if packaged.is_dir():
        return packaged
    return _CHECKOUT_ROOT / folder
