"""``memcalc plan``: the fewest GPUs of each kind that fit, the fastest configuration within
``--max-gpus``, the largest micro-batch or sequence that fits (``--maximize``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from memcalc.cli.common import output_options, say, terminal_width, view_options
from memcalc.cli.options import given_names, options
from memcalc.inputs import catalog

EXAMPLES = """\b
Examples:
  memcalc plan --model llama-3-70b --gpu h100-sxm-80gb --seq 8192 --global-batch 512
  memcalc plan --model llama-2-7b --gpu rtx-4090-24gb --gpu a100-sxm-80gb --gpu h100-sxm-80gb
  memcalc plan --model llama-3-8b --gpu rtx-4090-24gb --lora-rank 16 --maximize batch
  memcalc plan --model qwen3-32b --gpu h100-sxm-80gb --max-gpus 64 --format json
  memcalc plan --model llama-2-7b --seq 4096 --max-gpus 8 --wide --plot plan.png
"""

MAX_GPUS = 65536
"""The most GPUs ``--max-gpus`` may ask for (the search grows with it)."""


@click.command("plan", epilog=EXAMPLES)
@options(catalog.PLAN)
@click.option("--why", is_flag=True, help="Say why fewer GPUs do not fit.")
@output_options
@view_options
def plan_command(**values: Any) -> None:
    """The fewest GPUs of each kind that fit, the fastest configuration within --max-gpus and
    a ranked table -- searched over data, tensor, pipeline, context and expert parallelism,
    ZeRO stages, recompute, offload and gradient accumulation."""
    from memcalc.plan.inputs import plan_request, run_plan
    from memcalc.report.plan import render_plan

    if values["plot"] is not None:
        from memcalc.plot import check_path

        check_path(values["plot"])  # before the search: a bad name or a missing extra fails fast
    request, what, said = plan_request(values, given_names())
    say(said)
    with _progress() as progress:
        result, found = run_plan(request, what, progress)
    click.echo(
        render_plan(
            result,
            found,
            fmt=values["fmt"],
            unit=values["unit"],
            why=values["why"],
            wide=values["wide"],
            width=terminal_width(),
        )
    )
    if values["plot"] is not None and not result.rows:
        click.echo("note: --plot: nothing fits, so there is no configuration to draw", err=True)
    elif values["plot"] is not None:
        from memcalc.plot import plot_plan

        click.echo(f"chart: {plot_plan(result, values['plot'], values['unit'])}", err=True)


@contextmanager
def _progress() -> Iterator[Callable[[float], None] | None]:
    """A progress bar on a terminal's stderr once the search has run for a second."""
    if not sys.stderr.isatty():
        yield None
        return
    start = time.perf_counter()
    bar: Any = None

    def update(fraction: float) -> None:
        nonlocal bar
        if bar is None and time.perf_counter() - start > 1.0:
            bar = click.progressbar(length=1000, label="searching", file=sys.stderr)
            bar.__enter__()
        if bar is not None:
            bar.update(int(fraction * 1000) - bar.pos)

    try:
        yield update
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
