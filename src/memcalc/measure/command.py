"""``memcalc measure``'s work: run the model for real and report estimate vs measured per
component (``runner.measure``, ``compare.compare``). The command itself is in
``memcalc/cli/measure.py``."""

from __future__ import annotations

import json
import sys
from typing import Any

from memcalc.alloc_conf import alloc_conf_from_env
from memcalc.errors import MemcalcError
from memcalc.estimate import Options
from memcalc.profiles import GpuProfile, load_profile
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import Attention, OptimizerKind, Precision, TrainingSetup
from memcalc.strategies.offload import Offload
from memcalc.strategies.recompute import Recompute

STEP_PHASES = 7
"""Phases the progress bar counts: building the model, then forward, backward and optimizer
step of the warm-up and of the measured step."""


def run_measure(
    *,
    model: str,
    batch: int,
    seq: int,
    precision: Precision,
    optimizer: OptimizerKind,
    attention: Attention,
    dropout: float | None,
    recompute: Recompute,
    every: int | None,
    offload: list[str],
    impl: str,
    device: str | None,
    gpu: str,
    tolerance: float,
    fmt: str,
    seed: int,
    finetune: dict[str, object] | None = None,
    nproc: int | None = None,
    timeout: float | None = None,
    layout: dict[str, Any] | None = None,
    force: bool = False,
    quiet: bool = False,
) -> tuple[str, bool]:
    """Run one warm-up and one measured training step; (the report, whether every checked
    component is within ``tolerance``). With ``nproc``, on that many ranks under torchrun
    with the parallel ``layout`` (the fields of ``Parallelism``), every rank compared.

    Before anything is built: the flags are checked (``preflight.check_flags``), the device
    resolved, and the estimated need compared with the memory available (refused unless
    ``force``). On a CPU the comparison is against the estimate of the CPU's kernels, and the
    report shows the GPU estimate beside it."""
    from memcalc.measure.build import Impl
    from memcalc.measure.compare import compare, estimate_for
    from memcalc.measure.preflight import check_flags, check_memory, need_for, resolve_device
    from memcalc.measure.progress import Progress, mode_of
    from memcalc.measure.runner import measure

    dev = resolve_device(device)
    spec = load_model(model)
    check_flags(
        precision=precision,
        recompute=recompute,
        every=every,
        tolerance=tolerance,
        seed=seed,
        num_layers=spec.num_layers,
        dropout=dropout,
        timeout=timeout,
    )
    setup = training_setup(
        batch=batch,
        seq=seq,
        precision=precision,
        optimizer=optimizer,
        attention=attention,
        dropout=dropout,
        **(finetune or {}),
        **(layout or {}),
    )
    options = Options(
        recompute=recompute,
        every=every,
        offload=tuple(Offload.parse(o) for o in offload),
        # the setting the measured process's torch reads (its own environment)
        alloc_conf=alloc_conf_from_env(),
    )
    profile = load_profile(gpu)
    if nproc is not None:
        return _run_distributed(
            spec,
            setup,
            options,
            profile,
            Impl(impl),
            dev,
            tolerance,
            fmt,
            seed,
            nproc,
            timeout,
            force=force,
            quiet=quiet,
        )
    if timeout is not None:
        raise MemcalcError("--timeout: it limits a --nproc run; add --nproc N")
    if setup.sharding_engine.ranks_differ:
        raise MemcalcError(
            "--zero-engine deepspeed: DeepSpeed is measured under torchrun; add --nproc N --dp N"
        )
    par = setup.parallel
    if par.world_size > 1:
        raise MemcalcError(
            f"--nproc: a parallel layout ({par.describe()}) runs on several ranks; "
            f"add --nproc {par.world_size}"
        )
    if dev.type == "cpu" and any(o.what.value == "activations" for o in options.offload):
        raise MemcalcError(
            "--offload activations=cpu: measured on the CPU, activations are on the host "
            "already (nothing moves); measure it with --device cuda"
        )
    here = estimate_for(spec, setup, profile, options, dev.type)
    gpu_b = estimate_for(spec, setup, profile, options, "cuda") if dev.type == "cpu" else None
    need = need_for(here.peak.total_bytes, here.host_bytes, here.params.total, dev)
    notes = check_memory(need, force=force)
    head = header(spec.name, impl, str(dev), setup, options)
    with Progress("memcalc measure", total=STEP_PHASES, mode=mode_of(quiet)) as progress:
        if progress.live:  # the bar is erased; what ran stays above it
            print(f"memcalc measure: {head}", file=sys.stderr, flush=True)
        m = measure(
            spec,
            setup,
            impl=Impl(impl),
            recompute=recompute,
            every=every,
            offload=options.offload,
            device=str(dev),
            seed=seed,
            progress=progress,
        )
    rows = compare(here, m)
    gpu_rows = {r.component: r.estimate_bytes for r in compare(gpu_b, m)} if gpu_b else None
    failed = [r for r in rows if not r.within(tolerance)]
    all_notes = [*m.notes, *notes]
    if gpu_b is not None:
        all_notes.append(
            f"estimate: this CPU's kernels; gpu estimate: the same step with CUDA kernels "
            f"on {profile.name} (peak {gpu_b.peak.total_bytes:,} bytes)"
        )
    if fmt == "json":
        text = json.dumps(
            {
                "model": spec.name,
                "device": m.device,
                "impl": m.impl,
                "batch": setup.batch,
                "seq": setup.seq,
                "precision": setup.precision.value,
                "strategy": m.strategy,
                "tolerance": tolerance,
                "rows": [
                    _row_record(r, gpu_rows.get(r.component) if gpu_rows else None) for r in rows
                ],
                "notes": all_notes,
                "ok": not failed,
            },
            indent=2,
        )
    else:
        text = _table(rows, gpu_rows, head, tolerance, all_notes)
    return text, not failed


