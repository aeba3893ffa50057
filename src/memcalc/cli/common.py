"""The option groups the commands share: the library's flags (``memcalc.inputs.catalog``) as
click options, and the command line's own (output format, unit, table width, chart)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from memcalc.cli.options import options
from memcalc.errors import MemcalcError
from memcalc.frameworks import FRAMEWORKS, FrameworkName, ModelCode, TensorParallel
from memcalc.inputs import catalog
from memcalc.inputs.flags import Flag, choice_of, optional_text
from memcalc.report import Format
from memcalc.spec.presets import DEFAULT_MODEL
from memcalc.units import Unit

F = TypeVar("F", bound=Callable[..., Any])


def model_option(default: str = DEFAULT_MODEL) -> Callable[[F], F]:
    return options([catalog.MODEL.with_default(default)])


gpu_option = options([catalog.GPU])
setup_options = options(catalog.SETUP)
layout_options = options(catalog.LAYOUT)
finetune_options = options(catalog.FINETUNE)
strategy_options = options(catalog.STRATEGY)

OUTPUT = (
    Flag("fmt", ("--format",), choice_of(Format), Format.table, "Output format."),
    Flag("unit", ("--unit",), choice_of(Unit), Unit.GiB, "Memory unit: GiB (2^30) or GB (10^9)."),
)
VIEW = (
    Flag(
        "wide",
        ("--wide",),
        bool,
        False,
        "Every column of the table (by default a few, fitted to the terminal).",
        switch="",
        show_default=False,
    ),
    Flag(
        "plot",
        ("--plot",),
        optional_text,
        None,
        "Also draw a chart to FILE (.png, .svg or .html); needs the plot extra: "
        "pip install -e '.[plot]' (or just matplotlib).",
        metavar="FILE",
    ),
)
output_options = options(OUTPUT)
view_options = options(VIEW)


def terminal_width() -> int:
    """Columns to fit text to: $COLUMNS, else the terminal's, else 80."""
    import shutil

    return shutil.get_terminal_size().columns


def measured_code(framework: FrameworkName | None, impl: str | None) -> str:
    """The model code ``measure`` builds: the framework's (reference by default), or what the
    deprecated ``--impl`` named (said on stderr)."""
    if impl is not None:
        name = FrameworkName.reference if impl.lower() == "ours" else FrameworkName.hf
        click.echo(
            f"note: --impl {impl.lower()} is deprecated: use --framework {name.value}", err=True
        )
        if framework not in (None, name):
            raise MemcalcError(f"--impl {impl} and --framework {framework.value} disagree")
        framework = name
    chosen = FRAMEWORKS[framework or FrameworkName.reference]
    if chosen.model_code is ModelCode.megatron_core:
        raise MemcalcError(MEGATRON_ON_CPU)
    if chosen.tensor_parallel is TensorParallel.megatron:
        raise MemcalcError(
            f"--framework: measure runs hf, reference (transformers or memcalc's model with "
            f"PyTorch's parallelism), torchtitan or torchtitan-0.2.2; {chosen.label} does not "
            "run here"
        )
    return chosen.model_code.value


MEGATRON_ON_CPU = (
    "--framework megatron: measure does not run Megatron-core, and on a CPU it cannot "
    "(megatron-core 0.16.1): Transformer Engine needs CUDA, and even the local spec stops at "
    "tensor_parallel/random.py:235 (torch.cuda.get_rng_state in model_parallel_cuda_manual_"
    "seed), distributed/param_and_grad_buffer.py:800 (buffers on torch.cuda.current_device), "
    "optimizer/optimizer.py:481 and pipeline_parallel/schedules.py:596 (device='cuda'); "
    "memcalc estimate --framework megatron estimates it, benchmarks/megatron_golden.py checks "
    "it against Megatron-LM's CI"
)
"""Why ``measure --framework megatron`` cannot run (read in megatron-core 0.16.1 on CPU torch
with gloo: with those calls shimmed, forward and backward of the local spec run, and the
optimizer and every schedule still stop at their hard-coded ``device="cuda"``)."""


def say(lines: tuple[str, ...]) -> None:
    """Notes and warnings of the inputs, one per line on stderr."""
    for line in lines:
        click.echo(line, err=True)
