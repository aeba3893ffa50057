"""``memcalc trace``: trace a model under FakeTensorMode into the op graph and print what
``memcalc estimate`` prints for it.

Thin: parse options, call ``trace.trace_module`` and ``estimate.estimate_graph``, print. torch is
imported inside the function so that ``memcalc --help`` works without it.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from memcalc.errors import MemcalcError
from memcalc.estimate import DEFAULT_MFU
from memcalc.options import (
    BudgetOpt,
    EveryOpt,
    ForeachOpt,
    FormatOpt,
    GpuOpt,
    GpusOpt,
    GradDtypeOpt,
    MfuOpt,
    OffloadOpt,
    OptimizerOpt,
    RecomputeOpt,
    UnitOpt,
    ZeroOpt,
)
from memcalc.profiles import DEFAULT_GPU
from memcalc.report import Format
from memcalc.spec.training import Attention, GradDType, OptimizerKind, Precision
from memcalc.strategies.recompute import Recompute
from memcalc.units import Unit

TORCH_MISSING = "memcalc trace needs torch: pip install 'memcalc[torch]'"


class ImplChoice(str, Enum):
    """Which implementation a preset or spec file is built as (see measure/build.py)."""

    ours = "ours"
    """memcalc's reference model (measure/reference_model.py)."""
    hf = "hf"
    """Hugging Face transformers (needs transformers installed)."""


def trace_command(
    target: Annotated[
        str,
        typer.Argument(
            help="What to trace: module:function returning an nn.Module (imported from the "
            "current directory; runs your code), an HF config.json (random init), or a "
            "memcalc preset / spec file."
        ),
    ],
    input_shape: Annotated[
        str, typer.Option(help="Token ids fed to the model: batch x sequence, e.g. 4x1024.")
    ] = "1x1024",
    gpu: GpuOpt = DEFAULT_GPU,
    precision: Annotated[
        Precision, typer.Option(help="Precision recipe (the model is traced in its dtype).")
    ] = Precision.bf16_mixed,
    grad_dtype: GradDtypeOpt = None,
    optimizer: OptimizerOpt = OptimizerKind.adamw,
    foreach: ForeachOpt = True,
    attention: Annotated[
        Attention | None,
        typer.Option(help="Attention kernel of HF / preset models (default sdpa)."),
    ] = None,
    impl: Annotated[
        ImplChoice | None,
        typer.Option(help="Build a preset / spec file as ours (default) or hf."),
    ] = None,
    dropout: Annotated[
        float | None,
        typer.Option(help="Override every dropout rate of an HF / preset model."),
    ] = None,
    gpus: GpusOpt = 1,
    zero: ZeroOpt = 0,
    recompute: RecomputeOpt = None,
    every: EveryOpt = None,
    budget: BudgetOpt = None,
    offload: OffloadOpt = None,
    mfu: MfuOpt = DEFAULT_MFU,
    format: FormatOpt = Format.table,
    unit: UnitOpt = Unit.GiB,
) -> None:
    """Trace any model under FakeTensorMode (no memory allocated): build it, run a training
    forward and backward, turn what autograd saved into memcalc's op graph, and print the
    estimate for it -- for architectures memcalc has no lowering for."""
    try:
        import torch  # noqa: F401
    except ImportError:
        typer.echo(TORCH_MISSING, err=True)
        raise typer.Exit(2) from None
    try:
        text = _run(
            target,
            input_shape=input_shape,
            gpu=gpu,
            precision=precision,
            grad_dtype=grad_dtype,
            optimizer=optimizer,
            foreach=foreach,
            attention=attention,
            impl=impl,
            dropout=dropout,
            gpus=gpus,
            zero=zero,
            recompute=recompute,
            every=every,
            budget=budget,
            offload=offload or [],
            mfu=mfu,
            fmt=format,
            unit=unit,
        )
    except MemcalcError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(text)


def _run(
    target: str,
    *,
    input_shape: str,
    gpu: str,
    precision: Precision,
    grad_dtype: GradDType | None,
    optimizer: OptimizerKind,
    foreach: bool,
    attention: Attention | None,
    impl: ImplChoice | None,
    dropout: float | None,
    gpus: int,
    zero: int,
    recompute: Recompute | None,
    every: int | None,
    budget: str | None,
    offload: list[str],
    mfu: float,
    fmt: Format,
    unit: Unit,
) -> str:
    from memcalc.estimate import Breakdown, Options, estimate_graph
    from memcalc.measure.build import Impl
    from memcalc.measure.trace import describe, parse_input_shape, resolve_target, trace_module
    from memcalc.profiles import load_profile
    from memcalc.report import render_estimate
    from memcalc.spec.loaders import training_setup
    from memcalc.strategies.selection import chosen_options

    batch, seq = parse_input_shape(input_shape)
    profile = load_profile(gpu)
    setup = training_setup(
        batch=batch,
        seq=seq,
        precision=precision,
        grad_dtype=grad_dtype,
        optimizer=optimizer,
        optimizer_foreach=foreach,
        attention=attention or Attention.sdpa,
        dropout=dropout,
        gpus=gpus,
        zero=zero,
    )
    options = chosen_options(recompute, every, budget, offload, mfu)

    resolved = resolve_target(target, setup, Impl((impl or ImplChoice.ours).value))
    notes = [
        f"activations traced from {target} at {batch}x{seq} under FakeTensorMode "
        "(CPU kernels, except dropout masks as bool and SDPA with dropout as flash, as on a GPU)"
    ]
    if resolved.kind == "module":
        setup = setup.replace(attention=Attention.sdpa)
        notes.append("attention as the module computes it (the kernel above is not used)")
    for flag, given, kinds in (
        ("--attention", attention is not None, ("spec", "hf-config")),
        ("--dropout", dropout is not None, ("spec", "hf-config")),
        ("--impl", impl is not None, ("spec",)),
    ):
        if given and resolved.kind not in kinds:
            _warn(f"{flag} has no effect on a {resolved.kind} target (the model runs as built)")
    if precision is Precision.fp8_mixed:
        _warn("--precision fp8-mixed: traced in bf16; fp8 copies of linear inputs are not traced")
    trace = trace_module(resolved.build, setup, name=resolved.name, vocab_size=resolved.vocab_size)
    typer.echo(describe(trace), err=True)
    for note in trace.notes:
        _warn(note)

    notes.append(
        "no separate LM head: tied to the embedding, counted once"
        if trace.tied
        else "untied embedding and LM head"
    )
    plain = setup.replace(dropout=None)  # already applied to the model

    def run(options: Options) -> Breakdown:
        return estimate_graph(
            trace.name, trace.graph, trace.counts, plain, profile, options, notes=tuple(notes)
        )

    return render_estimate(run, trace.graph.num_layers, setup, options, fmt, unit)


def _warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)
