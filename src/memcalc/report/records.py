"""Breakdowns as plain data -- the JSON interface (docs/json.md) -- and what every renderer
shares: the output formats, number formatting, CSV.

JSON is the stable, documented interface: bytes are integers, seconds floats, FLOPs integers;
every key carries its unit.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from enum import Enum
from typing import Any

from memcalc.estimate import Breakdown
from memcalc.frameworks import PARALLEL_IMPL_OF, framework
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.comms import Transfer
from memcalc.units import Unit, to_unit

JSON_SCHEMA_VERSION = 1


def layout_record(setup: TrainingSetup) -> dict[str, Any]:
    """The parallel layout as JSON: every field of ``Parallelism``, and ``parallel_impl`` --
    the old ``--parallel-impl`` value the setup amounts to: ``torch`` under a framework
    running DTensor (hf, reference), else ``megatron`` (its old default, also when no
    framework is named). ``etp`` appears only when set (Megatron's expert tensor-parallel
    split; unset, the experts split over tp). Under another sharding engine than the
    framework's, ``zero_engine`` and the engine's settings (``deepspeed``: every field of
    ``DeepSpeedZero``)."""
    par = setup.parallel
    named = setup.framework
    impl = PARALLEL_IMPL_OF[framework(named).tensor_parallel] if named else "megatron"
    out = {f.name: getattr(par, f.name) for f in dataclasses.fields(par)} | {"parallel_impl": impl}
    if out["etp"] is None:
        del out["etp"]
    if par.cp == 1:  # the rotate method means nothing without context parallelism
        del out["cp_rotate"]
    if setup.sharding_engine is not setup.framework_def.sharding:
        cfg = setup.deepspeed_config
        out["zero_engine"] = setup.sharding_engine.value
        out["deepspeed"] = {
            f.name: getattr(getattr(cfg, f.name), "value", getattr(cfg, f.name))
            for f in dataclasses.fields(cfg)
        }
    return out


class Format(str, Enum):
    """Output format."""

    table = "table"
    """Plain-text table (tabulate)."""
    json = "json"
    """Stable JSON, bytes as integers (docs/json.md)."""
    csv = "csv"
    """One row per strategy (plan: per configuration), with model and GPU columns; bytes as
    integers, each beside its size in --unit (docs/json.md, CSV)."""
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
            "headroom": b.headroom_fraction,
            "alloc_conf": b.options.alloc_conf.text,
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
        "micro_batch_compute_seconds": b.step_seconds,
        "step_seconds": b.step_seconds,
        "extra_seconds": b.extra_seconds,
        "gpu_memory_bytes": b.gpu.memory_bytes,
        "fits": b.fits,
        **_reserved_record(b),
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


def _reserved_record(b: Breakdown) -> dict[str, Any]:
    """The caching allocator replay (``allocator.reserved``); nulls where it is not run."""
    r = b.reserved
    if not r.modelled:
        return {
            "reserved_peak_bytes": None,
            "fragmentation_bytes": None,
            "alloc_retries": None,
            "reserved_not_modelled": r.why,
        }
    return {
        "reserved_peak_bytes": r.reserved_peak_bytes,
        "fragmentation_bytes": r.fragmentation_bytes,
        "alloc_retries": r.alloc_retries,
        "reserved_not_modelled": None,
    }


def _transfer_record(t: Transfer) -> dict[str, Any]:
    return {
        "dimension": t.dimension,
        "collective": t.collective.value,
        "ranks": t.ranks,
        "payload_bytes": t.payload_bytes,
        "wire_bytes": int(t.wire_bytes),
        "intra_node_bytes": int(t.intra_bytes),
        "inter_node_bytes": int(t.inter_bytes),
        "calls": t.calls,
        "link": t.link,
        "seconds": t.seconds,
        "overlaps_compute": t.overlaps,
        "window": t.window.value,
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
            **layout_record(s),
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


def estimate_record(b: Breakdown) -> dict[str, Any]:
    """One strategy as ``memcalc estimate --recompute ... --format json`` prints it: the
    context, the strategy's record and the step's timeline (``Breakdown.to_dict`` in the
    Python API)."""
    return {
        **context_record(b),
        "strategies": [breakdown_record(b)],
        "timeline": [moment_record(m) for m in b.timeline.moments()],
    }


def strategies_record(rows: list[Breakdown]) -> dict[str, Any]:
    """The strategy table as ``memcalc estimate --format json`` prints it."""
    return {**context_record(rows[0]), "strategies": [breakdown_record(b) for b in rows]}


CSV_DECIMALS = 4
"""Decimals of the unit-converted CSV columns (1e-4 GiB is about 107 kB)."""


def csv_row(record: dict[str, Any], **first: Any) -> dict[str, Any]:
    """A record's CSV columns: ``first`` (e.g. model and gpu), then its scalar fields in
    order; a list of strings becomes one space-separated field; ``time`` becomes
    ``time_<part>`` columns and ``added_seconds`` (what ``plan`` ranks by); the other dicts
    and lists are left out (they are in the JSON)."""
    out = dict(first)
    for key, value in record.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = " ".join(value)
        elif key == "time" and isinstance(value, dict):
            out |= {f"time_{k}": v for k, v in value.items()}
            # StepTime.added_seconds: the GPU optimizer step is part of every step, not added
            out["added_seconds"] = (
                value["total_seconds"]
                - value["compute_seconds"]
                - value.get("optimizer_seconds", 0.0)
            )
        elif not isinstance(value, (dict, list)):
            out[key] = value
    return out


BYTE_FIELDS = ("host_memory_per_node", "nvme_capacity_per_node")
"""Fields in bytes whose name does not say ``_bytes`` (the node's capacities)."""


def unit_column(key: str, unit: Unit) -> str | None:
    """The name of the ``unit`` column beside byte column ``key`` (None: not bytes):
    ``_bytes`` becomes ``_GiB`` (``peak_bytes`` -> ``peak_GiB``, ``host_bytes_per_node`` ->
    ``host_GiB_per_node``); a capacity gets it before ``_per_node``.

    >>> unit_column("peak_bytes", Unit.GiB), unit_column("host_memory_per_node", Unit.GB)
    ('peak_GiB', 'host_memory_GB_per_node')
    """
    if "_bytes" in key:
        return key.replace("_bytes", f"_{unit.value}", 1)
    if key in BYTE_FIELDS:
        return key.replace("_per_node", f"_{unit.value}_per_node")
    return None


def to_csv(rows: list[dict[str, Any]], unit: Unit) -> str:
    """CSV of ``rows`` (``csv_row``'s): bytes stay integers, and each byte column is followed
    by the same size in ``unit`` (``unit_column``), rounded to CSV_DECIMALS. The columns are
    the first row's (docs/json.md, CSV)."""
    fields: list[str] = []
    converted: dict[str, str] = {}
    for key in rows[0]:
        fields.append(key)
        name = unit_column(key, unit)
        if name is not None:
            converted[key] = name
            fields.append(name)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        row = dict(r)
        for key, name in converted.items():
            value = r.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                row[name] = round(to_unit(value, unit), CSV_DECIMALS)
        writer.writerow(row)
    return out.getvalue().rstrip("\n")


def verdict_text(b: Breakdown, unit: Unit) -> str:
    """Whether ``b`` fits, in one line: against the usable memory (the device's less the
    headroom reserve), the node's host RAM and its NVMe."""
    u = unit.value
    reserve = f"{b.headroom_fraction:.0%} of {fmt_bytes(b.gpu.memory_bytes, unit)} {u} kept free"
    what = "reserved" if b.reserved.modelled else "peak"
    used = fmt_bytes(b.reserved_total_bytes, unit)
    if b.fits:
        retries = b.reserved.alloc_retries
        flushes = f"; {retries} cache flush(es) per step (num_alloc_retries)" if retries else ""
        return (
            f"FITS: {what} {used} of {fmt_bytes(b.usable_bytes, unit)} {u} usable ({reserve}; "
            f"{fmt_bytes(b.headroom_bytes, unit)} {u} free at the peak{flushes})"
        )
    reasons = []
    if b.over_gpu_bytes:
        reasons.append(
            f"{what} {used} {u} is {fmt_bytes(b.over_gpu_bytes, unit)} "
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
