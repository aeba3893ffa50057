"""``memcalc trace``: trace any model under FakeTensorMode into the op graph and print what
``memcalc estimate`` prints for it. torch is imported only when the command runs."""

from __future__ import annotations

from typing import Any

import click

from memcalc.cli.common import (
    EnumChoice,
    gpu_option,
    layout_fields,
    layout_options,
    output_options,
    strategy_options,
)
from memcalc.errors import MemcalcError
from memcalc.install_hints import torch_missing
from memcalc.spec.training import Attention, GradDType, OptimizerKind, Precision

TORCH_MISSING = torch_missing("trace")
EXAMPLES = """\b
Examples:
  memcalc trace mypkg.models:build_model --input-shape 4x1024 --gpu a100
  memcalc trace path/to/config.json --input-shape 1x4096 --recompute full
"""


@click.command("trace", epilog=EXAMPLES)
@click.argument("target")
@click.option(
    "--input-shape",
    default="1x1024",
    show_default=True,
    help="Token ids fed to the model: batch x sequence, e.g. 4x1024.",
)
@gpu_option
@click.option(
    "--precision",
    type=EnumChoice(Precision),
    default=Precision.bf16_mixed.value,
    show_default=True,
    help="Precision recipe (the model is traced in its dtype).",
)
@click.option(
    "--grad-dtype", type=EnumChoice(GradDType), default=None, help="Gradient dtype under -mixed."
)
@click.option(
    "--optimizer",
    type=EnumChoice(OptimizerKind),
    default=OptimizerKind.adamw.value,
    show_default=True,
    help="Optimizer.",
)
@click.option(
    "--foreach/--no-foreach", default=True, show_default=True, help="Multi-tensor optimizer step."
)
@click.option(
    "--attention",
    type=EnumChoice(Attention),
    default=None,
    help="Attention kernel of HF / preset models (default sdpa).",
)
@click.option(
    "--impl",
    type=click.Choice(["ours", "hf"], case_sensitive=False),
    default=None,
    help="Build a preset / spec file as ours (default) or hf.",
)
@click.option(
    "--dropout",
    type=float,
    default=None,
    help="Override every dropout rate of an HF / preset model.",
)
@layout_options
@strategy_options
@output_options
def trace_command(**values: Any) -> None:
    """Trace any model under FakeTensorMode (no memory allocated): build it, run a training
    forward and backward, turn what autograd saved into memcalc's op graph, and print the
    estimate for it -- for architectures memcalc has no lowering for.

    TARGET is module:function returning an nn.Module (imported from the current directory;
    runs your code), an HF config.json (random init), or a memcalc preset / spec file.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MemcalcError(TORCH_MISSING) from None
    from memcalc.measure.trace_command import ImplChoice, run_trace

    layout = layout_fields(values)
    click.echo(
        run_trace(
            values["target"],
            input_shape=values["input_shape"],
            gpu=values["gpu"],
            precision=values["precision"],
            grad_dtype=values["grad_dtype"],
            optimizer=values["optimizer"],
            foreach=values["foreach"],
            attention=values["attention"],
            impl=ImplChoice(values["impl"]) if values["impl"] else None,
            dropout=values["dropout"],
            layout=layout,
            recompute=values["recompute"],
            every=values["every"],
            budget=values["budget"],
            offload=list(values["offload"]),
            mfu=values["mfu"],
            fmt=values["fmt"],
            unit=values["unit"],
        )
    )
