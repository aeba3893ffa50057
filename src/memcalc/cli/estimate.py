"""``memcalc estimate``: parse the flags, estimate every strategy (or the one chosen), print."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import click

from memcalc.cli.common import (
    finetune_options,
    fit_options,
    gpu_memory_option,
    gpu_option,
    layout_options,
    model_option,
    output_options,
    routing_options,
    setup_options,
    strategy_options,
    terminal_width,
    view_options,
)
from memcalc.cli.inputs import Inputs, read_inputs
from memcalc.estimate import Breakdown, Options, estimate
from memcalc.profiles import GpuProfile
from memcalc.report.estimate import render_breakdowns, strategy_rows
from memcalc.spec.model import ModelSpec
from memcalc.strategies.selection import chosen_options

EXAMPLES = """\b
Examples:
  memcalc estimate --model llama-3-8b --gpu h100 --seq 8192
  memcalc estimate --model llama-2-7b --recompute full --offload optimizer=cpu
  memcalc estimate --model llama-3-70b --seq 8192 --tp 8 --pp 4 --dp 2 --microbatches 16 --zero 1
  memcalc estimate --model llama-3-8b --gpu 4090 --seq 2048 --lora-rank 16 --quantize nf4
  memcalc estimate --model path/to/config.json --format json
  memcalc estimate --model llama-3-8b --seq 8192 --wide --plot strategies.svg
"""


@click.command("estimate", epilog=EXAMPLES)
@model_option()
@gpu_option
@gpu_memory_option
@setup_options
@layout_options
@finetune_options
@routing_options
@strategy_options
@fit_options
@output_options
@view_options
def estimate_command(**values: Any) -> None:
    """Split the memory of one training step into parameters, gradients, optimizer states and
    activations under each recompute / offload strategy, and say whether it fits."""
    plot = values["plot"]
    if plot is not None:
        from memcalc.plot import check_path

        check_path(plot)  # before the estimate: a bad name or a missing extra fails fast
    run, inputs, options = estimate_inputs(values)
    rows = strategy_rows(run, inputs.spec.num_layers, inputs.setup, options, inputs.profiles[0])
    click.echo(
        render_breakdowns(
            rows,
            detail=options is not None,
            fmt=values["fmt"],
            unit=values["unit"],
            hint=plan_hint(values),
            wide=values["wide"],
            width=terminal_width(),
        )
    )
    if plot is not None:
        from memcalc.plot import plot_estimate

        path = plot_estimate(rows, plot, values["unit"], detail=options is not None)
        click.echo(f"chart: {path}", err=True)


def estimate_inputs(
    values: dict[str, Any],
    spec: ModelSpec | None = None,
    gpu: str | GpuProfile | None = None,
) -> tuple[Callable[[Options], Breakdown], Inputs, Options | None]:
    """What the option values ask for, validated: a function estimating one strategy (at
    the command's MFU and headroom), the inputs, and the chosen strategy (None: none chosen).
    ``spec`` and ``gpu`` replace ``--model`` and ``--gpu``. The command line's and the Python
    API's (``memcalc.api.estimate``) one conversion; needs the command's click context."""
    inputs = read_inputs(values, (gpu or values["gpu"],), spec=spec)
    model, setup, profile = inputs.spec, inputs.setup, inputs.profiles[0]
    mfu, headroom = values["mfu"], inputs.headroom
    options = chosen_options(
        values["recompute"],
        values["every"],
        values["budget"],
        list(values["offload"]),
        values["mfu"],
    )

    def run(o: Options) -> Breakdown:
        # the table's strategies and the chosen one run at the same MFU and headroom
        return estimate(model, setup, profile, replace(o, mfu=mfu, headroom=headroom))

    return run, inputs, options


def plan_hint(values: dict[str, Any]) -> str:
    """The ``memcalc plan`` command for the same model, GPU and setup."""
    words = ["memcalc plan", f"--model {values['model']}", f"--gpu {values['gpu']}"]
    for flag, default in (("seq", 1024), ("batch", 1)):
        if values[flag] != default:
            words.append(f"--{flag} {values[flag]}")
    for flag in ("precision", "optimizer", "quantize"):
        value = values.get(flag)
        if value is not None and value.value not in ("bf16-mixed", "adamw", "none"):
            words.append(f"--{flag} {value.value}")
    if values.get("lora_rank") is not None:
        words.append(f"--lora-rank {values['lora_rank']}")
    return " ".join(words)
