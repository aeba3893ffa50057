"""Breakdowns as plain data -- the JSON interface (docs/json.md) -- and what every renderer
shares: the output formats, number formatting, CSV.

JSON is the stable, documented interface: bytes are integers, seconds floats, FLOPs integers;
every key carries its unit.
"""

from __future__ import annotations

import csv
import io
from enum import Enum
from typing import Any

from memcalc.estimate import Breakdown
from memcalc.strategies.comms import Transfer
from memcalc.units import Unit, to_unit

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
        "options": {
            "recompute": b.options.recompute.value,
            "every": b.options.every,
            "budget_bytes": b.options.budget_bytes,
            "offload": [o.label for o in b.options.offload],
            "mfu": b.options.mfu,
            "headroom": b.options.headroom,
        },
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
        "reserve_bytes": b.reserve_bytes,
        "usable_bytes": b.usable_bytes,
        "host_bytes_per_node": b.host_bytes_per_node,
        "host_memory_per_node": b.host_memory_per_node,
        "nvme_bytes_per_node": b.nvme_bytes_per_node,
        "nvme_capacity_per_node": b.nvme_capacity_per_node,
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


def context_record(b: Breakdown) -> dict[str, Any]:
    s = b.setup
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "model": b.model_name,
        "parameter_count": b.params.total,
        **(
            {"active_parameter_count": b.params.active} if b.params.active != b.params.total else {}
        ),
        "trainable_parameter_count": b.params.trainable,
        "frozen_parameter_count": b.params.frozen,
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


def fmt_bytes(n: int, unit: Unit) -> str:
    return f"{to_unit(n, unit):.2f}"


def moment_record(m) -> dict[str, Any]:  # type: ignore[no-untyped-def]
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


def to_csv(records: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    fields = [k for k in records[0] if not isinstance(records[0][k], (dict, list))]
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow(r)
    return out.getvalue().rstrip("\n")


def verdict_text(b: Breakdown, unit: Unit) -> str:
    """Whether ``b`` fits, in one line: against the usable memory (the device's less the
    headroom reserve), the node's host RAM and its NVMe."""
    u = unit.value
    reserve = f"{b.options.headroom:.0%} of {fmt_bytes(b.gpu.memory_bytes, unit)} {u} kept free"
    if b.fits:
        return (
            f"FITS: peak {fmt_bytes(b.peak_bytes, unit)} of {fmt_bytes(b.usable_bytes, unit)} "
            f"{u} usable ({reserve}; {fmt_bytes(b.headroom_bytes, unit)} {u} free at the peak)"
        )
    reasons = []
    if b.over_gpu_bytes:
        reasons.append(
            f"peak {fmt_bytes(b.peak_bytes, unit)} {u} is {fmt_bytes(b.over_gpu_bytes, unit)} "
            f"{u} over the {fmt_bytes(b.usable_bytes, unit)} {u} usable ({reserve})"
        )
    if b.over_host_bytes:
        reasons.append(
            f"host RAM: {fmt_bytes(b.host_bytes_per_node, unit)} {u} per node for "
            f"{b.ranks_per_node} GPU(s), over the node's {fmt_bytes(b.host_memory_per_node, unit)}"
            f" {u}"
        )
    if b.over_nvme_bytes:
        reasons.append(
            f"NVMe: {fmt_bytes(b.nvme_bytes_per_node, unit)} {u} per node, over its "
            f"{fmt_bytes(b.nvme_capacity_per_node, unit)} {u}"
        )
    return "DOES NOT FIT: " + "; ".join(reasons)
