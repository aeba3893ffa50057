"""``memcalc plan``'s output: the answer in words, the ranked table, why fewer GPUs do not fit,
what the search cost -- as a table, JSON (docs/json.md), CSV or markdown."""

from __future__ import annotations

import textwrap
from typing import Any

from memcalc.estimate import Breakdown
from memcalc.plan import KindResult, Maximized, PlanResult, Row
from memcalc.plan.constraints import IMPRACTICAL_FACTOR
from memcalc.report.estimate import time_basis
from memcalc.report.finite import dumps
from memcalc.report.records import (
    JSON_SCHEMA_VERSION,
    Format,
    breakdown_record,
    csv_row,
    fmt_bytes,
    layout_record,
    to_csv,
    verdict_text,
)
from memcalc.units import Unit, format_seconds


def runtime_name(req: Any) -> str:
    """The runtime the plan's times assume."""
    from memcalc.steptime import runtime_of

    return (req.options.runtime or runtime_of(req.setup)).name


def layout_label(b: Breakdown) -> str:
    """``dp 2 tp 4 pp 4 cp 8 v2`` (dimensions of 1 left out)."""
    p = b.setup.parallel
    parts = [f"dp {p.dp}"] + [
        f"{name} {getattr(p, name)}" for name in ("tp", "pp", "cp", "ep") if getattr(p, name) > 1
    ]
    if p.vpp > 1:
        parts.append(f"v{p.vpp}")
    return " ".join(parts)


def _recompute(b: Breakdown) -> str:
    return b.activation_plan.strategy


def _offload(b: Breakdown) -> str:
    return ", ".join(o.label for o in b.options.offload) or "-"


def row_record(row: Row) -> dict[str, Any]:
    """One configuration of the plan as plain data (its full breakdown included)."""
    b = row.breakdown
    p = b.setup.parallel
    return {
        "gpu": b.gpu.name,
        "gpus": row.gpus,
        "layout": {"world_size": p.world_size, **layout_record(b.setup)},
        "micro_batch": b.setup.batch,
        "global_batch": row.layout.sequences,
        "tokens_per_step": row.tokens_per_step,
        "strategy": b.strategy,
        "recompute": _recompute(b),
        "offload": [o.label for o in b.options.offload],
        "peak_bytes": b.peak_bytes,
        "usable_bytes": b.usable_bytes,
        "headroom_bytes": b.headroom_bytes,
        "host_bytes_per_node": b.host_bytes_per_node,
        "host_memory_per_node": b.host_memory_per_node,
        "nvme_bytes_per_node": b.nvme_bytes_per_node,
        "step_seconds": row.step_seconds,
        "time": b.time.as_dict() if b.time else None,
        "tokens_per_second_per_gpu": row.tokens_per_second_per_gpu,
        "breakdown": breakdown_record(b),
    }


def _how(row: Row, unit: Unit) -> str:
    b = row.breakdown
    u = unit.value
    batch = f"micro-batch {b.setup.batch} x {b.setup.parallel.microbatches}"
    return (
        f"{layout_label(b)}, ZeRO-{b.setup.parallel.zero}, {batch}, {b.strategy}: "
        f"{fmt_bytes(b.peak_bytes, unit)} {u} peak per GPU, "
        f"{format_seconds(row.step_seconds)} per step "
        f"({row.tokens_per_second_per_gpu:,.0f} tokens/s per GPU)"
    )


def _verdicts(result: PlanResult, maximized: list[Maximized], unit: Unit) -> list[str]:
    req = result.request
    limits = req.constraints.describe()
    lines = []
    for kind in result.kinds:
        name = kind.gpu.display_name
        if kind.fewest is None and limits:
            lines.append(
                f"{name}: nothing on up to {_gpus(req.max_gpus)} fits and meets "
                f"{'; '.join(limits)}; try --max-gpus {req.max_gpus * 4} or fewer constraints."
            )
        elif kind.fewest is None:
            lines.append(
                f"{name}: nothing fits on up to {_gpus(req.max_gpus)}"
                + (f" (closest: {_closest(kind, unit)})" if kind.closest else "")
                + f"; try --max-gpus {req.max_gpus * 4} or --why."
            )
        else:
            n = kind.fewest.gpus
            lines.append(f"{name}: fewest GPUs {n} -- {_how(kind.fewest, unit)}.")
        if kind.impractical is not None:
            lines.append(_impractical_line(kind, req))
        if len(result.kinds) > 1 and kind.rows:
            best = kind.rows[0]
            lines.append(
                f"{name}: fastest within {_gpus(req.max_gpus)}: {best.gpus} GPUs -- "
                f"{_how(best, unit)}."
            )
    fastest = result.fastest
    if fastest is not None:
        lines.append(
            f"Fastest within {_gpus(req.max_gpus)}: {fastest.gpus} x "
            f"{fastest.breakdown.gpu.display_name} -- {_how(fastest, unit)}."
        )
    for m in maximized:
        what = "micro-batch" if m.what.value == "batch" else "sequence length"
        lines.append(
            f"Largest {what} that fits on {m.gpu.display_name}: {m.value:,} "
            f"({m.row.gpus} GPU{'s' if m.row.gpus > 1 else ''}: {_how(m.row, unit)})."
        )
    return lines


