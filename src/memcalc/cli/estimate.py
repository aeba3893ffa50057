"""``memcalc estimate``: parse the flags, estimate every strategy (or the one chosen), print."""

from __future__ import annotations

from typing import Annotated

import typer

from memcalc.estimate import DEFAULT_MFU, estimate
from memcalc.options import (
    AttentionOpt,
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
    PrecisionOpt,
    RecomputeOpt,
    UnitOpt,
    ZeroOpt,
)
from memcalc.profiles import DEFAULT_GPU, load_profile
from memcalc.report import Format, render_estimate
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.presets import DEFAULT_MODEL
from memcalc.spec.training import Attention, Loss, OptimizerKind, Precision
from memcalc.strategies.selection import chosen_options
from memcalc.units import Unit


def estimate_command(
    model: Annotated[
        str,
        typer.Option(
            help="Preset name (memcalc models list) or a spec TOML/JSON / HF config.json path."
        ),
    ] = DEFAULT_MODEL,
    gpu: GpuOpt = DEFAULT_GPU,
    batch: Annotated[int, typer.Option(help="Micro-batch size (sequences).")] = 1,
    seq: Annotated[int, typer.Option(help="Sequence length (tokens).")] = 1024,
    precision: PrecisionOpt = Precision.bf16_mixed,
    grad_dtype: GradDtypeOpt = None,
    optimizer: OptimizerOpt = OptimizerKind.adamw,
    foreach: ForeachOpt = True,
    attention: AttentionOpt = Attention.sdpa,
    loss: Annotated[Loss, typer.Option(help="Loss implementation.")] = Loss.standard,
    dropout: Annotated[
        float | None, typer.Option(help="Override every dropout rate (default: from the model).")
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
    """Split the memory of one training step into parameters, gradients, optimizer states
    and activations under each recompute / offload strategy, and say whether it fits."""
    spec = load_model(model)
    profile = load_profile(gpu)
    setup = training_setup(
        batch=batch,
        seq=seq,
        precision=precision,
        grad_dtype=grad_dtype,
        optimizer=optimizer,
        optimizer_foreach=foreach,
        attention=attention,
        loss=loss,
        dropout=dropout,
        gpus=gpus,
        zero=zero,
    )
    options = chosen_options(recompute, every, budget, offload, mfu)
    typer.echo(
        render_estimate(
            lambda o: estimate(spec, setup, profile, o),
            spec.num_layers,
            setup,
            options,
            format,
            unit,
        )
    )
