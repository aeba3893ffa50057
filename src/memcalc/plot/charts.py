"""The charts, drawn with matplotlib's object-oriented API (a ``Figure`` of its own: no
pyplot, no global state, no display needed). Imported only to draw (``memcalc.plot``)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from html import escape
from pathlib import Path

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from memcalc.estimate import Breakdown
from memcalc.plan import PlanResult
from memcalc.report.plan import layout_label
from memcalc.timeline import Moment
from memcalc.units import Unit, to_unit

COMPONENTS = ("parameters", "gradients", "optimizer", "activations", "transient", "overhead")
"""The stack, bottom up: what the GPU holds at a moment of the step."""
COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")
"""One colour per component (seaborn's "deep" palette: distinct in print and for the
common colour-vision deficiencies)."""
BAR_WIDTH = 0.7
FIGURE_INCHES = (9.0, 5.0)
PNG_DPI = 150


def _parts(m: Moment, overhead: int) -> tuple[int, ...]:
    """The bytes of each of COMPONENTS at moment ``m`` (their sum: the moment's total plus
    the runtime overhead, so the peak moment's stack is ``peak_bytes``)."""
    return (
        m.parameter_bytes,
        m.gradient_bytes,
        m.optimizer_bytes,
        m.activation_bytes,
        m.transient_bytes,
        overhead,
    )


def _stack(
    ax: Axes, x: Sequence[float], parts: Sequence[Sequence[int]], unit: Unit, width: float
) -> None:
    """Bars at ``x``, one per item of ``parts`` (bytes per component), stacked bottom up."""
    bottom = [0.0] * len(x)
    for i, (name, colour) in enumerate(zip(COMPONENTS, COLOURS, strict=True)):
        heights = [to_unit(p[i], unit) for p in parts]
        ax.bar(x, heights, width, bottom=bottom, label=name, color=colour, linewidth=0)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]


def _memory_lines(ax: Axes, b: Breakdown, unit: Unit) -> None:
    """The GPU's memory (solid) and what a configuration may use of it (dashed)."""
    u = unit.value
    ax.axhline(
        to_unit(b.gpu.memory_bytes, unit),
        color="black",
        linewidth=1.2,
        label=f"{b.gpu.name} memory ({to_unit(b.gpu.memory_bytes, unit):.2f} {u})",
    )
    ax.axhline(
        to_unit(b.usable_bytes, unit),
        color="black",
        linewidth=1.0,
        linestyle="--",
        label=f"usable ({b.headroom_fraction:.0%} kept free)",
    )


def _legend(ax: Axes) -> None:
    """Outside the axes on the right; the components top-down, as they are stacked."""
    handles, labels = ax.get_legend_handles_labels()
    order = [i for i, label in enumerate(labels) if label not in COMPONENTS]
    order += [labels.index(c) for c in reversed(COMPONENTS) if c in labels]
    ax.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
    )