def _impractical_line(kind: KindResult, req: Any) -> str:
    """One line on the configurations left out as impractical, with the command that shows
    them."""
    row = kind.impractical
    assert row is not None
    return (
        f"{kind.gpu.display_name}: {row.gpus} GPU{'s' if row.gpus > 1 else ''} would fit "
        f"({layout_label(row.breakdown)}, {row.breakdown.strategy}: "
        f"{format_seconds(row.step_seconds)} per step, "
        f"{row.tokens_per_second_per_gpu:,.0f} tokens/s per GPU) but under 1/"
        f"{IMPRACTICAL_FACTOR:g} of the best rate found ({kind.best_rate:,.0f}): impractical, "
        f"not offered; add --impractical to offer it."
    )


def _closest(kind: KindResult, unit: Unit) -> str:
    b = min(kind.closest, key=lambda b: b.over_gpu_bytes)
    n = b.setup.parallel.world_size
    return f"{_gpus(n)}, {layout_label(b)}, {b.strategy}: " + verdict_text(b, unit).removeprefix(
        "DOES NOT FIT: "
    )


WIDE_COLUMNS = (
    "#",
    "GPUs",
    "layout",
    "ZeRO",
    "batch",
    "recompute",
    "offload",
    "peak",
    "free",
    "host/node",
    "step",
    "+recomp",
    "+bubble",
    "+comm",
    "+offload",
    "tok/s/GPU",
)
"""``--wide``: every column of the ranked table."""
NARROW_COLUMNS = (
    "#",
    "GPU count",
    "layout, ZeRO",
    "batch",
    "strategy",
    "peak",
    "tok/s/GPU",
)
"""The default ranked table: the configuration (its layout with the ZeRO stage), its peak
and what ranks it (the step's time and its parts: ``--wide``)."""


def _cells(i: int, row: Row, fewest: set[int], unit: Unit, kinds: int) -> dict[str, str]:
    """Every column's text; the GPU kind is named only when the plan compares kinds (or with
    --wide)."""
    b = row.breakdown
    t = b.time
    assert t is not None
    mark = "*" if id(row) in fewest else ""
    offload = t.offload_seconds + t.cpu_optimizer_seconds
    return {
        "#": f"{i}{mark}",
        "GPUs": f"{row.gpus} {b.gpu.name}",
        "GPU count": f"{row.gpus} {b.gpu.name}" if kinds > 1 else str(row.gpus),
        "layout": layout_label(b),
        "ZeRO": str(b.setup.parallel.zero),
        "layout, ZeRO": f"{layout_label(b)}, ZeRO-{b.setup.parallel.zero}",
        "batch": f"{b.setup.batch}x{b.setup.parallel.microbatches}",
        "recompute": _recompute(b),
        "offload": _offload(b),
        "strategy": b.strategy,
        "peak": fmt_bytes(b.peak_bytes, unit),
        "free": fmt_bytes(b.headroom_bytes, unit),
        "host/node": fmt_bytes(b.host_bytes_per_node, unit) if b.host_bytes else "-",
        "step": format_seconds(row.step_seconds),
        "+recomp": format_seconds(t.recompute_seconds) if t.recompute_seconds else "-",
        "+bubble": format_seconds(t.bubble_seconds) if t.bubble_seconds else "-",
        "+comm": format_seconds(t.communication_seconds) if t.communication_seconds else "-",
        "+offload": format_seconds(offload) if offload else "-",
        "tok/s/GPU": f"{row.tokens_per_second_per_gpu:,.0f}",
    }


