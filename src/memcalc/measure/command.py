"""``memcalc measure``'s work: run the model for real and report estimate vs measured per
component (``runner.measure``, ``compare.compare``). The command itself is in
``memcalc/cli/measure.py``."""

from __future__ import annotations

import json
import sys

from memcalc.estimate import Options
from memcalc.profiles import load_profile
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.training import Attention, OptimizerKind, Precision
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
) -> tuple[str, bool]:
    """Run one warm-up and one measured training step; (the report, whether every checked
    component is within ``tolerance``)."""
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
    )
    options = Options(
        recompute=recompute, every=every, offload=tuple(Offload.parse(o) for o in offload)
    )
    profile = load_profile(gpu)
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
                "rows": [
                    {
                        "component": r.component,
                        "estimate_bytes": r.estimate_bytes,
                        "measured_bytes": r.measured_bytes,
                        "error": r.error,
                        "checked": r.checked,
                    }
                    for r in rows
                ],
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
