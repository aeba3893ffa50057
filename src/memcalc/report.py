"""Breakdown(s) -> table | json | csv | markdown. The only formatting code.

JSON is the stable, documented interface (docs/json.md): bytes are integers, seconds floats,
FLOPs integers; every key carries its unit.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from enum import Enum
from typing import Any

from memcalc.estimate import Breakdown, Options
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.comms import Transfer
from memcalc.units import Unit, format_flops, format_seconds, to_unit

JSON_SCHEMA_VERSION = 1

LAYOUT_FIELDS = (
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "sp",
    "vpp",
    "microbatches",
    "zero",
    "fsdp_reshard",
    "shard_size",
    "bucket_view",
    "parallel_impl",
)


class Format(str, Enum):
    """Output format."""

    table = "table"
    """Plain-text table (tabulate)."""
    json = "json"
    """Stable JSON, bytes as integers (docs/json.md)."""
    csv = "csv"
    """One row per strategy, bytes as integers."""
    markdown = "markdown"
    """GitHub-flavoured markdown table."""


def breakdown_record(b: Breakdown) -> dict[str, Any]:
    """A Breakdown as plain data: the JSON interface."""
    return {
        "strategy": b.strategy,
        "recompute": b.activation_plan.strategy,
        "offload": [o.label for o in b.options.offload],
        "parameter_bytes": b.parameter_bytes,
        "gradient_bytes": b.gradient_bytes,
        "optimizer_bytes": b.optimizer_bytes,
        "activation_bytes": b.activation_bytes,
        "activation_bytes_by_component": dict(b.activation_by_component),
        "transient_bytes": b.transient_bytes,
        "overhead_bytes": b.overhead_bytes,
        "peak_bytes": b.peak_bytes,
        "peak_phase": b.peak.phase,
        "peak_where": b.peak.where,
        "rebuild_bytes": b.activation_plan.rebuild_bytes,
        "checkpoints": b.activation_plan.checkpoints,
        "host_bytes": b.host_bytes,
        "nvme_bytes": b.nvme_bytes,
        "moved_bytes_per_step": b.moved_bytes_per_step,
        "transfer_seconds": b.transfer_seconds,
        "transfer_hidden": b.transfer_hidden,
        "forward_flops": b.forward_flops,
        "extra_forward_flops": b.extra_forward_flops,
        "extra_flops_fraction": b.extra_flops_fraction,
        "step_seconds": b.step_seconds,
        "extra_seconds": b.extra_seconds,
        "gpu_memory_bytes": b.gpu.memory_bytes,
        "fits": b.fits,
        "headroom_bytes": b.headroom_bytes,
        "note": b.activation_plan.note,
        "buffer_bytes": b.buffer_bytes,
        "time": b.time.as_dict() if b.time else None,
        "communication": [_transfer_record(t) for t in b.transfers],
        "stage": b.stage or None,
        "stages": [breakdown_record(st) | {"stages": []} for st in b.stages],
    }


def _transfer_record(t: Transfer) -> dict[str, Any]:
    return {
        "dimension": t.dimension,
        "collective": t.collective.value,
        "ranks": t.ranks,
        "payload_bytes": t.payload_bytes,
        "wire_bytes": int(t.wire_bytes),
        "link": t.link,
        "seconds": t.seconds,
        "overlaps_compute": t.overlaps,
    }


def _context(b: Breakdown) -> dict[str, Any]:
    s = b.setup
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "model": b.model_name,
        "parameter_count": b.params.total,
        "parameter_count_by_component": b.params.as_dict(),
        "gpu": b.gpu.name,
        "gpu_memory_bytes": b.gpu.memory_bytes,
        "batch": s.batch,
        "seq": s.seq,
        "precision": s.precision.value,
        "optimizer": s.optimizer.value,
        "attention": s.attention.value,
        "loss": s.loss.value,
        "mfu": b.options.mfu,
        "layout": {
            "world_size": s.parallel.world_size,
            **{k: getattr(s.parallel, k) for k in LAYOUT_FIELDS},
        },
        "assumptions": list(b.assumptions),
    }


def _fmt(n: int, unit: Unit) -> str:
    return f"{to_unit(n, unit):.2f}"


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
_COLUMNS = ("strategy", *_MEMORY_COLUMNS, "extra compute", "extra transfer", "fits")


def _row(b: Breakdown, unit: Unit) -> list[str]:
    extra = (
        f"+{b.extra_flops_fraction:.0%} ({format_seconds(b.extra_seconds)})"
        if b.extra_forward_flops
        else "-"
    )
    transfer = "-"
    if b.moved_bytes_per_step:
        hidden = "hidden" if b.transfer_hidden else "exposed"
        transfer = f"{format_seconds(b.transfer_seconds)} ({hidden})"
    return [
        b.strategy,
        _fmt(b.parameter_bytes, unit),
        _fmt(b.gradient_bytes, unit),
        _fmt(b.optimizer_bytes, unit),
        _fmt(b.activation_bytes, unit),
        _fmt(b.transient_bytes, unit),
        _fmt(b.overhead_bytes, unit),
        _fmt(b.peak_bytes, unit),
        _fmt(b.host_bytes + b.nvme_bytes, unit) if (b.host_bytes or b.nvme_bytes) else "-",
        extra,
        transfer,
        "yes" if b.fits else "NO",
    ]


def _header(b: Breakdown, unit: Unit) -> str:
    s = b.setup
    return (
        f"{b.model_name} ({b.params.total:,} parameters) on {b.gpu.display_name} "
        f"({_fmt(b.gpu.memory_bytes, unit)} {unit.value}); batch {s.batch} x seq {s.seq}, "
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
) -> str:
    """The strategy table when no strategy was chosen, else the detailed breakdown."""
    from memcalc.strategies.selection import default_strategies

    if options is None:
        rows = [run(o) for o in default_strategies(num_blocks, setup)]
        return render_strategies(rows, fmt, unit)
    return render_detail(run(options), fmt, unit)


def render_strategies(rows: list[Breakdown], fmt: Format, unit: Unit) -> str:
    """One row per strategy."""
    from tabulate import tabulate

    if fmt is Format.json:
        return json.dumps(
            {**_context(rows[0]), "strategies": [breakdown_record(b) for b in rows]}, indent=2
        )
    if fmt is Format.csv:
        return _csv([breakdown_record(b) for b in rows])
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
            **_context(b),
            "strategies": [breakdown_record(b)],
            "timeline": [_moment_record(m) for m in b.timeline.moments()],
        }
        return json.dumps(record, indent=2)
    if fmt is Format.csv:
        return _csv([breakdown_record(b)])
    tablefmt = "github" if fmt is Format.markdown else "simple"
    u = unit.value
    comp = [
        ["parameters", _fmt(b.parameter_bytes, unit)],
        ["gradients", _fmt(b.gradient_bytes, unit)],
        ["optimizer states", _fmt(b.optimizer_bytes, unit)],
        ["activations (stored)", _fmt(b.activation_bytes, unit)],
        *[[f"  {k}", _fmt(v, unit)] for k, v in b.activation_by_component.items() if v],
        *_rebuild_row(b, unit),
        [f"transient at peak ({b.peak.phase}: {b.peak.where})", _fmt(b.transient_bytes, unit)],
        ["runtime overhead (profile assumption)", _fmt(b.overhead_bytes, unit)],
        ["peak on GPU", _fmt(b.peak_bytes, unit)],
        ["GPU memory", _fmt(b.gpu.memory_bytes, unit)],
    ]
    if b.host_bytes or b.nvme_bytes:
        comp.append(["host RAM", _fmt(b.host_bytes, unit)])
        comp.append(["NVMe", _fmt(b.nvme_bytes, unit)])
    timeline = [
        [
            m.phase,
            m.where,
            _fmt(m.activation_bytes, unit),
            _fmt(m.gradient_bytes, unit),
            _fmt(m.transient_bytes, unit),
            _fmt(m.total_bytes, unit),
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
            f"{_fmt(b.moved_bytes_per_step, unit)} {u}, {format_seconds(b.transfer_seconds)} on "
            f"{b.gpu.host_link} ({'can hide behind compute' if b.transfer_hidden else 'exposed'})",
        ],
    ]
    verdict = (
        f"FITS with {_fmt(b.headroom_bytes, unit)} {u} headroom"
        if b.fits
        else f"DOES NOT FIT: {_fmt(-b.headroom_bytes, unit)} {u} over"
    )
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


def render_plan(result, model_name: str, gpu, *, fmt: Format, unit: Unit) -> str:  # type: ignore[no-untyped-def]
    """The plan: per GPU count and ZeRO stage, the cheapest fitting strategy."""
    rows = result.rows
    from tabulate import tabulate

    records = [
        {
            "gpus": r.gpus,
            "zero": r.zero,
            "fits": r.best is not None,
            **(
                {
                    "strategy": r.best.strategy,
                    "peak_bytes": r.best.peak_bytes,
                    "added_seconds": r.best.extra_seconds + r.best.transfer_seconds,
                    "step_seconds": r.best.step_seconds,
                }
                if r.best
                else {
                    "strategy": None,
                    "peak_bytes": None,
                    "added_seconds": None,
                    "step_seconds": None,
                }
            ),
        }
        for r in rows
    ]
    if fmt is Format.json:
        return json.dumps(
            {
                "schema_version": JSON_SCHEMA_VERSION,
                "model": model_name,
                "gpu": gpu.name,
                "gpu_memory_bytes": gpu.memory_bytes,
                "plan": records,
                "configurations_evaluated": result.configurations_evaluated,
                "search_seconds": result.search_seconds,
            },
            indent=2,
        )
    if fmt is Format.csv:
        return _csv(records)
    table = [
        [
            r["gpus"],
            f"ZeRO-{r['zero']}",
            r["strategy"] or "nothing fits",
            _fmt(r["peak_bytes"], unit) if r["fits"] else "-",
            f"+{format_seconds(r['added_seconds'])}" if r["fits"] else "-",
        ]
        for r in records
    ]
    head = (
        f"{model_name} on {gpu.display_name} ({_fmt(gpu.memory_bytes, unit)} {unit.value} "
        "each): cheapest strategy that fits, per data-parallel size and ZeRO stage "
        "(added time = recompute + offload transfers, no overlap assumed)."
    )
    body = tabulate(
        table,
        headers=[
            "GPUs",
            "sharding",
            "cheapest fitting strategy",
            f"peak per GPU ({unit.value})",
            "added time per step",
        ],
        tablefmt="github" if fmt is Format.markdown else "simple",
        disable_numparse=True,
    )
    return f"{head}\n\n{body}"


def _rebuild_row(b: Breakdown, unit: Unit) -> list[list[str]]:
    """The largest recomputed segment, rebuilt during backward (none without recompute)."""
    plan = b.activation_plan
    if not plan.rebuild_bytes:
        return []
    label = f"rebuilt in backward (largest recomputed segment; {plan.checkpoints} checkpoints)"
    if not plan.checkpoints:
        label = "rebuilt in backward (one block's attention core)"
    return [[label, _fmt(plan.rebuild_bytes, unit)]]


def _moment_record(m) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return {
        "phase": m.phase,
        "where": m.where,
        "parameter_bytes": m.parameter_bytes,
        "gradient_bytes": m.gradient_bytes,
        "optimizer_bytes": m.optimizer_bytes,
        "activation_bytes": m.activation_bytes,
        "transient_bytes": m.transient_bytes,
        "total_bytes": m.total_bytes,
    }


def _csv(records: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    fields = [k for k in records[0] if not isinstance(records[0][k], (dict, list))]
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow(r)
    return out.getvalue().rstrip("\n")
