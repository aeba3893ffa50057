"""``memcalc measure``: run the model for real and print estimate vs measured per component.
torch is imported only when the command runs."""

from __future__ import annotations

from typing import Any

import click

from memcalc.cli.common import (
    finetune_options,
    gpu_option,
    layout_options,
    measured_code,
    model_option,
    say,
)
from memcalc.cli.options import options
from memcalc.errors import MemcalcError
from memcalc.inputs import catalog
from memcalc.inputs.catalog import LAYOUT_FIELDS, by_name
from memcalc.inputs.flags import bounded, choice_of, number, optional
from memcalc.inputs.read import (
    FINETUNE_KEYS,
    engine_fields,
    finetune_fields,
    framework_field,
    layout_fields,
)
from memcalc.install_hints import torch_missing
from memcalc.measure.limits import BATCH_MAX, SEED_MAX
from memcalc.spec.training import Precision
from memcalc.strategies.recompute import Recompute

TORCH_MISSING = torch_missing("measure")
SETUP = by_name(catalog.SETUP)
STRATEGY = by_name(catalog.STRATEGY)
MEASURE_SETUP = (
    SETUP["batch"].with_default(1, parse=bounded(1, BATCH_MAX)),
    SETUP["seq"].with_default(512, parse=bounded(1, BATCH_MAX)),
    SETUP["precision"].with_default(Precision.fp32),
    SETUP["grad_dtype"].with_default(
        None,
        help="Gradient accumulation dtype under -mixed (DeepSpeed's data_types.grad_accum_dtype; "
        "--zero-engine deepspeed only).",
    ),
    SETUP["optimizer"],
    SETUP["attention"],
    SETUP["dropout"].with_default(None, parse=optional(number(-1e308, 1e308))),
    STRATEGY["recompute"].with_default(Recompute.none, parse=choice_of(Recompute)),
    STRATEGY["every"].with_default(None, parse=optional(bounded(1))),
    STRATEGY["offload"].with_default(
        (), help="WHAT=WHERE: optimizer=cpu or activations=cpu (repeatable)."
    ),
)
"""The setup flags ``measure`` shares with ``estimate``, with its own defaults (a CPU-sized
step in fp32) and bounds."""
EXAMPLES = """\b
Examples:
  memcalc measure --model gpt2 --batch 4 --seq 512 --recompute full
  memcalc measure --model tests/data/tiny-llama.toml --framework hf --precision bf16-mixed
  memcalc measure --model tests/data/hf/tiny/mistral.json --framework hf --lora-rank 8
  memcalc measure --model tests/data/tiny-llama.toml --batch 2 --seq 32 --nproc 2 --zero 3 --dp 2
  memcalc measure --model tests/data/tiny-llama.toml --batch 2 --seq 32 --nproc 2 --tp 2
  memcalc measure --model tests/data/deepspeed/tiny-b.toml --framework hf --batch 2 --seq 32
      --nproc 2 --dp 2 --zero 2 --zero-engine deepspeed --precision bf16-mixed
"""


@click.command("measure", epilog=EXAMPLES)
@model_option("gpt2")
@options(MEASURE_SETUP)
@click.option(
    "--impl",
    type=click.Choice(["ours", "hf"], case_sensitive=False),
    default=None,
    hidden=True,
    help="Deprecated: --framework reference (ours) or --framework hf (hf).",
)
@click.option(
    "--device", default=None, help="cpu, cuda or cuda:N (default: cuda if present, else cpu)."
)
@gpu_option
@click.option(
    "--tolerance",
    type=float,
    default=0.03,
    show_default=True,
    help="Largest relative error before exit code 1, in (0, 1].",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"], case_sensitive=False),
    default="table",
    show_default=True,
    help="table or json.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, SEED_MAX),
    default=0,
    show_default=True,
    help="Seed for weights and token ids (0 to 2**64 - 1).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Run even when the estimated need (plus a 10% margin) exceeds the memory available.",
)
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress on stderr (only the report on stdout)."
)
@finetune_options
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    default=None,
    help="Ranks to run under torchrun (gloo on CPU, nccl on CUDA) with the layout below; "
    "every rank is compared with its estimate.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=None,
    help="Seconds a --nproc run may take (default 600).",
)
@layout_options
@options(catalog.ENGINE)
def measure_command(**values: Any) -> None:
    """Run one warm-up and one measured training step; print estimate vs measured.

    Before building anything, the estimated need plus a 10% margin is compared with the memory
    available (free RAM on a CPU, free device memory on CUDA): a run that does not fit is
    refused with both numbers (exit 2) unless --force. On a CPU the estimate is that of the
    CPU's kernels; the GPU estimate is shown beside it."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MemcalcError(TORCH_MISSING) from None
    from memcalc.measure.command import run_measure

    values["offload"] = list(values["offload"])
    finetune = finetune_fields(values)
    for key in FINETUNE_KEYS:
        values.pop(key)
    layout = layout_fields(values) | engine_fields(values)
    if values["grad_dtype"] is not None:
        if "zero_engine" not in layout:
            raise MemcalcError(
                "--grad-dtype: measured under --zero-engine deepspeed only (torch's runs keep "
                "fp32 main gradients under -mixed)"
            )
        layout["grad_dtype"] = values["grad_dtype"].value
    values.pop("grad_dtype")
    for key in (*LAYOUT_FIELDS, "dp_gpus", "zero_engine", "ds"):
        values.pop(key, None)
    said: list[str] = []
    chosen = framework_field(values, said)
    values["impl"] = measured_code(chosen, values["impl"])
    say(tuple(said))
    if values["impl"] == "torchtitan":
        layout["framework"] = chosen  # its model code, checkpointing and FSDP2 groups
    values.pop("framework")
    values.pop("parallel_impl")
    from memcalc.measure.progress import interrupted

    try:
        text, ok = run_measure(**values, finetune=finetune, layout=layout)
    except KeyboardInterrupt as e:
        click.echo(interrupted("measure", getattr(e, "phase", "")), err=True)
        raise click.exceptions.Exit(130) from None
    click.echo(text)
    if not ok:
        raise click.exceptions.Exit(1)
