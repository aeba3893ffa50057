"""``memcalc measure``: run the model for real and print estimate vs measured per component.

Thin: parse options, call ``runner.measure`` and ``compare.compare``, print. torch is imported
inside the function so that ``memcalc --help`` works without it.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Annotated

import typer

from memcalc.errors import MemcalcError
from memcalc.estimate import Options
from memcalc.profiles import load_profile
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.training import Attention, OptimizerKind, Precision
from memcalc.strategies.offload import Offload
from memcalc.strategies.recompute import Recompute


class Format(str, Enum):
    """Output format."""

    table = "table"
    json = "json"


class ImplChoice(str, Enum):
    """Which implementation runs (see measure/build.py)."""

    ours = "ours"
    hf = "hf"


def measure_command(
    model: Annotated[
        str, typer.Option(help="Preset name, memcalc spec file or HF config.json.")
    ] = "gpt2",
    batch: Annotated[int, typer.Option(help="Micro-batch size.")] = 1,
    seq: Annotated[int, typer.Option(help="Sequence length.")] = 512,
    precision: Annotated[Precision, typer.Option(help="Precision recipe.")] = Precision.fp32,
    optimizer: Annotated[OptimizerKind, typer.Option(help="Optimizer.")] = OptimizerKind.adamw,
    attention: Annotated[Attention, typer.Option(help="Attention kernel.")] = Attention.sdpa,
    dropout: Annotated[float | None, typer.Option(help="Override every dropout rate.")] = None,
    recompute: Annotated[Recompute, typer.Option(help="Recompute strategy.")] = Recompute.none,
    every: Annotated[int | None, typer.Option(help="k for --recompute every-k.")] = None,
    offload: Annotated[
        list[str] | None,
        typer.Option(help="WHAT=WHERE: optimizer=cpu or activations=cpu (repeatable)."),
    ] = None,
    impl: Annotated[
        ImplChoice, typer.Option(help="ours (reference model) or hf.")
    ] = ImplChoice.ours,
    device: Annotated[
        str | None, typer.Option(help="cuda or cpu (default: cuda if present).")
    ] = None,
    gpu: Annotated[
        str, typer.Option(help="GPU profile for the estimate's overhead.")
    ] = "h100-sxm-80gb",
    tolerance: Annotated[float, typer.Option(help="Max relative error before exit code 1.")] = 0.03,
    fmt: Annotated[Format, typer.Option("--format", help="table or json.")] = Format.table,
    seed: Annotated[int, typer.Option(help="Seed for weights and token ids.")] = 0,
) -> None:
    """Run one warm-up and one measured training step; print estimate vs measured."""
    try:
        import torch  # noqa: F401
    except ImportError:
        typer.echo("memcalc measure needs torch: pip install 'memcalc[torch]'", err=True)
        raise typer.Exit(2) from None
    from memcalc.measure.build import Impl
    from memcalc.measure.compare import compare, estimate_for
    from memcalc.measure.runner import measure

    def progress(msg: str) -> None:
        print(f"[memcalc measure] {msg} ...", file=sys.stderr, flush=True)

    try:
        spec = load_model(model)
        setup = training_setup(
            batch=batch,
            seq=seq,
            precision=precision,
            optimizer=optimizer,
            attention=attention,
            dropout=dropout,
        )
        options = Options(
            recompute=recompute, every=every, offload=tuple(Offload.parse(o) for o in offload or [])
        )
        profile = load_profile(gpu)
        m = measure(
            spec,
            setup,
            impl=Impl(impl.value),
            recompute=recompute,
            every=every,
            offload=options.offload,
            device=device,
            seed=seed,
            progress=progress,
        )
        rows = compare(estimate_for(spec, setup, profile, options, m.device), m)
    except MemcalcError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    failed = [r for r in rows if not r.within(tolerance)]
    if fmt is Format.json:
        typer.echo(
            json.dumps(
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
        )
    else:
        typer.echo(_table(rows, m, tolerance))
    if failed:
        raise typer.Exit(1)


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
