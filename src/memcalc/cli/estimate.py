"""``memcalc estimate``: parse the flags, estimate every strategy (or the one chosen), print."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import click

from memcalc.cli.common import output_options, say, terminal_width, view_options
from memcalc.cli.options import given_names, options
from memcalc.estimate import Breakdown, Options, estimate
from memcalc.inputs import Inputs, catalog, estimate_inputs
from memcalc.report.estimate import render_breakdowns, strategy_rows

EXAMPLES = """\b
Examples:
  memcalc estimate --model llama-3-8b --gpu h100 --seq 8192
  memcalc estimate --model llama-2-7b --recompute full --offload optimizer=cpu
  memcalc estimate --model llama-3-70b --seq 8192 --tp 8 --pp 4 --dp 2 --microbatches 16 --zero 1
  memcalc estimate --model llama-3-8b --gpu 4090 --seq 2048 --lora-rank 16 --quantize nf4
  memcalc estimate --model path/to/config.json --format json
  memcalc estimate --model llama-3-8b --seq 8192 --wide --plot strategies.svg
  memcalc estimate --model llama-2-7b --seq 4096 --dp 8 --zero 3 --zero-engine deepspeed
"""


@click.command("estimate", epilog=EXAMPLES)
@options(catalog.ESTIMATE)
@output_options
@view_options
def estimate_command(**values: Any) -> None:
    """Split the memory of one training step into parameters, gradients, optimizer states and
    activations under each recompute / offload strategy, and say whether it fits."""
    plot = values["plot"]
    if plot is not None:
        from memcalc.plot import check_path

        check_path(plot)  # before the estimate: a bad name or a missing extra fails fast
    inputs, options, values = estimate_inputs(values, given_names())
    say(inputs.said)
    run = strategy_runner(inputs, values["mfu"])
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
    from memcalc.advice import loss_advice  # a fused loss that would lower the peak a lot

    advice = loss_advice(inputs.spec, inputs.setup, inputs.profiles[0], rows, values["unit"])
    if advice is not None:
        click.echo(f"note: {advice}", err=True)
    if plot is not None:
        from memcalc.plot import plot_estimate

        path = plot_estimate(rows, plot, values["unit"], detail=options is not None)
        click.echo(f"chart: {path}", err=True)


def strategy_runner(inputs: Inputs, mfu: float) -> Callable[[Options], Breakdown]:
    """A function estimating one strategy of ``inputs`` at the command's MFU and headroom
    (the table's strategies and the chosen one run at the same)."""

    def run(o: Options) -> Breakdown:
        profile = inputs.profiles[0]
        chosen = replace(o, mfu=mfu, headroom=inputs.headroom, alloc_conf=inputs.alloc_conf)
        return estimate(inputs.spec, inputs.setup, profile, chosen)

    return run


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
