"""``memcalc estimate``: parse the flags, estimate every strategy (or the one chosen), print."""

from __future__ import annotations

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
)
from memcalc.cli.inputs import read_inputs
from memcalc.estimate import estimate
from memcalc.report import render_estimate
from memcalc.strategies.selection import chosen_options

EXAMPLES = """\b
Examples:
  memcalc estimate --model llama-3-8b --gpu h100 --seq 8192
  memcalc estimate --model llama-2-7b --recompute full --offload optimizer=cpu
  memcalc estimate --model llama-3-70b --seq 8192 --tp 8 --pp 4 --dp 2 --microbatches 16 --zero 1
  memcalc estimate --model llama-3-8b --gpu 4090 --seq 2048 --lora-rank 16 --quantize nf4
  memcalc estimate --model path/to/config.json --format json
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
def estimate_command(**values: Any) -> None:
    """Split the memory of one training step into parameters, gradients, optimizer states and
    activations under each recompute / offload strategy, and say whether it fits."""
    inputs = read_inputs(values, (values["gpu"],))
    spec, setup, profile = inputs.spec, inputs.setup, inputs.profiles[0]
    mfu, headroom = values["mfu"], inputs.headroom
    options = chosen_options(
        values["recompute"],
        values["every"],
        values["budget"],
        list(values["offload"]),
        values["mfu"],
    )
    click.echo(
        render_estimate(
            # the table's strategies and the chosen one run at the same MFU and headroom
            lambda o: estimate(spec, setup, profile, replace(o, mfu=mfu, headroom=headroom)),
            spec.num_layers,
            setup,
            options,
            values["fmt"],
            values["unit"],
            hint=plan_hint(values),
        )
    )


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