def _why(result: PlanResult, unit: Unit) -> list[str]:
    lines = []
    for kind in result.kinds:
        if not kind.closest:
            continue
        lines.append(
            f"Why fewer {kind.gpu.display_name} do not fit (per GPU count, the configuration "
            "with the least memory):"
        )
        for b in kind.closest:
            n = b.setup.parallel.world_size
            largest = max(
                (
                    ("parameters", b.parameter_bytes),
                    ("gradients", b.gradient_bytes),
                    ("optimizer states", b.optimizer_bytes),
                    ("activations", b.activation_bytes),
                ),
                key=lambda kv: kv[1],
            )
            lines.append(
                f"- {_gpus(n)} ({layout_label(b)}, ZeRO-{b.setup.parallel.zero}, {b.strategy}): "
                f"{verdict_text(b, unit).removeprefix('DOES NOT FIT: ')}; largest part "
                f"{largest[0]} {fmt_bytes(largest[1], unit)} {unit.value}"
            )
    return lines


def _searched(result: PlanResult) -> str:
    est = sum(k.tally.estimated for k in result.kinds)
    rej = sum(k.tally.rejected for k in result.kinds)
    skip = sum(k.tally.skipped for k in result.kinds)
    return (
        f"Searched {result.configurations_evaluated:,} configurations in "
        f"{format_seconds(result.search_seconds)}: {est:,} estimated in full, {rej:,} ruled "
        f"out by a memory bound, {skip:,} by a time bound (they cannot beat a configuration "
        "estimated in full). World sizes: "
        + "; ".join(f"{k.gpu.name} {', '.join(map(str, k.world_sizes))}" for k in result.kinds)
        + "."
    )


def _header(result: PlanResult, unit: Unit) -> str:
    req = result.request
    s = req.setup
    batch = (
        f"global batch {req.global_batch:,} sequences ({req.global_batch * s.seq:,} tokens)"
        if req.global_batch
        else f"micro-batch {s.batch} x {s.parallel.microbatches} per data-parallel replica"
    )
    extra = f", LoRA r={s.lora.rank}" if s.lora else ""
    if s.quantize.value != "none":
        extra += f", {s.quantize.value} base weights"
    limits = req.constraints.describe()
    if limits:
        extra += f"; searched only {', '.join(limits)}"
    return (
        f"{req.spec.name}: seq {s.seq}, {batch}, {s.precision.value} {s.optimizer.value}"
        f"{extra}. Fits = {_fit_rule(req.options.headroom)} and offloads within the node's "
        f"host RAM and NVMe. Time: {time_basis(req.options.mfu)} ({runtime_name(req)}). "
        f"Memory in {unit.value}."
    )


def render_plan(
    result: PlanResult,
    maximized: list[Maximized],
    *,
    fmt: Format,
    unit: Unit,
    why: bool = False,
    wide: bool = False,
    width: int | None = None,
) -> str:
    """The plan in ``fmt``: the answer in words, then the ranked table -- a few columns
    (NARROW_COLUMNS) fitted to ``width``, or every column (``wide``)."""
    from memcalc.report.estimate import fit_table

    rows = result.rows
    if fmt is Format.json:
        return dumps(plan_record(result, maximized))
    if fmt is Format.csv:
        return to_csv([_csv(result, r) for r in rows], unit) if rows else "model,gpu,gpus"
    markdown = fmt is Format.markdown
    if markdown:
        width = None
    fewest = {id(k.fewest) for k in result.kinds if k.fewest}
    columns = WIDE_COLUMNS if wide else NARROW_COLUMNS
    cells = [_cells(i + 1, r, fewest, unit, len(result.kinds)) for i, r in enumerate(rows)]
    if markdown:  # a bare * would start emphasis
        cells = [c | {"#": c["#"].replace("*", "\\*")} for c in cells]
    headers = [f"{c} ({unit.value})" if c in _MEMORY else _HEADERS.get(c, c) for c in columns]
    table = fit_table(
        [[c[k] for k in columns] for c in cells],
        headers,
        tablefmt="github" if markdown else "simple",
        width=None if wide else width,
        wrap=[columns.index(c) for c in ("strategy", "layout, ZeRO") if c in columns],
    )

    def para(text: str) -> str:
        return textwrap.fill(text, width) if width else text

    verdicts = _verdicts(result, maximized, unit)
    if markdown:
        parts = [
            f"**memcalc plan: {result.request.spec.name}**",
            "",
            *[f"- {v}" for v in verdicts],
            "",
        ]
    else:
        parts = [*map(para, verdicts), ""]
    if rows:
        star = "\\*" if markdown else "*"
        parts += [
            table,
            "",
            para(
                f"{star} the fewest GPUs of that kind; batch = micro-batch x accumulation; "
                + (
                    "free = GPU memory left at the peak; step = the step's time, + its parts "
                    "beyond compute."
                    if wide
                    else "--wide: every column (free memory, host RAM per node, the step's time "
                    "and its parts)."
                )
            ),
        ]
    parts += ["", para(_header(result, unit)), "", para(_searched(result))]
    if why:
        why_lines = _why(result, unit)
        parts += ["", *(why_lines if markdown else map(para, why_lines))]
    return "\n".join(parts)


