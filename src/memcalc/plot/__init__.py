"""Charts of an estimate or a plan (``--plot FILE``): the memory at the peak per strategy or
per ranked configuration, stacked by component, against the GPU's memory; one strategy's step
timeline. The drawing (``charts.py``) needs matplotlib, the ``plot`` extra, and is imported
only when a chart is drawn; this module checks the request without it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from memcalc.errors import MemcalcError
from memcalc.install_hints import DISTRIBUTION
from memcalc.units import Unit

if TYPE_CHECKING:
    from memcalc.estimate import Breakdown
    from memcalc.plan import PlanResult

FORMATS = (".png", ".svg", ".html")
"""What ``--plot`` writes, by the file's extension (.html: the SVG in a minimal page)."""
EXTRA = f"pip install '{DISTRIBUTION}[plot]' (in a checkout '.[plot]', or just matplotlib)"
"""How to install what charts need."""


def check_path(path: str | Path, flag: str = "--plot") -> Path:
    """``path`` when memcalc can draw to it (a known extension, matplotlib installed), else
    a one-line MemcalcError naming what to change -- before anything is computed."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise MemcalcError(
            f"{flag}: cannot write {path.name!r}; the file must end in one of: "
            + ", ".join(FORMATS)
        )
    if path.parent and not path.parent.is_dir():
        raise MemcalcError(f"{flag}: {path.parent} is not a folder")
    if importlib.util.find_spec("matplotlib") is None:
        raise MemcalcError(f"{flag}: charts need matplotlib, the plot extra: {EXTRA}")
    return path


def plot_estimate(rows: list[Breakdown], path: str | Path, unit: Unit, *, detail: bool) -> Path:
    """The strategy chart of ``rows`` (stacked bars), or with ``detail`` the step timeline of
    the first; written to ``path``, which is returned."""
    charts = _charts()
    path = check_path(path)
    figure = charts.timeline(rows[0], unit) if detail else charts.strategies(rows, unit)
    charts.save(figure, path)
    return path


def plot_plan(result: PlanResult, path: str | Path, unit: Unit) -> Path:
    """The plan's ranked configurations as stacked bars, written to ``path``."""
    charts = _charts()
    path = check_path(path)
    charts.save(charts.plan(result, unit), path)
    return path


def _charts() -> ModuleType:
    """``charts.py`` (it imports matplotlib)."""
    try:
        from memcalc.plot import charts
    except ImportError as e:  # matplotlib missing, or broken
        raise MemcalcError(
            f"--plot: charts need matplotlib, the plot extra: {EXTRA} ({e})"
        ) from None
    return charts
