"""``memcalc plan``: the cheapest strategy that fits, per GPU count and ZeRO stage."""

from __future__ import annotations

from typing import Any

import click

from memcalc.cli.common import EnumChoice, gpu_option, model_option, output_options
from memcalc.errors import MemcalcError
from memcalc.plan import plan
from memcalc.profiles import load_profile
from memcalc.report import render_plan
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.training import Attention, OptimizerKind, Precision

EXAMPLES = """\b
Examples:
  memcalc plan --model llama-2-7b --seq 4096 --max-gpus 8
  memcalc plan --model llama-3-70b --gpu h100 --seq 8192 --max-gpus 64 --format json
"""


@click.command("plan", epilog=EXAMPLES)
@model_option()
@gpu_option
@click.option(
    "--batch", "-b", type=int, default=1, show_default=True, help="Micro-batch size per GPU."
)
@click.option("--seq", "-s", type=int, default=1024, show_default=True, help="Sequence length.")
@click.option(
    "--precision",
    type=EnumChoice(Precision),
    default=Precision.bf16_mixed.value,
    show_default=True,
    help="Precision recipe.",
)
@click.option(
    "--optimizer",
    type=EnumChoice(OptimizerKind),
    default=OptimizerKind.adamw.value,
    show_default=True,
    help="Optimizer.",
)
@click.option(
    "--attention",
    type=EnumChoice(Attention),
    default=Attention.sdpa.value,
    show_default=True,
    help="Attention kernel.",
)
@click.option(
    "--max-gpus", type=int, default=8, show_default=True, help="Largest data-parallel size tried."
)
@output_options
def plan_command(**values: Any) -> None:
    """For 1, 2, 4, ... GPUs and each ZeRO stage: the cheapest recompute / offload strategy that
    fits (least added step time), or that nothing fits."""
    spec = load_model(values["model"])
    profile = load_profile(values["gpu"])
    max_gpus = values["max_gpus"]
    if max_gpus < 1:
        raise MemcalcError(f"--max-gpus: must be at least 1, got {max_gpus}")
    setup = training_setup(
        batch=values["batch"],
        seq=values["seq"],
        precision=values["precision"],
        optimizer=values["optimizer"],
        attention=values["attention"],
    )
    counts = [1 << i for i in range(max_gpus.bit_length()) if 1 << i <= max_gpus]
    click.echo(
        render_plan(
            plan(spec, setup, profile, counts),
            spec.name,
            profile,
            fmt=values["fmt"],
            unit=values["unit"],
        )
    )
