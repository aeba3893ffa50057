"""``memcalc plan``: the fewest GPUs of each kind that fit, the fastest configuration within
``--max-gpus``, the largest micro-batch or sequence that fits (``--maximize``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from memcalc.cli.common import (
    MFU,
    finetune_options,
    fit_options,
    gpu_memory_option,
    model_option,
    output_options,
    routing_options,
    setup_options,
    terminal_width,
    view_options,
)
from memcalc.cli.inputs import read_inputs
from memcalc.errors import MemcalcError
from memcalc.estimate import Options
from memcalc.profiles import DEFAULT_GPU, GpuProfile
from memcalc.spec.model import ModelSpec
from memcalc.units import parse_count

if TYPE_CHECKING:
    from memcalc.plan import Maximize, Maximized, PlanRequest, PlanResult

EXAMPLES = """\b
Examples:
  memcalc plan --model llama-3-70b --gpu h100-sxm-80gb --seq 8192 --global-batch 512
  memcalc plan --model llama-2-7b --gpu rtx-4090-24gb --gpu a100-sxm-80gb --gpu h100-sxm-80gb
  memcalc plan --model llama-3-8b --gpu rtx-4090-24gb --lora-rank 16 --maximize batch
  memcalc plan --model qwen3-32b --gpu h100-sxm-80gb --max-gpus 64 --format json
  memcalc plan --model llama-2-7b --seq 4096 --max-gpus 8 --wide --plot plan.png