def _figure(title: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=FIGURE_INCHES, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def strategies(rows: Sequence[Breakdown], unit: Unit) -> Figure:
    """``memcalc estimate``'s strategies: the GPU's bytes at each one's peak moment, by
    component, beside the GPU's memory; "fits" or "NO" over each bar."""
    b = rows[0]
    fig, ax = _figure(
        f"{b.model_name} on {b.gpu.display_name}: memory at the peak of the step, per strategy"
    )
    x = list(range(len(rows)))
    _stack(ax, x, [_parts(r.peak, r.overhead_bytes) for r in rows], unit, BAR_WIDTH)
    for i, r in enumerate(rows):
        ax.annotate(
            "fits" if r.fits else "NO",
            (i, to_unit(r.peak_bytes, unit)),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
    _memory_lines(ax, b, unit)
    ax.set_xticks(x, [r.strategy for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"{unit.value} on one GPU at the peak")
    _legend(ax)
    return fig


def timeline(b: Breakdown, unit: Unit) -> Figure:
    """One strategy's step: the GPU's bytes at each moment (forward, loss, each block's
    backward, the optimizer step), by component, the peak marked."""
    moments = b.timeline.moments()
    fig, ax = _figure(f"{b.model_name}, {b.strategy}: bytes on one GPU over the step")
    x = list(range(len(moments)))
    _stack(ax, x, [_parts(m, b.overhead_bytes) for m in moments], unit, 1.0)
    peak = max(x, key=lambda i: moments[i].total_bytes)
    ax.annotate(
        f"peak {to_unit(b.peak_bytes, unit):.2f} {unit.value}: {moments[peak].where}",
        (peak, to_unit(moments[peak].total_bytes + b.overhead_bytes, unit)),
        xytext=(0, 6),
        textcoords="offset points",
        # the text runs away from the nearer edge, so it stays inside the axes
        ha="right" if peak > len(moments) / 2 else "left",
        fontsize=8,
    )
    _memory_lines(ax, b, unit)
    spans: list[tuple[str, int, int]] = []  # (phase, first moment, last moment)
    for i, m in enumerate(moments):
        if spans and spans[-1][0] == m.phase:
            spans[-1] = (m.phase, spans[-1][1], i)
        else:
            spans.append((m.phase, i, i))
    for _, first, _ in spans[1:]:
        ax.axvline(first - 0.5, color="grey", linewidth=0.6, linestyle=":")
    ax.set_xticks(
        [(first + last) / 2 for _, first, last in spans],
        [phase for phase, _, _ in spans],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    ax.set_xlabel("moments of the step (forward, then backward from the last block)")
    ax.set_ylabel(f"{unit.value} on one GPU")
    ax.set_xlim(-0.5, len(moments) - 0.5)
    _legend(ax)
    return fig


def plan(result: PlanResult, unit: Unit) -> Figure:
    """``memcalc plan``'s ranked configurations: each one's peak per GPU by component, and
    the memory its GPU kind may use (a line per bar: kinds differ)."""
    rows = result.rows
    fig, ax = _figure(
        f"{result.request.spec.name}: peak per GPU of the ranked configurations (fastest left)"
    )
    x = list(range(len(rows)))
    _stack(
        ax,
        x,
        [_parts(r.breakdown.peak, r.breakdown.overhead_bytes) for r in rows],
        unit,
        BAR_WIDTH,
    )
    usable = [to_unit(r.breakdown.usable_bytes, unit) for r in rows]
    headroom = {f"{r.breakdown.headroom_fraction:.0%}" for r in rows}
    ax.hlines(
        usable,
        [i - 0.5 for i in x],
        [i + 0.5 for i in x],
        colors="black",
        linestyles="--",
        linewidth=1.0,
        label=f"usable GPU memory ({', '.join(sorted(headroom))} kept free)",
    )
    labels = [
        f"#{i + 1} {r.gpus} x {r.breakdown.gpu.name}\n{layout_label(r.breakdown)}, "
        f"ZeRO-{r.breakdown.setup.parallel.zero}\n{r.breakdown.strategy}"
        for i, r in enumerate(rows)
    ]
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(f"{unit.value} per GPU at the peak")
    _legend(ax)
    return fig


def save(fig: Figure, path: Path) -> None:
    """Write ``fig`` as the file's extension says: PNG, SVG (text kept as text, no date, so
    the labels can be searched and the file is reproducible) or an HTML page holding the
    SVG."""
    suffix = path.suffix.lower()
    if suffix == ".png":
        fig.savefig(path, format="png", dpi=PNG_DPI, metadata={"Software": None})
        return
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "memcalc"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    if suffix == ".svg":
        path.write_text(svg, encoding="utf-8")
        return
    title = escape(fig.axes[0].get_title()) if fig.axes else "memcalc"
    body = svg[svg.index("<svg") :]  # the page is the document: drop the XML prologue
    path.write_text(
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{title}</title>\n</head>\n<body>\n{body}\n</body>\n</html>\n",
        encoding="utf-8",
    )