_MEMORY = ("peak", "free", "host/node")
"""Columns in bytes: their header carries the unit."""
_HEADERS = {"GPU count": "GPUs"}
"""Columns whose header is not their name."""


def _csv(result: PlanResult, row: Row) -> dict[str, Any]:
    record = row_record(row)
    flat = csv_row(record, model=result.request.spec.name)
    return flat | {f"layout_{k}": v for k, v in record["layout"].items()}


def plan_record(result: PlanResult, maximized: list[Maximized]) -> dict[str, Any]:
    """The plan as plain data: the JSON interface (docs/json.md)."""
    req = result.request
    s = req.setup
    fastest = result.fastest
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "plan",
        "model": req.spec.name,
        "seq": s.seq,
        "global_batch": req.global_batch,
        "micro_batch": None if req.global_batch else s.batch,
        "precision": s.precision.value,
        "optimizer": s.optimizer.value,
        "attention": s.attention.value,
        "lora_rank": s.lora.rank if s.lora else None,
        "quantize": s.quantize.value,
        "headroom": req.options.headroom,
        "alloc_conf": req.options.alloc_conf.text,
        "mfu": req.options.mfu,
        "runtime": runtime_name(req),
        "constraints": req.constraints.describe(),
        "max_gpus": req.max_gpus,
        "min_gpus": {k.gpu.name: k.fewest.gpus if k.fewest else None for k in result.kinds},
        "fastest": row_record(fastest) if fastest else None,
        "maximized": {
            m.gpu.name: {"what": m.what.value, "value": m.value, "row": row_record(m.row)}
            for m in maximized
        },
        "gpus": [
            {
                "gpu": k.gpu.name,
                "gpu_memory_bytes": k.gpu.memory_bytes,
                "world_sizes": k.world_sizes,
                "min_gpus": k.fewest.gpus if k.fewest else None,
                "fewest": row_record(k.fewest) if k.fewest else None,
                "fastest": row_record(k.rows[0]) if k.rows else None,
                "impractical": row_record(k.impractical) if k.impractical else None,
                "best_tokens_per_second_per_gpu": k.best_rate,
                "not_fitting": [
                    {
                        "gpus": b.setup.parallel.world_size,
                        "over_gpu_bytes": b.over_gpu_bytes,
                        "over_host_bytes": b.over_host_bytes,
                        "over_nvme_bytes": b.over_nvme_bytes,
                        "breakdown": breakdown_record(b),
                    }
                    for b in k.closest
                ],
                "configurations_evaluated": k.tally.configurations,
            }
            for k in result.kinds
        ],
        "rows": [row_record(r) for r in result.rows],
        "configurations_evaluated": result.configurations_evaluated,
        "configurations_estimated": sum(k.tally.estimated for k in result.kinds),
        "rejected_by_memory_bound": sum(k.tally.rejected for k in result.kinds),
        "skipped_by_time_bound": sum(k.tally.skipped for k in result.kinds),
        "search_seconds": result.search_seconds,
    }


def _gpus(n: int) -> str:
    """``n`` GPUs in words.

    >>> _gpus(1), _gpus(64)
    ('1 GPU', '64 GPUs')
    """
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _fit_rule(headroom: float | None) -> str:
    """How a configuration's fit is judged (``Breakdown.over_gpu_bytes``)."""
    if headroom is None:
        return (
            "reserved memory (the caching allocator replayed) + overhead within GPU memory; "
            "peak at most 90% where the layout is not replayed (--headroom auto)"
        )
    return (
        f"reserved (or the peak where not replayed) at most {1 - headroom:.0%} of GPU memory "
        f"(--headroom {headroom:.0%})"
    )
