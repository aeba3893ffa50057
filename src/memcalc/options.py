"""Command-line options shared by several commands (estimate, plan, trace, measure), declared
once as typed aliases so their names, help and choices stay the same everywhere."""

from __future__ import annotations

from typing import Annotated

import typer

from memcalc.report import Format
from memcalc.spec.training import Attention, GradDType, Loss, OptimizerKind, Precision
from memcalc.strategies.recompute import Recompute
from memcalc.units import Unit

GpuOpt = Annotated[
    str, typer.Option(help="GPU profile name (memcalc profiles list) or a profile TOML path.")
]
PrecisionOpt = Annotated[Precision, typer.Option(help="Precision recipe.")]
GradDtypeOpt = Annotated[
    GradDType | None,
    typer.Option(help="Gradient dtype under -mixed (fp32 default, or bf16/fp16)."),
]
OptimizerOpt = Annotated[OptimizerKind, typer.Option(help="Optimizer.")]
ForeachOpt = Annotated[bool, typer.Option(help="Multi-tensor optimizer step.")]
AttentionOpt = Annotated[Attention, typer.Option(help="Attention kernel.")]
LossOpt = Annotated[Loss, typer.Option(help="Loss implementation.")]
DropoutOpt = Annotated[
    float | None, typer.Option(help="Override every dropout rate (default: from the model).")
]
GpusOpt = Annotated[
    int, typer.Option(help="Data-parallel GPUs sharing ZeRO shards (per-GPU memory shown).")
]
ZeroOpt = Annotated[
    int, typer.Option(help="ZeRO stage: 0 none, 1 optimizer, 2 +gradients, 3 +parameters.")
]
RecomputeOpt = Annotated[
    Recompute | None, typer.Option(help="One recompute strategy (prints a detailed breakdown).")
]
EveryOpt = Annotated[
    int | None, typer.Option(help="k for --recompute every-k (default round(sqrt(N))).")
]
BudgetOpt = Annotated[
    str | None, typer.Option(help="Activation budget for --recompute budget, e.g. 20GiB or 2e10.")
]
OffloadOpt = Annotated[
    list[str] | None,
    typer.Option(help="WHAT=WHERE, repeatable: optimizer=cpu|nvme, params=cpu, activations=cpu."),
]
MfuOpt = Annotated[
    float, typer.Option(help="Model-FLOPs utilisation used to turn FLOPs into time.")
]
FormatOpt = Annotated[Format, typer.Option(help="Output format.")]
UnitOpt = Annotated[Unit, typer.Option(help="Memory unit: GiB (2^30) or GB (10^9).")]
