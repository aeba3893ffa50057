"""``memcalc plan``: the cheapest strategy that fits, per GPU count and ZeRO stage."""

from __future__ import annotations

from typing import Annotated

import typer

from memcalc.errors import MemcalcError
from memcalc.options import AttentionOpt, OptimizerOpt, PrecisionOpt
from memcalc.plan import plan
from memcalc.profiles import DEFAULT_GPU, load_profile
from memcalc.report import Format, render_plan
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.presets import DEFAULT_MODEL
from memcalc.spec.training import Attention, OptimizerKind, Precision
from memcalc.units import Unit


def plan_command(
    model: Annotated[str, typer.Option(help="Preset name or spec / HF config.json path.")] = (
        DEFAULT_MODEL
    ),
    gpu: Annotated[str, typer.Option(help="GPU profile name or file.")] = DEFAULT_GPU,
    batch: Annotated[int, typer.Option(help="Micro-batch size per GPU.")] = 1,
    seq: Annotated[int, typer.Option(help="Sequence length.")] = 1024,
    precision: PrecisionOpt = Precision.bf16_mixed,
    optimizer: OptimizerOpt = OptimizerKind.adamw,
    attention: AttentionOpt = Attention.sdpa,
    max_gpus: Annotated[int, typer.Option(help="Largest data-parallel size tried.")] = 8,
    format: Annotated[Format, typer.Option(help="table, markdown, json or csv.")] = Format.table,
    unit: Annotated[Unit, typer.Option(help="Memory unit.")] = Unit.GiB,
) -> None:
    """For 1, 2, 4, ... GPUs and each ZeRO stage: the cheapest recompute / offload strategy
    that fits (least added step time), or that nothing fits."""
    spec = load_model(model)
    profile = load_profile(gpu)
    if max_gpus < 1:
        raise MemcalcError(f"--max-gpus: must be at least 1, got {max_gpus}")
    setup = training_setup(
        batch=batch, seq=seq, precision=precision, optimizer=optimizer, attention=attention
    )
    counts = [1 << i for i in range(max_gpus.bit_length()) if 1 << i <= max_gpus]
    typer.echo(
        render_plan(plan(spec, setup, profile, counts), spec.name, profile, fmt=format, unit=unit)
    )