"""

CONSTRAINT_FLAGS = (
    "tp",
    "pp",
    "cp",
    "ep",
    "zero",
    "recompute",
    "offload",
    "no_offload",
    "max_step_time",
    "min_tokens_per_s",
    "impractical",
)
"""The options ``plan.constraints.parse_constraints`` reads."""

MAX_GPUS = 65536
"""The most GPUs ``--max-gpus`` may ask for (the search grows with it)."""


@click.command("plan", epilog=EXAMPLES)
@model_option()
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    help=f"GPU profile or alias, repeatable to compare kinds (default {DEFAULT_GPU}).",
)
@gpu_memory_option
@setup_options
@finetune_options
@routing_options
@click.option(
    "--max-gpus", type=int, default=64, show_default=True, help="Most GPUs of one kind to use."
)
@click.option(
    "--global-batch",
    type=int,
    default=None,
    help="Sequences per optimizer step over all GPUs (micro-batch x accumulation x dp).",
)
@click.option(
    "--global-tokens",
    default=None,
    help="Tokens per optimizer step (e.g. 4M): --global-batch = this / --seq.",
)
@click.option(
    "--microbatches",
    type=int,
    default=1,
    show_default=True,
    help="Accumulation steps without --global-batch (pipelines run at least pp).",
)
@fit_options
@click.option(
    "--mfu",
    type=MFU,
    default=None,
    show_default=False,
    help="Rate every matmul and attention kernel at this fraction of peak instead of by "
    "its shape (default: the kernel model).",
)
@click.option(
    "--maximize",
    type=click.Choice(["batch", "seq"], case_sensitive=False),
    default=None,
    help="Also find the largest micro-batch or sequence length that fits.",
)
@click.option("--tp", default=None, help="Tensor-parallel degrees to try: one (8) or a set (4,8).")
@click.option("--pp", default=None, help="Pipeline stages to try (e.g. 1,2,4).")
@click.option("--cp", default=None, help="Context-parallel degrees to try.")
@click.option("--ep", default=None, help="Expert-parallel degrees to try (MoE).")
@click.option("--zero", default=None, help="ZeRO stages to try (e.g. 1 or 1,3).")
@click.option(
    "--recompute", default=None, help="Recompute strategies to try (e.g. none,selective,full)."
)
@click.option(
    "--offload",
    multiple=True,
    help="Offload combinations to try: none, optimizer=cpu, ... (comma-separated; + joins "
    "one combination's parts: optimizer=cpu+activations=cpu).",
)
@click.option("--no-offload", is_flag=True, help="Offload nothing.")
@click.option("--max-step-time", default=None, help="Longest step accepted (e.g. 30s, 2min).")
@click.option(
    "--min-tokens-per-s",
    default=None,
    help="Least throughput accepted: in all (2M) or per GPU (3000/gpu).",
)
@click.option(
    "--impractical",
    is_flag=True,
    help="Also offer configurations under 1/10 of the best tokens/s per GPU found.",
)
@click.option("--top", type=int, default=10, show_default=True, help="Rows of the ranked table.")
@click.option("--why", is_flag=True, help="Say why fewer GPUs do not fit.")
@output_options
@view_options
def plan_command(**values: Any) -> None:
    """The fewest GPUs of each kind that fit, the fastest configuration within --max-gpus and
    a ranked table -- searched over data, tensor, pipeline, context and expert parallelism,
    ZeRO stages, recompute, offload and gradient accumulation."""
    from memcalc.report.plan import render_plan

    if values["plot"] is not None:
        from memcalc.plot import check_path

        check_path(values["plot"])  # before the search: a bad name or a missing extra fails fast
    request, what = plan_request(values)
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


def plan_request(
    values: dict[str, Any],
    spec: ModelSpec | None = None,
    gpus: tuple[str | GpuProfile, ...] = (),
) -> tuple[PlanRequest, Maximize | None]:
    """The request the option values make (of ``spec`` and on ``gpus`` when given, else of
    ``--model`` on ``--gpu``), validated: the command line's and the Python API's
    (``memcalc.api.plan``) one conversion. Needs the command's click context (``given``)."""
    from memcalc.plan import Maximize, PlanRequest
    from memcalc.plan.constraints import parse_constraints

    # --tp, --zero, ... of plan are sets to search, not the setup's layout
    setup_values = {k: v for k, v in values.items() if k not in CONSTRAINT_FLAGS}
    inputs = read_inputs(setup_values, gpus or tuple(values["gpus"] or (DEFAULT_GPU,)), spec=spec)
    spec, setup, profiles = inputs.spec, inputs.setup, inputs.profiles
    max_gpus = _bounded("--max-gpus", values["max_gpus"], 1, MAX_GPUS)
    top = _bounded("--top", values["top"], 1, 1000)
    _bounded("--microbatches", values["microbatches"], 1, 10**6)
    headroom = inputs.headroom
    global_batch = _global_batch(values, setup.seq)
    what = Maximize(values["maximize"].lower()) if values["maximize"] else None
    if what is Maximize.batch and global_batch is not None:
        raise MemcalcError(
            "--maximize batch: the micro-batch is searched under --global-batch; drop one of them"
        )
    request = PlanRequest(
        spec,
        setup,
        profiles,
        max_gpus=max_gpus,
        global_batch=global_batch,
        options=Options(mfu=values["mfu"], headroom=headroom),
        top=top,
        constraints=parse_constraints(**{k: values[k] for k in CONSTRAINT_FLAGS}),
    )
    return request, what


def run_plan(
    request: PlanRequest,
    what: Maximize | None,
    progress: Callable[[float], None] | None = None,
) -> tuple[PlanResult, list[Maximized]]:
    """The search, and ``--maximize`` on every GPU kind (those where anything fits)."""
    from memcalc.plan import maximize, plan

    result = plan(request, progress)
    found = []
    if what is not None:
        for gpu in request.gpus:
            m = maximize(request, what, gpu, progress)
            if m is not None:
                found.append(m)
    return result, found


def _bounded(flag: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise MemcalcError(f"{flag}: must be between {low} and {high:,}, got {value}")
    return value


def _global_batch(values: dict[str, Any], seq: int) -> int | None:
    batch: int | None = values["global_batch"]
    tokens: str | None = values["global_tokens"]
    if batch is not None and tokens is not None:
        raise MemcalcError("--global-tokens: give --global-batch or --global-tokens, not both")
    if tokens is not None:
        count = parse_count(tokens, "--global-tokens")
        if count % seq:
            raise MemcalcError(
                f"--global-tokens: {count:,} is not a multiple of --seq ({seq}); "
                f"nearest: {max(1, round(count / seq)) * seq:,}"
            )
        batch = count // seq
    if batch is not None:
        _bounded("--global-batch", batch, 1, 10**6)
    return batch


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
