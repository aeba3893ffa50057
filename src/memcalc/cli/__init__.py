"""The memcalc command line: thin commands that parse, call one library function, print.

Every command is imported and built only when it runs (``COMMANDS``), so ``memcalc estimate``
starts without loading the quiz, torch or the other commands. Bad input of any kind (unknown
names, bad values, malformed files) ends with one line ``error: ...`` on stderr and exit code
2 -- never a traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

from memcalc.errors import MemcalcError

try:  # typer >= 0.20 vendors its own click
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer uses click itself
    from click.exceptions import NoArgsIsHelpError, UsageError

COMMANDS: dict[str, tuple[str, str, str]] = {
    "estimate": (
        "memcalc.cli.estimate",
        "estimate_command",
        "Memory of one training step, component by component, under each recompute / "
        "offload strategy, and whether it fits.",
    ),
    "plan": (
        "memcalc.cli.plan",
        "plan_command",
        "The cheapest strategy that fits, per GPU count and ZeRO stage.",
    ),
    "profiles": ("memcalc.cli.catalog", "profiles_app", "GPU profiles: list, show."),
    "models": ("memcalc.cli.catalog", "models_app", "Built-in model presets: list."),
    "quiz": (
        "memcalc.quiz.command",
        "quiz_command",
        "Learn where training memory goes: questions from the bank and computed for your "
        "model (English, Urdu).",
    ),
    "measure": (
        "memcalc.measure.command",
        "measure_command",
        "Run real training steps in PyTorch and compare every component with the estimate "
        "(needs torch).",
    ),
    "trace": (
        "memcalc.measure.trace_command",
        "trace_command",
        "Any nn.Module or HF config under FakeTensorMode into the op graph, then estimate "
        "it (needs torch).",
    ),
}
"""name -> (module, attribute: a command function or a typer app, one-line help)."""


class _LazyGroup(typer.core.TyperGroup):
    """The command group: each of COMMANDS is imported and built the first time it runs."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, name: str) -> Any:
        if name in COMMANDS and name not in self.commands:
            module, attribute, summary = COMMANDS[name]
            target = getattr(importlib.import_module(module), attribute)
            if isinstance(target, typer.Typer):
                command = typer.main.get_command(target)
            else:
                sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
                sub.command(name, short_help=summary)(target)
                command = typer.main.get_command(sub)
            self.add_command(command, name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list, from COMMANDS (nothing is imported to print it)."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, _, summary) in COMMANDS.items()])


app = typer.Typer(
    cls=_LazyGroup,
    help="How much GPU memory a training job needs, and which recompute / offload strategy "
    "makes it fit.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """How much GPU memory a training job needs, and which recompute / offload strategy
    makes it fit."""


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
