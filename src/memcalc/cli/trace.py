"""``memcalc trace``: trace any model under FakeTensorMode into the op graph and print what
``memcalc estimate`` prints for it. torch is imported only when the command runs."""

from __future__ import annotations

from typing import Any

import click

from memcalc.cli.common import (
    gpu_option,
    layout_options,
    measured_code,
    output_options,
    say,
    strategy_options,
    terminal_width,
)
from memcalc.cli.options import options
from memcalc.errors import MemcalcError
from memcalc.inputs import catalog
from memcalc.inputs.catalog import by_name
from memcalc.inputs.flags import choice_of, optional
from memcalc.inputs.read import framework_field, layout_fields
from memcalc.install_hints import torch_missing
from memcalc.spec.training import MAX_TOKENS, Attention

TORCH_MISSING = torch_missing("trace")
SETUP = by_name(catalog.SETUP)
TRACE_SETUP = (
    SETUP["precision"].with_default(
        SETUP["precision"].default, help="Precision recipe (the model is traced in its dtype)."
    ),
    SETUP["grad_dtype"],
    SETUP["optimizer"],
    SETUP["foreach"],
    SETUP["attention"].with_default(
        None,
        parse=optional(choice_of(Attention)),
        help="Attention kernel of HF / preset models (default sdpa).",
    ),
)
"""The setup flags ``trace`` shares with ``estimate`` (the attention kernel only where the
target is built by memcalc)."""
TRACE_DROPOUT = SETUP["dropout"].with_default(
    None, help="Override every dropout rate of an HF / preset model."
)
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
@options(TRACE_SETUP)
@click.option(
    "--impl",
    type=click.Choice(["ours", "hf"], case_sensitive=False),
    default=None,
    hidden=True,
    help="Deprecated: --framework reference (ours) or --framework hf (hf).",
)
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress on stderr (only the estimate on stdout)."
)
@options([TRACE_DROPOUT])
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
    check_input_shape(values["input_shape"])  # bad input is reported with or without torch
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MemcalcError(TORCH_MISSING) from None
    from memcalc.measure.progress import interrupted
    from memcalc.measure.trace_command import ImplChoice, run_trace

    layout = layout_fields(values)
    said: list[str] = []
    framework = framework_field(values, said)
    say(tuple(said))
    given = framework is not None or values["impl"] is not None
    impl = ImplChoice(measured_code(framework, values["impl"])) if given else None
    try:
        text = run_trace(
            values["target"],
            input_shape=values["input_shape"],
            gpu=values["gpu"],
            precision=values["precision"],
            grad_dtype=values["grad_dtype"],
            optimizer=values["optimizer"],
            foreach=values["foreach"],
            attention=values["attention"],
            impl=impl,
            dropout=values["dropout"],
            layout=layout,
            recompute=values["recompute"],
            every=values["every"],
            budget=values["budget"],
            offload=list(values["offload"]),
            mfu=values["mfu"],
            fmt=values["fmt"],
            unit=values["unit"],
            quiet=values["quiet"],
            width=terminal_width(),
        )
    except KeyboardInterrupt as e:
        click.echo(interrupted("trace", getattr(e, "phase", "")), err=True)
        raise click.exceptions.Exit(130) from None
    except SystemExit as e:  # the user's target called sys.exit
        raise MemcalcError(
            f"{values['target']}: the target exited (sys.exit({e.code!r})) instead of returning "
            "an nn.Module"
        ) from None
    click.echo(text)


def check_input_shape(text: str) -> None:
    """``--input-shape BxS``: two ASCII whole numbers from 1, at most MAX_TOKENS tokens.

    >>> check_input_shape("4x1024")
    >>> check_input_shape("²x8")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memcalc.errors.MemcalcError: --input-shape: expected BxS ... got '²x8'
    """
    parts = text.lower().replace("×", "x").split("x")
    if len(parts) != 2 or not all(
        p.strip().isascii() and p.strip().isdigit() and len(p.strip()) <= 20 and int(p) > 0
        for p in parts
    ):
        raise MemcalcError(
            f"--input-shape: expected BxS (batch x sequence length), e.g. 4x1024; got {text[:40]!r}"
        )
    tokens = int(parts[0]) * int(parts[1])
    if tokens > MAX_TOKENS:
        raise MemcalcError(
            f"--input-shape: {tokens:,} tokens per micro-batch is over {MAX_TOKENS:,} (batch x seq)"
        )
