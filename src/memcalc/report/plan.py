"""``memcalc plan``'s output: the answer in words, the ranked table, why fewer GPUs do not fit,
what the search cost -- as a table, JSON (docs/json.md), CSV or markdown."""

from __future__ import annotations

from typing import Any

from memcalc.estimate import Breakdown
from memcalc.plan import KindResult, Maximized, PlanResult, Row
from memcalc.report.finite import dumps
from memcalc.report.records import (
    JSON_SCHEMA_VERSION,
    LAYOUT_FIELDS,
    Format,
    breakdown_record,
    fmt_bytes,
    to_csv,
    verdict_text,
)
from memcalc.units import Unit, format_seconds


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
        "layout": {"world_size": p.world_size, **{k: getattr(p, k) for k in LAYOUT_FIELDS}},
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
    lines = []
    for kind in result.kinds:
        name = kind.gpu.display_name
        if kind.fewest is None:
            lines.append(
                f"{name}: nothing fits on up to {req.max_gpus} GPUs"
                + (f" (closest: {_closest(kind, unit)})" if kind.closest else "")
                + f"; try --max-gpus {req.max_gpus * 4} or --why."
            )
        else:
            n = kind.fewest.gpus
            lines.append(f"{name}: fewest GPUs {n} -- {_how(kind.fewest, unit)}.")
    fastest = result.fastest
    if fastest is not None:
        lines.append(
            f"Fastest within {req.max_gpus} GPUs: {fastest.gpus} x "
            f"{fastest.breakdown.gpu.display_name} -- {_how(fastest, unit)}."
        )
    for m in maximized:
        what = "micro-batch" if m.what.value == "batch" else "sequence length"
        lines.append(
            f"Largest {what} that fits on {m.gpu.display_name}: {m.value:,} "
            f"({m.row.gpus} GPU{'s' if m.row.gpus > 1 else ''}: {_how(m.row, unit)})."
        )
    return lines


def _closest(kind: KindResult, unit: Unit) -> str:
    b = min(kind.closest, key=lambda b: b.over_gpu_bytes)
    n = b.setup.parallel.world_size
    return f"{n} GPUs, {layout_label(b)}, {b.strategy}: " + verdict_text(b, unit).removeprefix(
        "DOES NOT FIT: "
    )


_COLUMNS = (
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


def _table_row(i: int, row: Row, fewest: set[int], unit: Unit) -> list[str]:
    b = row.breakdown
    t = b.time
    assert t is not None
    mark = "*" if id(row) in fewest else ""
    return [
        f"{i}{mark}",
        f"{row.gpus} {b.gpu.name}",
        layout_label(b),
        str(b.setup.parallel.zero),
        f"{b.setup.batch}x{b.setup.parallel.microbatches}",
        _recompute(b),
        _offload(b),
        fmt_bytes(b.peak_bytes, unit),
        fmt_bytes(b.headroom_bytes, unit),
        fmt_bytes(b.host_bytes_per_node, unit) if b.host_bytes else "-",
        format_seconds(row.step_seconds),
        format_seconds(t.recompute_seconds) if t.recompute_seconds else "-",
        format_seconds(t.bubble_seconds) if t.bubble_seconds else "-",
        format_seconds(t.communication_seconds) if t.communication_seconds else "-",
        format_seconds(t.offload_seconds + t.cpu_optimizer_seconds)
        if t.offload_seconds + t.cpu_optimizer_seconds
        else "-",
        f"{row.tokens_per_second_per_gpu:,.0f}",
    ]


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
                f"- {n} GPUs ({layout_label(b)}, ZeRO-{b.setup.parallel.zero}, {b.strategy}): "
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
    return (
        f"{req.spec.name}: seq {s.seq}, {batch}, {s.precision.value} {s.optimizer.value}"
        f"{extra}. Fits = peak at most {1 - req.options.headroom:.0%} of GPU memory "
        f"(--headroom {req.options.headroom:.0%}) and offloads within the node's host RAM and "
        f"NVMe. Time at MFU {req.options.mfu:.2f}. Memory in {unit.value}."
    )


def render_plan(
    result: PlanResult,
    maximized: list[Maximized],
    *,
    fmt: Format,
    unit: Unit,
    why: bool = False,
) -> str:
    """The plan in ``fmt``."""
    from tabulate import tabulate

    rows = result.rows
    if fmt is Format.json:
        return dumps(plan_record(result, maximized))
    if fmt is Format.csv:
        return to_csv([_flat(row_record(r)) for r in rows]) if rows else "gpu,gpus"
    fewest = {id(k.fewest) for k in result.kinds if k.fewest}
    table = tabulate(
        [_table_row(i + 1, r, fewest, unit) for i, r in enumerate(rows)],
        headers=list(_COLUMNS),
        tablefmt="github" if fmt is Format.markdown else "simple",
        disable_numparse=True,
    )
    parts = [*_verdicts(result, maximized, unit), ""]
    if rows:
        parts += [
            table,
            "",
            "* the fewest GPUs of that kind; batch = micro-batch x accumulation; free = GPU "
            "memory left at the peak; step = the step's time, + its parts beyond compute.",
        ]
    parts += ["", _header(result, unit), _searched(result)]
    if why:
        parts += ["", *_why(result, unit)]
    return "\n".join(parts)


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if not isinstance(v, (dict, list))}
    out |= {f"layout_{k}": v for k, v in record["layout"].items()}
    out["offload"] = " ".join(record["offload"])
    return out


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
        "mfu": req.options.mfu,
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
