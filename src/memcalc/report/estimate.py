"""``memcalc estimate``'s output: the strategy table and one strategy's detailed breakdown,
as a table, JSON, CSV or markdown."""

from __future__ import annotations

from collections.abc import Callable

from memcalc.estimate import Breakdown, Options
from memcalc.report.finite import dumps
from memcalc.report.records import (
    Format,
    breakdown_record,
    context_record,
    fmt_bytes,
    moment_record,
    to_csv,
    verdict_text,
)
from memcalc.spec.training import TrainingSetup
from memcalc.units import Unit, format_flops, format_seconds

_MEMORY_COLUMNS = (
    "params",
    "grads",
    "optimizer",
    "activations",
    "transient",
    "overhead",
    "peak GPU",
    "host",
)
_COLUMNS = ("strategy", *_MEMORY_COLUMNS, "extra compute", "added time", "fits")


def _row(b: Breakdown, unit: Unit) -> list[str]:
    extra = (
        f"+{b.extra_flops_fraction:.0%} ({format_seconds(b.extra_seconds)})"
        if b.extra_forward_flops
        else "-"
    )
    added = b.time.added_seconds if b.time else 0.0
    transfer = f"+{format_seconds(added)}" if added > 0 else "-"
    return [
        b.strategy,
        fmt_bytes(b.parameter_bytes, unit),
        fmt_bytes(b.gradient_bytes, unit),
        fmt_bytes(b.optimizer_bytes, unit),
        fmt_bytes(b.activation_bytes, unit),
        fmt_bytes(b.transient_bytes, unit),
        fmt_bytes(b.overhead_bytes, unit),
        fmt_bytes(b.peak_bytes, unit),
        fmt_bytes(b.host_bytes + b.nvme_bytes, unit) if (b.host_bytes or b.nvme_bytes) else "-",
        extra,
        transfer,
        "yes" if b.fits else "NO",
    ]


def _header(b: Breakdown, unit: Unit) -> str:
    s = b.setup
    return (
        f"{b.model_name} ({b.params.total:,} parameters) on {b.gpu.display_name} "
        f"({fmt_bytes(b.gpu.memory_bytes, unit)} {unit.value}); batch {s.batch} x seq {s.seq}, "
        f"{s.precision.value}, {s.optimizer.value}, attention {s.attention.value}. "
        f"Memory in {unit.value}."
    )


def render_estimate(
    run: Callable[[Options], Breakdown],
    num_blocks: int,
    setup: TrainingSetup,
    options: Options | None,
    fmt: Format,
    unit: Unit,
    hint: str = "",
) -> str:
    """The strategy table when no strategy was chosen, else the detailed breakdown; ``hint``
    (the plan command that answers it) is printed under a table where nothing fits."""
    from memcalc.strategies.selection import default_strategies

    if options is None:
        rows = [run(o) for o in default_strategies(num_blocks, setup)]
        text = render_strategies(rows, fmt, unit)
        fits = any(b.fits for b in rows)
    else:
        b = run(options)
        text, fits = render_detail(b, fmt, unit), b.fits
    if hint and not fits and fmt in (Format.table, Format.markdown):
        text += f"\n\nNothing here fits. To search GPU counts, layouts and offloads: {hint}"
    return text


def render_strategies(rows: list[Breakdown], fmt: Format, unit: Unit) -> str:
    """One row per strategy."""
    from tabulate import tabulate

    if fmt is Format.json:
        return dumps({**context_record(rows[0]), "strategies": [breakdown_record(b) for b in rows]})
    if fmt is Format.csv:
        return to_csv([breakdown_record(b) for b in rows])
    headers = [f"{c} ({unit.value})" if c in _MEMORY_COLUMNS else c for c in _COLUMNS]
    table = tabulate(
        [_row(b, unit) for b in rows],
        headers=headers,
        tablefmt="github" if fmt is Format.markdown else "simple",
        disable_numparse=True,
    )
    lines = [_header(rows[0], unit), "", table, ""]
    lines.append(
        "transient: bytes alive only at the peak moment (loss logits and their gradients, a "
        "recomputed block, optimizer temporaries); peak GPU = the largest moment of the step "
        "+ overhead, not the sum of the columns."
    )
    return "\n".join(lines)


def render_detail(b: Breakdown, fmt: Format, unit: Unit) -> str:
    """One strategy: components, activations by model part, the timeline and assumptions."""
    from tabulate import tabulate

    if fmt is Format.json:
        record = {
            **context_record(b),
            "strategies": [breakdown_record(b)],
            "timeline": [moment_record(m) for m in b.timeline.moments()],
        }
        return dumps(record)
    if fmt is Format.csv:
        return to_csv([breakdown_record(b)])
    tablefmt = "github" if fmt is Format.markdown else "simple"
    u = unit.value
    comp = [
        ["parameters", fmt_bytes(b.parameter_bytes, unit)],
        ["gradients", fmt_bytes(b.gradient_bytes, unit)],
        ["optimizer states", fmt_bytes(b.optimizer_bytes, unit)],
        ["activations (stored)", fmt_bytes(b.activation_bytes, unit)],
        *[[f"  {k}", fmt_bytes(v, unit)] for k, v in b.activation_by_component.items() if v],
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
            f"step compute (at MFU {b.options.mfu:.2f})",
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
    verdict = verdict_text(b, unit)
    parts = [
        _header(b, unit),
        f"strategy: {b.strategy}"
        + (f" ({b.activation_plan.note})" if b.activation_plan.note else ""),
        "",
        tabulate(comp, headers=["component", u], tablefmt=tablefmt, disable_numparse=True),
        "",
        tabulate(
            timeline,
            headers=[
                "phase",
                "where",
                f"activations ({u})",
                f"grads ({u})",
                f"transient ({u})",
                f"total ({u})",
            ],
            tablefmt=tablefmt,
            disable_numparse=True,
        ),
        "",
        tabulate(costs, headers=["cost", "value"], tablefmt=tablefmt, disable_numparse=True),
        "",
        verdict,
        "",
        "assumptions:",
        *[f"- {a}" for a in b.assumptions],
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
    ]
    shown = " + ".join(f"{name} {format_seconds(v)}" for name, v in parts if v > 0)
    return [
        ["step time", f"{format_seconds(t.total_seconds)} = {shown}"],
        ["added time (what plan ranks by)", f"+{format_seconds(t.added_seconds)}"],
    ]


def _rebuild_row(b: Breakdown, unit: Unit) -> list[list[str]]:
    """The largest recomputed segment, rebuilt during backward (none without recompute)."""
    plan = b.activation_plan
    if not plan.rebuild_bytes:
        return []
    label = f"rebuilt in backward (largest recomputed segment; {plan.checkpoints} checkpoints)"
    if not plan.checkpoints:
        label = "rebuilt in backward (one block's attention core)"
    return [[label, fmt_bytes(plan.rebuild_bytes, unit)]]
