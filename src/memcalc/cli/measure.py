"""``memcalc measure``: run the model for real and print estimate vs measured per component.
torch is imported only when the command runs."""

from __future__ import annotations

from typing import Any

import click

from memcalc.cli.common import (
    LAYOUT_KEYS,
    EnumChoice,
    finetune_fields,
    finetune_options,
    framework_field,
    gpu_option,
    layout_fields,
    layout_options,
    measured_code,
    model_option,
)
from memcalc.errors import MemcalcError
from memcalc.install_hints import torch_missing
from memcalc.measure.limits import BATCH_MAX, SEED_MAX
from memcalc.spec.training import Attention, OptimizerKind, Precision
from memcalc.strategies.recompute import Recompute

TORCH_MISSING = torch_missing("measure")
EXAMPLES = """\b
Examples:
  memcalc measure --model gpt2 --batch 4 --seq 512 --recompute full
  memcalc measure --model tests/data/tiny-llama.toml --framework hf --precision bf16-mixed
  memcalc measure --model tests/data/hf/tiny/mistral.json --framework hf --lora-rank 8
  memcalc measure --model tests/data/tiny-llama.toml --batch 2 --seq 32 --nproc 2 --zero 3 --dp 2
  memcalc measure --model tests/data/tiny-llama.toml --batch 2 --seq 32 --nproc 2 --tp 2
"""


@click.command("measure", epilog=EXAMPLES)
@model_option("gpt2")
@click.option(
    "--batch",
    "-b",
    type=click.IntRange(1, BATCH_MAX),
    default=1,
    show_default=True,
    help="Micro-batch size.",
)
@click.option(
    "--seq",
    "-s",
    type=click.IntRange(1, BATCH_MAX),
    default=512,
    show_default=True,
    help="Sequence length.",
)
@click.option(
    "--precision",
    type=EnumChoice(Precision),
    default=Precision.fp32.value,
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
@click.option("--dropout", type=float, default=None, help="Override every dropout rate, in [0, 1).")
@click.option(
    "--recompute",
    type=EnumChoice(Recompute),
    default=Recompute.none.value,
    show_default=True,
    help="Recompute strategy.",
)
@click.option(
    "--every", type=click.IntRange(min=1), default=None, help="k for --recompute every-k."
)
@click.option(
    "--offload", multiple=True, help="WHAT=WHERE: optimizer=cpu or activations=cpu (repeatable)."
)
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
    for key in (
        "lora_rank",
        "lora_alpha",
        "lora_targets",
        "lora_dropout",
        "quantize",
        "train_embeddings",
        "modules_to_save",
        "kbit_prep",
        "input_grads",
    ):
        values.pop(key)
    layout = layout_fields(values)
    for key in (*LAYOUT_KEYS, "fsdp_reshard"):
        values.pop(key, None)
    values["impl"] = measured_code(framework_field(values), values["impl"])
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
