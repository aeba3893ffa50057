"""``memcalc measure``'s work: run the model for real and report estimate vs measured per
component (``runner.measure``, ``compare.compare``). The command itself is in
``memcalc/cli/measure.py``."""

from __future__ import annotations

import json
import sys
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.estimate import Options
from memcalc.profiles import GpuProfile, load_profile
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import Attention, OptimizerKind, Precision, TrainingSetup
from memcalc.strategies.offload import Offload
from memcalc.strategies.recompute import Recompute


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
) -> tuple[str, bool]:
    """Run one warm-up and one measured training step; (the report, whether every checked
    component is within ``tolerance``). With ``nproc``, on that many ranks under torchrun
    with the parallel ``layout`` (the fields of ``Parallelism``), every rank compared."""
    from memcalc.measure.build import Impl
    from memcalc.measure.compare import compare, estimate_for
    from memcalc.measure.runner import measure

    def progress(msg: str) -> None:
        print(f"[memcalc measure] {msg} ...", file=sys.stderr, flush=True)

    spec = load_model(model)
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
        recompute=recompute, every=every, offload=tuple(Offload.parse(o) for o in offload)
    )
    profile = load_profile(gpu)
    if nproc is not None:
        return _run_distributed(
            spec, setup, options, profile, Impl(impl), device, tolerance, fmt, seed, nproc, timeout
        )
    if timeout is not None:
        raise MemcalcError("--timeout: it limits a --nproc run; add --nproc N")
    par = setup.parallel
    if par.world_size > 1:
        raise MemcalcError(
            f"--nproc: a parallel layout ({par.describe()}) runs on several ranks; "
            f"add --nproc {par.world_size}"
        )
    if par.microbatches > 1:
        raise MemcalcError("--microbatches: gradient accumulation is measured only with --pp")
    m = measure(
        spec,
        setup,
        impl=Impl(impl),
        recompute=recompute,
        every=every,
        offload=options.offload,
        device=device,
        seed=seed,
        progress=progress,
    )
    rows = compare(estimate_for(spec, setup, profile, options, m.device), m)
    failed = [r for r in rows if not r.within(tolerance)]
    if fmt == "json":
        text = json.dumps(
            {
                "device": m.device,
                "impl": m.impl,
                "strategy": m.strategy,
                "tolerance": tolerance,
                "rows": [_row_record(r) for r in rows],
                "notes": list(m.notes),
                "ok": not failed,
            },
            indent=2,
        )
    else:
        text = _table(rows, m, tolerance)
    return text, not failed


def _table(rows, m, tolerance: float) -> str:  # type: ignore[no-untyped-def]
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
        ]
        for r in rows
    ]
    head = f"{m.impl} model on {m.device}, recompute {m.strategy}, tolerance {tolerance:.0%}"
    headers = ["component", "estimate (bytes)", "measured (bytes)", "error", ""]
    table = tabulate(body, headers=headers)
    notes = "".join(f"\nnote: {n}" for n in m.notes)
    return f"{head}\n{table}{notes}"


def _row_record(r: Any) -> dict[str, Any]:
    return {
        "component": r.component,
        "estimate_bytes": r.estimate_bytes,
        "measured_bytes": r.measured_bytes,
        "error": r.error,
        "checked": r.checked,
    }


def _run_distributed(
    spec: ModelSpec,
    setup: TrainingSetup,
    options: Options,
    profile: GpuProfile,
    impl: Any,
    device: str | None,
    tolerance: float,
    fmt: str,
    seed: int,
    nproc: int,
    timeout: float | None,
) -> tuple[str, bool]:
    """``measure --nproc N``: every rank's Measurement under torchrun, each against its own
    estimate (its pipeline stage's)."""
    import torch

    from memcalc.measure.compare import compare_ranks, estimate_for
    from memcalc.measure.distributed.launch import DEFAULT_TIMEOUT_S, Request, launch
    from memcalc.measure.distributed.layouts import check_layout, mechanism
    from memcalc.measure.runner import Measurement

    def progress(msg: str) -> None:
        print(f"[memcalc measure] {msg} ...", file=sys.stderr, flush=True)

    kind = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if kind not in ("cpu", "cuda"):
        raise MemcalcError(f"--device: a --nproc run takes cpu or cuda, not {kind!r}")
    if kind == "cuda" and torch.cuda.device_count() < nproc:
        raise MemcalcError(
            f"--nproc: {nproc} ranks need {nproc} GPUs; this machine has "
            f"{torch.cuda.device_count()}"
        )
    if options.offload:
        raise MemcalcError("--offload: not measured under --nproc (one rank's runner only)")
    check_layout(spec, setup, impl, nproc, kind)
    request = Request(spec, setup, impl, options.recompute, options.every, kind, seed)
    results = launch(request, nproc, timeout_s=timeout or DEFAULT_TIMEOUT_S, progress=progress)
    measurements = [Measurement.from_dict(r) for r in results]
    b = estimate_for(spec, setup, profile, options, kind)
    ranks = compare_ranks(b, measurements, setup.parallel)
    ok = all(r.within(tolerance) for rank in ranks for r in rank.rows)
    m = measurements[0]
    head = (
        f"{m.impl} model, {nproc} ranks under torchrun on {kind} "
        f"({'nccl' if kind == 'cuda' else 'gloo'}); {mechanism(setup.parallel)}; "
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
                "mechanism": mechanism(setup.parallel),
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
                "ok": ok,
            },
            indent=2,
        )
    else:
        text = _rank_table(head, ranks, tolerance)
    return text, ok


def _rank_table(head: str, ranks: Any, tolerance: float) -> str:
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
    notes = dict.fromkeys(n for rank in ranks for n in rank.notes)
    return f"{head}\n{tabulate(body, headers=headers)}" + "".join(f"\nnote: {n}" for n in notes)
