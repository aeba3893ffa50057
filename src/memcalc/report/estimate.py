"""``memcalc estimate``'s output: the strategy table (a narrow view that fits the terminal
under a one-line verdict, or every column with ``--wide``) and one strategy's detailed
breakdown, as a table, JSON, CSV or markdown."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from memcalc.estimate import Breakdown, Options
from memcalc.profiles import GpuProfile
from memcalc.report.finite import dumps
from memcalc.report.records import (
    Format,
    breakdown_record,
    csv_row,
    estimate_record,
    fmt_bytes,
    strategies_record,
    to_csv,
    verdict_text,
)
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute
from memcalc.units import Unit, format_flops, format_seconds

MEMORY_COLUMNS = (
    "params",
    "grads",
    "optimizer",
    "activations",
    "transient",
    "overhead",
    "peak",
    "reserved",
    "headroom",
    "host",
)
"""Columns in bytes: their header carries the unit."""
NARROW_COLUMNS = ("strategy", "peak", "reserved", "fits", "added time")
"""The default table: what decides a strategy at a glance."""
WIDE_COLUMNS = (
    "strategy",
    *MEMORY_COLUMNS[:6],
    "peak",
    "reserved",
    "headroom",
    "host",
    "extra compute",
    "added time",
    "fits",
)
"""``--wide``: every column."""
MIN_WRAP_WIDTH = 12
"""The narrowest a wrapped column (the strategy's name) is made to fit a terminal."""


def strategy_rows(
    run: Callable[[Options], Breakdown],
    num_blocks: int,
    setup: TrainingSetup,
    options: Options | None,
    gpu: GpuProfile | None = None,
) -> list[Breakdown]:
    """The breakdowns to show: every default strategy when none was chosen (those ``gpu``'s
    server can run), else the one."""
    from memcalc.strategies.selection import default_strategies

    if options is not None:
        return [run(options)]
    return [run(o) for o in default_strategies(num_blocks, setup, gpu)]


def render_estimate(
    run: Callable[[Options], Breakdown],
    num_blocks: int,
    setup: TrainingSetup,
    options: Options | None,
    fmt: Format,
    unit: Unit,
    hint: str = "",
    *,
    wide: bool = False,
    width: int | None = None,
) -> str:
    """The strategy table when no strategy was chosen, else the detailed breakdown; ``hint``
    (the plan command that answers it) is printed under a table where nothing fits."""
    rows = strategy_rows(run, num_blocks, setup, options)
    return render_breakdowns(
        rows, detail=options is not None, fmt=fmt, unit=unit, hint=hint, wide=wide, width=width
    )


def render_breakdowns(
    rows: list[Breakdown],
    *,
    detail: bool,
    fmt: Format,
    unit: Unit,
    hint: str = "",
    wide: bool = False,
    width: int | None = None,
) -> str:
    """``rows`` as the strategy table, or (``detail``) the first one in detail. Text is
    wrapped to ``width`` columns (None: not wrapped); markdown is never wrapped."""
    if fmt is Format.markdown:
        width = None
    if detail:
        text = render_detail(rows[0], fmt, unit, width=width)
    else:
        text = render_strategies(rows, fmt, unit, wide=wide, width=width)
    if hint and not any(b.fits for b in rows) and fmt in (Format.table, Format.markdown):
        command = f"`{hint}`" if fmt is Format.markdown else hint
        text += f"\n\nNothing here fits. To search GPU counts, layouts and offloads: {command}"
    return text


def describe(b: Breakdown) -> str:
    """The strategy in words: ``full recompute + offload activations=cpu``."""
    o = b.options
    parts = []
    if o.recompute is not Recompute.none:
        every = o.recompute is Recompute.every_k and o.every
        parts.append(f"{f'every-{o.every}' if every else o.recompute.value} recompute")
    if o.offload:
        parts.append("offload " + ", ".join(x.label for x in o.offload))
    return " + ".join(parts) or "no recompute or offload"


def added_time(b: Breakdown) -> str:
    """``+378.8 ms (+32%)``: ``b.time.added_seconds`` (what ``plan`` ranks by) and its share
    of the bare compute; ``-`` when nothing is added."""
    t = b.time
    if t is None or t.added_seconds <= 0:
        return "-"
    share = ""
    if t.compute_seconds:
        times = t.added_seconds / t.compute_seconds
        share = f" (+{times:.0%})" if times < 10 else f" (+{times:.0f}x)"
    return f"+{format_seconds(t.added_seconds)}{share}"


def glance(rows: Sequence[Breakdown], unit: Unit) -> str:
    """One line above the strategy table: the cheapest strategy that fits (the one ``plan``
    would pick: least added time, then the simpler), or the closest miss."""
    from memcalc.plan.strategies import cheapest_fit

    best = cheapest_fit(rows)
    u = unit.value
    if best is None:
        closest = min(rows, key=lambda b: (b.over_gpu_bytes, b.over_host_bytes + b.over_nvme_bytes))
        why = verdict_text(closest, unit).removeprefix("DOES NOT FIT: ")
        return f"Nothing fits. Closest: {describe(closest)} -- {why}."
    what = "reserved" if best.reserved.modelled else "peak"
    used = fmt_bytes(best.reserved_total_bytes, unit)
    peak = f"{what} {used} of {fmt_bytes(best.usable_bytes, unit)} {u}"
    others = sum(b.fits for b in rows) - 1
    also = f"; {others} other strateg{'y fits' if others == 1 else 'ies fit'}" if others else ""
    if best.time is None or best.time.added_seconds <= 0:
        return f"Fits with {describe(best)}: {peak} usable{also}."
    cost = f"{added_time(best)} step time, {peak} usable"
    if not others:
        return f"Fits only with {describe(best)}: {cost}."
    return f"Fits with {describe(best)}: {cost}; the cheapest of the {others + 1} that fit."


def _fits(b: Breakdown) -> str:
    if b.fits:
        return "yes"
    if b.over_gpu_bytes:
        return "NO"
    return "NO: host RAM" if b.over_host_bytes else "NO: NVMe"


def _cells(b: Breakdown, unit: Unit) -> dict[str, str]:
    extra = (
        f"+{b.extra_flops_fraction:.0%} ({format_seconds(b.extra_seconds)})"
        if b.extra_forward_flops
        else "-"
    )
    offloaded = b.host_bytes + b.nvme_bytes
    return {
        "strategy": b.strategy,
        "params": fmt_bytes(b.parameter_bytes, unit),
        "grads": fmt_bytes(b.gradient_bytes, unit),
        "optimizer": fmt_bytes(b.optimizer_bytes, unit),
        "activations": fmt_bytes(b.activation_bytes, unit),
        "transient": fmt_bytes(b.transient_bytes, unit),
        "overhead": fmt_bytes(b.overhead_bytes, unit),
        "peak": fmt_bytes(b.peak_bytes, unit),
        "reserved": fmt_bytes(b.reserved_total_bytes, unit) if b.reserved.modelled else "-",
        "headroom": fmt_bytes(b.headroom_bytes, unit),
        "host": fmt_bytes(offloaded, unit) if offloaded else "-",
        "extra compute": extra,
        "added time": added_time(b),
        "fits": _fits(b),
    }


def fit_table(
    rows: list[list[str]],
    headers: list[str],
    *,
    tablefmt: str,
    width: int | None,
    wrap: int | Sequence[int] = 0,
    preserve_whitespace: bool = False,
) -> str:
    """``tabulate``'s table, fitted to ``width`` columns when it is wider: first the headers
    wrap at their spaces, then the columns ``wrap`` (in that order) at their spaces, each
    down to its longest word or MIN_WRAP_WIDTH (the wrapping is tabulate's:
    ``maxheadercolwidths``, ``maxcolwidths``). A table that cannot be made narrow enough
    stays wider."""
    from tabulate import tabulate

    def table(**wrapping: Any) -> str:
        return tabulate(
            rows,
            headers=headers,
            tablefmt=tablefmt,
            disable_numparse=True,
            preserve_whitespace=preserve_whitespace,
            **wrapping,
        )

    text = table()
    if not width or _widest(text) <= width or not rows:
        return text
    words = [max(map(len, h.split())) for h in headers]
    text = table(maxheadercolwidths=words)
    over = _widest(text) - width
    if over <= 0:
        return text
    limits: list[int | None] = [None] * len(headers)
    for column in [wrap] if isinstance(wrap, int) else wrap:
        cells = [r[column] for r in rows]
        longest = max(map(len, cells))
        longest_word = max(len(w) for c in cells for w in [*c.split(), ""])
        narrowest = max(MIN_WRAP_WIDTH, longest_word, words[column])
        cut = max(0, min(over, longest - narrowest))
        if cut:
            limits[column] = longest - cut
            over -= cut
        if over <= 0:
            break
    return table(maxheadercolwidths=words, maxcolwidths=limits, break_long_words=False)


def _widest(text: str) -> int:
    return max(map(len, text.splitlines()))


def _wrap(text: str, width: int | None) -> str:
    return textwrap.fill(text, width) if width else text


def parameter_words(b: Breakdown) -> str:
    """The model's parameters, and this rank's share when the layout splits them.

    >>> from memcalc.api import estimate
    >>> b = estimate("llama-3-70b", seq=8192, tp=8, pp=4, dp=2, microbatches=16, zero=1)
    >>> parameter_words(b)
    '70,553,706,496 parameters; 2,271,543,296 on this rank'
    """
    whole = b.model_parameter_count
    if whole is None or whole == b.params.total:
        return f"{b.params.total:,} parameters"
    return f"{whole:,} parameters; {b.params.total:,} on this rank"


def _header(b: Breakdown, unit: Unit) -> str:
    s = b.setup
    return (
        f"{b.model_name} ({parameter_words(b)}) on {b.gpu.display_name} "
        f"({fmt_bytes(b.gpu.memory_bytes, unit)} {unit.value}); batch {s.batch} x seq {s.seq}, "
        f"{s.precision.value}, {s.optimizer.value}, attention {s.attention.value}. "
        f"Memory in {unit.value}."
    )


def _heading(text: str, fmt: Format, width: int | None) -> str:
    """The first line: bold in markdown (every line of it is markdown), else wrapped."""
    return f"**{text}**" if fmt is Format.markdown else _wrap(text, width)


def render_strategies(
    rows: list[Breakdown],
    fmt: Format,
    unit: Unit,
    *,
    wide: bool = False,
    width: int | None = None,
) -> str:
    """One row per strategy: under a one-line verdict, the narrow columns (NARROW_COLUMNS)
    fitted to ``width``, or every column (``wide``, not fitted)."""
    if fmt is Format.json:
        return dumps(strategies_record(rows))
    if fmt is Format.csv:
        return to_csv([_csv_row(b) for b in rows], unit)
    columns = WIDE_COLUMNS if wide else NARROW_COLUMNS
    headers = [f"{c} ({unit.value})" if c in MEMORY_COLUMNS else c for c in columns]
    cells = [_cells(b, unit) for b in rows]
    table = fit_table(
        [[c[k] for k in columns] for c in cells],
        headers,
        tablefmt="github" if fmt is Format.markdown else "simple",
        width=None if wide else width,
    )
    b = rows[0]
    if b.options.headroom is not None:
        kept = f"{b.options.headroom:.0%} ({fmt_bytes(b.reserve_bytes, unit)} {unit.value})"
    else:
        kept = "0% (10% where reserved is '-': fragmentation unmodelled)"
    note = (
        "reserved = torch's caching allocator replayed over the step (max_memory_reserved) + "
        f"overhead ({b.options.alloc_conf.describe()}); headroom = GPU memory left beside it "
        "(beside the peak where reserved is '-'); fits = at least "
        f"{kept} left and the offloads within the node's host RAM and NVMe. added time = "
        "what the strategy adds to "
        "the step's compute (recompute, exposed transfers, the CPU optimizer step): what "
        f"{'`memcalc plan`' if fmt is Format.markdown else 'memcalc plan'} ranks by."
    )
    note += (
        " transient: bytes alive only at the peak moment (loss logits and their gradients, a "
        "recomputed block, optimizer temporaries); peak = the largest moment of the step + "
        "overhead, not the sum of the columns."
        if wide
        else " --wide: every component."
    )
    lines = [_heading(_header(b, unit), fmt, width), "", _wrap(glance(rows, unit), width), ""]
    return "\n".join([*lines, table, "", _wrap(note, width)])


def _csv_row(b: Breakdown) -> dict[str, object]:
    return csv_row(breakdown_record(b), model=b.model_name, gpu=b.gpu.name)


def render_detail(b: Breakdown, fmt: Format, unit: Unit, *, width: int | None = None) -> str:
    """One strategy: components (the activations' parts indented under them), the
    timeline, costs, the verdict and the assumptions."""
    if fmt is Format.json:
        return dumps(estimate_record(b))
    if fmt is Format.csv:
        return to_csv([_csv_row(b)], unit)
    markdown = fmt is Format.markdown
    tablefmt = "github" if markdown else "simple"
    u = unit.value
    comp = [
        ["parameters", fmt_bytes(b.parameter_bytes, unit)],
        ["gradients", fmt_bytes(b.gradient_bytes, unit)],
        ["optimizer states", fmt_bytes(b.optimizer_bytes, unit)],
        ["activations (stored)", fmt_bytes(b.activation_bytes, unit)],
        *[
            [f"  of which {k}", fmt_bytes(v, unit)]
            for k, v in b.activation_by_component.items()
            if v
        ],
        *_rebuild_row(b, unit),
        [f"transient at peak ({b.peak.phase}: {b.peak.where})", fmt_bytes(b.transient_bytes, unit)],
        ["runtime overhead (profile assumption)", fmt_bytes(b.overhead_bytes, unit)],
        ["peak on GPU", fmt_bytes(b.peak_bytes, unit)],
        ["GPU memory", fmt_bytes(b.gpu.memory_bytes, unit)],
    ]
    if b.host_bytes or b.nvme_bytes:
        comp.append(["host RAM", fmt_bytes(b.host_bytes, unit)])
        comp.append(["NVMe", fmt_bytes(b.nvme_bytes, unit)])
    timeline = [
        [
            m.phase,
            m.where,
            fmt_bytes(m.activation_bytes, unit),
            fmt_bytes(m.gradient_bytes, unit),
            fmt_bytes(m.transient_bytes, unit),
            fmt_bytes(m.total_bytes, unit),
        ]
        for m in b.timeline.summary()
    ]
    costs = [
        [
            f"micro-batch compute ({time_basis(b.options.mfu)})",
            f"{format_flops(b.step_flops)}, {format_seconds(b.step_seconds)}",
        ],
        [
            "extra forward (recompute)",
            f"{format_flops(b.extra_forward_flops)} (+{b.extra_flops_fraction:.1%}, "
            f"{format_seconds(b.extra_seconds)})",
        ],
        [
            "moved per step (offload)",
            f"{fmt_bytes(b.moved_bytes_per_step, unit)} {u} on {b.gpu.host_link}, "
            f"{format_seconds(b.transfer_seconds)} if nothing overlapped",
        ],
        *_time_rows(b),
    ]
    note = f" ({b.activation_plan.note})" if b.activation_plan.note else ""
    strategy = f"**strategy:** {b.strategy}{note}" if markdown else f"strategy: {b.strategy}{note}"
    timeline_headers = [
        "phase",
        "where",
        f"activations ({u})",
        f"grads ({u})",
        f"transient ({u})",
        f"total ({u})",
    ]
    if markdown:
        assumptions = ["**Assumptions**", "", *[f"- {a}" for a in b.assumptions]]
    else:
        assumptions = ["assumptions:"]
        for a in b.assumptions:
            assumptions.append(
                textwrap.fill(f"- {a}", width, subsequent_indent="  ") if width else f"- {a}"
            )
    parts = [
        _heading(_header(b, unit), fmt, width),
        *([""] if markdown else []),  # a paragraph of its own
        _wrap(strategy, width),
        "",
        fit_table(comp, ["component", u], tablefmt=tablefmt, width=width, preserve_whitespace=True),
        "",
        fit_table(timeline, timeline_headers, tablefmt=tablefmt, width=width, wrap=1),
        "",
        fit_table(costs, ["cost", "value"], tablefmt=tablefmt, width=width, wrap=1),
        "",
        _wrap(verdict_text(b, unit), width),
        "",
        *assumptions,
    ]
    return "\n".join(parts)


def _time_rows(b: Breakdown) -> list[list[str]]:
    """The step's time by part (the model ``plan`` ranks by)."""
    t = b.time
    if t is None:
        return []
    parts = [
        ("compute", t.compute_seconds),
        ("recompute", t.recompute_seconds),
        ("pipeline bubble", t.bubble_seconds),
        ("exposed communication", t.communication_seconds),
        ("exposed offload", t.offload_seconds),
        ("CPU optimizer step", t.cpu_optimizer_seconds),
        ("optimizer step", t.optimizer_seconds),
    ]
    shown = " + ".join(f"{name} {format_seconds(v)}" for name, v in parts if v > 0)
    kernels = (
        ("matmuls", t.matmul_seconds),
        ("attention", t.attention_seconds),
        ("memory-bound ops", t.memory_bound_seconds),
    )
    split = ", ".join(f"{name} {format_seconds(v)}" for name, v in kernels if v > 0)
    rows = [["step time", f"{format_seconds(t.total_seconds)} = {shown}"]]
    if split:
        rows.append(["compute by kernel", split])
    rows.append(["added time (what plan ranks by)", f"+{format_seconds(t.added_seconds)}"])
    return rows


def time_basis(mfu: float | None) -> str:
    """How the time was computed, in words.

    >>> time_basis(None), time_basis(0.4)
    ('kernels by shape', 'every matmul at MFU 0.40')
    """
    return "kernels by shape" if mfu is None else f"every matmul at MFU {mfu:.2f}"


def _rebuild_row(b: Breakdown, unit: Unit) -> list[list[str]]:
    """The largest recomputed segment, rebuilt during backward (none without recompute)."""
    plan = b.activation_plan
    if not plan.rebuild_bytes:
        return []
    label = f"rebuilt in backward (largest recomputed segment; {plan.checkpoints} checkpoints)"
    if not plan.checkpoints:
        label = "rebuilt in backward (one block's attention core)"
    return [[label, fmt_bytes(plan.rebuild_bytes, unit)]]