def header(model: str, impl: str, device: str, setup: TrainingSetup, options: Options) -> str:
    """What runs, in one line: model, implementation, device, batch, seq, precision, strategy.

    >>> from memcalc.spec.training import TrainingSetup
    >>> header("gpt2", "ours", "cpu", TrainingSetup(batch=1, seq=512), Options())
    'gpt2 (ours) on cpu: batch 1, seq 512, fp32, sdpa attention, adamw, recompute none'
    """
    strategy = f"recompute {options.recompute.value}"
    if options.every is not None:
        strategy += f" (k={options.every})"
    if options.offload:
        moved = (f"{o.what.value}={o.where.value}" for o in options.offload)
        strategy += ", offload " + ", ".join(moved)
    return (
        f"{model} ({impl}) on {device}: batch {setup.batch}, seq {setup.seq}, "
        f"{setup.precision.value}, {setup.attention.value} attention, {setup.optimizer.value}, "
        f"{strategy}"
    )


def _table(  # type: ignore[no-untyped-def]
    rows, gpu_rows: dict[str, int | None] | None, head: str, tolerance: float, notes: list[str]
) -> str:
    from tabulate import tabulate

    def fmt(x: int | None) -> str:
        return "-" if x is None else f"{x:,}"

    body = [
        [
            r.component,
            fmt(r.estimate_bytes),
            fmt(r.measured_bytes),
            "-" if r.error is None else f"{r.error:+.2%}",
            ("ok" if r.within(tolerance) else "FAIL") if r.checked else "(info)",
            *([fmt(gpu_rows.get(r.component))] if gpu_rows is not None else []),
        ]
        for r in rows
    ]
    headers = ["component", "estimate (bytes)", "measured (bytes)", "error", ""]
    if gpu_rows is not None:
        headers.append("gpu estimate (bytes)")
    table = tabulate(body, headers=headers, disable_numparse=True, colalign=_align(headers))
    text = "".join(f"\nnote: {n}" for n in notes)
    return f"{head}; tolerance {tolerance:.0%}\n{table}{text}"


def _align(headers: list[str]) -> tuple[str, ...]:
    return tuple("right" if "bytes" in h or h == "error" else "left" for h in headers)


def _row_record(r: Any, gpu_estimate_bytes: int | None = None) -> dict[str, Any]:
    record = {
        "component": r.component,
        "estimate_bytes": r.estimate_bytes,
        "measured_bytes": r.measured_bytes,
        "error": r.error,
        "checked": r.checked,
    }
    if gpu_estimate_bytes is not None:
        record["gpu_estimate_bytes"] = gpu_estimate_bytes
    return record


