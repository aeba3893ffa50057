"""The memcalc command line: thin commands that parse, call one library function, print.

Every command is imported only when it runs (``COMMANDS``), so ``memcalc estimate`` starts
without loading the quiz, torch or the other commands. Bad input of any kind (unknown names,
bad values, malformed files) ends with one line ``error: ...`` on stderr and exit code 2 --
never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from memcalc import __version__
from memcalc.errors import MemcalcError

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
        "The fewest GPUs of each kind that fit, the fastest layout within --max-gpus, and a "
        "ranked table.",
    ),
    "profiles": ("memcalc.cli.catalog", "profiles_app", "GPU profiles: list, show."),
    "models": ("memcalc.cli.catalog", "models_app", "Built-in model presets: list."),
    "quiz": (
        "memcalc.cli.quiz",
        "quiz",
        "Learn where training memory goes: questions from the bank and computed for your "
        "model (English, Urdu).",
    ),
    "measure": (
        "memcalc.cli.measure",
        "measure_command",
        "Run real training steps in PyTorch and compare every component with the estimate "
        "(needs torch).",
    ),
    "trace": (
        "memcalc.cli.trace",
        "trace_command",
        "Any nn.Module or HF config under FakeTensorMode into the op graph, then estimate it "
        "(needs torch).",
    ),
}
"""name -> (module, attribute: a click command, one-line help)."""

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _LazyGroup(click.Group):
    """The command group: each of COMMANDS is imported the first time it runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMANDS and name not in self.commands:
            module, attribute, _ = COMMANDS[name]
            target = getattr(importlib.import_module(module), attribute)
            self.add_command(_with_version(target), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, from COMMANDS (nothing is imported to print it)."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, _, summary) in COMMANDS.items()])


def _with_version(command: click.Command) -> click.Command:
    """``command`` (and, for a group, its subcommands) with ``--version``, as the top level
    has it."""
    if not any("--version" in p.opts for p in command.params if isinstance(p, click.Option)):
        click.version_option(__version__, "--version", prog_name="memcalc")(command)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_version(sub)
    return command


@click.group(
    cls=_LazyGroup,
    context_settings=CONTEXT,
    no_args_is_help=True,
    epilog="Run `memcalc COMMAND -h` for a command's options and examples.",
)
@click.version_option(__version__, "--version", prog_name="memcalc")
def app() -> None:
    """How much GPU memory a training job needs, and which recompute / offload strategy makes
    it fit."""


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; any usage error or MemcalcError is one line and exit 2."""
    try:
        code = app.main(args=argv, prog_name="memcalc", standalone_mode=False)
    except MemcalcError as e:
        click.echo(f"error: {e}", err=True)
        return 2
    except click.exceptions.NoArgsIsHelpError as e:
        click.echo(e.ctx.get_help() if e.ctx else str(e))
        return 0
    except click.UsageError as e:
        message = " ".join(e.format_message().split())
        click.echo(f"error: {message}", err=True)
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("aborted", err=True)
        return 130
    return code if isinstance(code, int) else 0


def run() -> None:  # pragma: no cover - console script
    sys.exit(main())
