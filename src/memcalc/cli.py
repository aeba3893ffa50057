"""The memcalc command line: thin commands that parse, call one library function, print.

Bad input of any kind (unknown names, bad values, malformed files) ends with one line
``error: ...`` on stderr and exit code 2 -- never a traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Any

import typer

from memcalc.errors import MemcalcError
from memcalc.options import (
    AttentionOpt,
    BudgetOpt,
    EveryOpt,
    ForeachOpt,
    FormatOpt,
    GpuOpt,
    GpusOpt,
    GradDtypeOpt,
    MfuOpt,
    OffloadOpt,
    OptimizerOpt,
    PrecisionOpt,
    RecomputeOpt,
    UnitOpt,
    ZeroOpt,
)

try:  # typer >= 0.20 vendors its own click
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer uses click itself
    from click.exceptions import NoArgsIsHelpError, UsageError
from memcalc.estimate import DEFAULT_MFU, estimate
from memcalc.params import count_params
from memcalc.plan import plan
from memcalc.profiles import DEFAULT_GPU, list_profiles, load_profile
from memcalc.report import Format, render_estimate, render_plan
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.presets import DEFAULT_MODEL, PRESETS
from memcalc.spec.training import Attention, Loss, OptimizerKind, Precision
from memcalc.strategies.selection import chosen_options
from memcalc.units import Unit, to_unit

LAZY_COMMANDS = {
    "quiz": (
        "memcalc.quiz.command",
        "quiz_command",
        "Learn where training memory goes: "
        "questions from the bank and computed for your model (English, Urdu).",
    ),
    "measure": (
        "memcalc.measure.command",
        "measure_command",
        "Run real training steps in "
        "PyTorch and compare every component with the estimate (needs torch).",
    ),
    "trace": (
        "memcalc.measure.trace_command",
        "trace_command",
        "Any nn.Module or HF config "
        "under FakeTensorMode into the op graph, then estimate it (needs torch).",
    ),
}
"""Commands whose modules are imported only when they run (start-up of estimate stays small):
name -> (module, function, one-line help)."""


class _LazyGroup(typer.core.TyperGroup):
    """The command group with LAZY_COMMANDS loaded on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: Any, name: str) -> Any:
        if name in LAZY_COMMANDS and name not in self.commands:
            module, function, summary = LAZY_COMMANDS[name]
            sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
            sub.command(name, short_help=summary)(
                getattr(importlib.import_module(module), function)
            )
            self.add_command(typer.main.get_command(sub), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list, without importing the lazy commands for their help."""
        rows = []
        for name in self.list_commands(ctx):
            if name in LAZY_COMMANDS and name not in self.commands:
                rows.append((name, LAZY_COMMANDS[name][2]))
            else:
                cmd = self.commands[name]
                rows.append((name, cmd.get_short_help_str(limit=formatter.width)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    cls=_LazyGroup,
    help="How much GPU memory a training job needs, and which recompute / offload strategy "
    "makes it fit.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
profiles_app = typer.Typer(help="GPU profiles (profiles/*.toml).", no_args_is_help=True)
models_app = typer.Typer(help="Built-in model presets.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")
app.add_typer(models_app, name="models")


@app.command("estimate")
def estimate_command(
    model: Annotated[
        str,
        typer.Option(
            help="Preset name (memcalc models list) or a spec TOML/JSON / HF config.json path."
        ),
    ] = DEFAULT_MODEL,
    gpu: GpuOpt = DEFAULT_GPU,
    batch: Annotated[int, typer.Option(help="Micro-batch size (sequences).")] = 1,
    seq: Annotated[int, typer.Option(help="Sequence length (tokens).")] = 1024,
    precision: PrecisionOpt = Precision.bf16_mixed,
    grad_dtype: GradDtypeOpt = None,
    optimizer: OptimizerOpt = OptimizerKind.adamw,
    foreach: ForeachOpt = True,
    attention: AttentionOpt = Attention.sdpa,
    loss: Annotated[Loss, typer.Option(help="Loss implementation.")] = Loss.standard,
    dropout: Annotated[
        float | None, typer.Option(help="Override every dropout rate (default: from the model).")
    ] = None,
    gpus: GpusOpt = 1,
    zero: ZeroOpt = 0,
    recompute: RecomputeOpt = None,
    every: EveryOpt = None,
    budget: BudgetOpt = None,
    offload: OffloadOpt = None,
    mfu: MfuOpt = DEFAULT_MFU,
    format: FormatOpt = Format.table,
    unit: UnitOpt = Unit.GiB,
) -> None:
    """Split the memory of one training step into parameters, gradients, optimizer states
    and activations under each recompute / offload strategy, and say whether it fits."""
    spec = load_model(model)
    profile = load_profile(gpu)
    setup = training_setup(
        batch=batch,
        seq=seq,
        precision=precision,
        grad_dtype=grad_dtype,
        optimizer=optimizer,
        optimizer_foreach=foreach,
        attention=attention,
        loss=loss,
        dropout=dropout,
        gpus=gpus,
        zero=zero,
    )
    options = chosen_options(recompute, every, budget, offload, mfu)
    typer.echo(
        render_estimate(
            lambda o: estimate(spec, setup, profile, o),
            spec.num_layers,
            setup,
            options,
            format,
            unit,
        )
    )


@app.command("plan")
def plan_command(
    model: Annotated[str, typer.Option(help="Preset name or spec / HF config.json path.")] = (
        DEFAULT_MODEL
    ),
    gpu: Annotated[str, typer.Option(help="GPU profile name or file.")] = DEFAULT_GPU,
    batch: Annotated[int, typer.Option(help="Micro-batch size per GPU.")] = 1,
    seq: Annotated[int, typer.Option(help="Sequence length.")] = 1024,
    precision: PrecisionOpt = Precision.bf16_mixed,
    optimizer: OptimizerOpt = OptimizerKind.adamw,
    attention: AttentionOpt = Attention.sdpa,
    max_gpus: Annotated[int, typer.Option(help="Largest data-parallel size tried.")] = 8,
    format: Annotated[Format, typer.Option(help="table, markdown, json or csv.")] = Format.table,
    unit: Annotated[Unit, typer.Option(help="Memory unit.")] = Unit.GiB,
) -> None:
    """For 1, 2, 4, ... GPUs and each ZeRO stage: the cheapest recompute / offload strategy
    that fits (least added step time), or that nothing fits."""
    spec = load_model(model)
    profile = load_profile(gpu)
    if max_gpus < 1:
        raise MemcalcError(f"--max-gpus: must be at least 1, got {max_gpus}")
    setup = training_setup(
        batch=batch, seq=seq, precision=precision, optimizer=optimizer, attention=attention
    )
    counts = [1 << i for i in range(max_gpus.bit_length()) if 1 << i <= max_gpus]
    typer.echo(
        render_plan(plan(spec, setup, profile, counts), spec.name, profile, fmt=format, unit=unit)
    )


@profiles_app.command("list")
def profiles_list(
    unit: Annotated[Unit, typer.Option(help="Memory unit.")] = Unit.GiB,
) -> None:
    """List the built-in GPU profiles."""
    from tabulate import tabulate

    rows = []
    for name in list_profiles():
        p = load_profile(name)
        rows.append(
            [
                name,
                p.display_name,
                f"{to_unit(p.memory_bytes, unit):.1f}",
                f"{p.bf16_flops_per_s / 1e12:.0f}",
                f"{p.host_link_bytes_per_s / 1e9:.0f}",
                p.host_link,
                str(p.gpus_per_node),
                f"{p.intra_node_bytes_per_s / 1e9:.0f}",
            ]
        )
    typer.echo(
        tabulate(
            rows,
            headers=[
                "name",
                "GPU",
                f"memory ({unit.value})",
                "bf16 dense TFLOP/s",
                "host GB/s",
                "host link",
                "GPUs/node",
                "intra-node GB/s",
            ],
            disable_numparse=True,
        )
    )


@profiles_app.command("show")
def profiles_show(
    name: Annotated[str, typer.Argument(help="Profile name, alias (e.g. h100) or file.")],
) -> None:
    """Show every field of one GPU profile; fields a profile file leaves out are marked."""
    from tabulate import tabulate

    from memcalc.profiles import REFERENCE_PROFILE

    p = load_profile(name)
    defaulted = set(p.defaulted_fields())

    def mark(field: str) -> str:
        own = field in ("display_name", "source", "notes")
        return " (not set: default)" if own else f" (not set: {REFERENCE_PROFILE}'s figure)"

    typer.echo(
        tabulate(
            [[k, f"{v}{mark(k)}" if k in defaulted else v] for k, v in p.model_dump().items()],
            headers=["field", "value"],
            disable_numparse=True,
        )
    )


@models_app.command("list")
def models_list() -> None:
    """List the built-in model presets with their exact parameter counts."""
    from tabulate import tabulate

    rows = [
        [
            n,
            s.family.value,
            f"{count_params(s).total:,}",
            s.num_layers,
            s.hidden_size,
            s.num_heads,
            s.kv_heads,
            s.mlp_size,
            s.vocab_size,
            "yes" if s.tied else "no",
        ]
        for n, s in PRESETS.items()
    ]
    typer.echo(
        tabulate(
            rows,
            headers=[
                "name",
                "family",
                "parameters",
                "layers",
                "hidden",
                "heads",
                "kv heads",
                "mlp",
                "vocab",
                "tied",
            ],
            disable_numparse=True,
        )
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; any usage error or MemcalcError is one line and exit 2."""
    command = typer.main.get_command(app)
    try:
        # In non-standalone mode click returns a typer.Exit's code instead of raising it.
        code = command.main(args=argv, prog_name="memcalc", standalone_mode=False)
    except MemcalcError as e:
        typer.echo(f"error: {e}", err=True)
        return 2
    except NoArgsIsHelpError as e:
        typer.echo(e.ctx.get_help() if e.ctx else str(e))
        return 0
    except UsageError as e:
        message = " ".join(e.format_message().replace("Value error, ", "").split())
        typer.echo(f"error: {message}", err=True)
        return 2
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        return 130
    return code if isinstance(code, int) else 0


def run() -> None:  # pragma: no cover - console script
    sys.exit(main())