def _run_distributed(
    spec: ModelSpec,
    setup: TrainingSetup,
    options: Options,
    profile: GpuProfile,
    impl: Any,
    dev: Any,
    tolerance: float,
    fmt: str,
    seed: int,
    nproc: int,
    timeout: float | None,
    *,
    force: bool = False,
    quiet: bool = False,
) -> tuple[str, bool]:
    """``measure --nproc N``: every rank's Measurement under torchrun, each against its own
    estimate (its pipeline stage's)."""
    import torch

    from memcalc.measure.compare import compare_ranks, estimate_for, estimates_by_rank
    from memcalc.measure.distributed.launch import Request, default_timeout, launch
    from memcalc.measure.distributed.layouts import LAYOUT_CHECKS, mechanism
    from memcalc.measure.preflight import check_memory, need_for
    from memcalc.measure.progress import Progress, mode_of
    from memcalc.measure.runner import Measurement

    kind = dev.type
    if kind == "cuda" and torch.cuda.device_count() < nproc:
        raise MemcalcError(
            f"--nproc: {nproc} ranks need {nproc} GPUs; this machine has "
            f"{torch.cuda.device_count()}"
        )
    if impl.value == "torchtitan":
        if options.offload:
            raise MemcalcError("--offload: not measured under --nproc (one rank's runner only)")
        from memcalc.measure.torchtitan.model import check_layout as check_titan

        check_titan(spec, setup, options.recompute, nproc, kind)
    else:
        LAYOUT_CHECKS[setup.sharding_engine](spec, setup, impl, nproc, kind, options.offload)
    b = estimate_for(spec, setup, profile, options, kind)
    estimates = estimates_by_rank(b, spec, setup, profile, options, kind)
    busiest = max(estimates, key=lambda e: e.peak.total_bytes)
    need = need_for(busiest.peak.total_bytes, busiest.host_bytes, b.params.total, dev, nproc)
    preflight_notes = check_memory(need, force=force, ranks=nproc)
    request = Request(
        spec, setup, impl, options.recompute, options.every, kind, seed, options.offload
    )
    with Progress("memcalc measure", mode=mode_of(quiet)) as progress:
        results = launch(
            request, nproc, timeout_s=timeout or default_timeout(setup), progress=progress
        )
    measurements = [Measurement.from_dict(r) for r in results]
    titan = setup.framework_def.version if impl.value == "torchtitan" else ""
    ranks = compare_ranks(b, measurements, setup.parallel, estimates)
    ok = all(r.within(tolerance) for rank in ranks for r in rank.rows)
    m = measurements[0]
    head = (
        f"{spec.name} ({m.impl}), {nproc} ranks under torchrun on {kind} "
        f"({'nccl' if kind == 'cuda' else 'gloo'}): batch {setup.batch}, seq {setup.seq}, "
        f"{setup.precision.value}; {mechanism(setup.parallel, titan, setup.sharding_engine)}; "
        f"recompute {m.strategy}; tolerance {tolerance:.0%}"
    )
    if fmt == "json":
        text = json.dumps(
            {
                "device": kind,
                "impl": m.impl,
                "strategy": m.strategy,
                "nproc": nproc,
                "layout": setup.parallel.describe(),
                "mechanism": mechanism(setup.parallel, titan),
                "tolerance": tolerance,
                "ranks": [
                    {
                        "rank": rank.rank,
                        "stage": rank.stage,
                        "rows": [_row_record(r) for r in rank.rows],
                        "notes": list(rank.notes),
                    }
                    for rank in ranks
                ],
                "notes": preflight_notes,
                "ok": ok,
            },
            indent=2,
        )
    else:
        text = _rank_table(head, ranks, tolerance, preflight_notes)
    return text, ok


def _rank_table(head: str, ranks: Any, tolerance: float, extra: list[str]) -> str:
    from tabulate import tabulate

    def fmt(x: int | None) -> str:
        return "-" if x is None else f"{x:,}"

    body = []
    for rank in ranks:
        for i, r in enumerate(rank.rows):
            body.append(
                [
                    rank.rank if i == 0 else "",
                    (rank.stage or "-") if i == 0 else "",
                    r.component,
                    fmt(r.estimate_bytes),
                    fmt(r.measured_bytes),
                    "-" if r.error is None else f"{r.error:+.2%}",
                    ("ok" if r.within(tolerance) else "FAIL") if r.checked else "(info)",
                ]
            )
    headers = ["rank", "stage", "component", "estimate (bytes)", "measured (bytes)", "error", ""]
    notes = dict.fromkeys([*(n for rank in ranks for n in rank.notes), *extra])
    return f"{head}\n{tabulate(body, headers=headers)}" + "".join(f"\nnote: {n}" for n in notes)
