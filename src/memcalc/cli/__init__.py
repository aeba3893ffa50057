"""The memcalc command line: thin commands that parse, call one library function, print.

Every command is imported only when it runs (``COMMANDS``), so ``memcalc estimate`` starts
without loading the quiz, torch or the other commands. ``main`` is the one error path: bad
input of any kind (unknown names, bad values, malformed files) ends with one line
``error: <field or file>: <what> (<allowed>)`` on stderr and exit code 2; Ctrl-C with one line
and exit code 130; anything unexpected with one line naming the version and asking for a bug
report, exit code 1 -- the traceback only with ``--debug`` or ``MEMCALC_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

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
@click.option(
    "--debug",
    is_flag=True,
    help="Print the traceback of an internal error (also MEMCALC_DEBUG=1).",
)
def app(debug: bool) -> None:
    """How much GPU memory a training job needs, and which recompute / offload strategy makes
    it fit."""


def _debug(argv: list[str]) -> bool:
    """``--debug`` before the command name, or ``MEMCALC_DEBUG=1``."""
    if os.environ.get("MEMCALC_DEBUG", "").strip() not in ("", "0"):
        return True
    for arg in argv:
        if arg == "--debug":
            return True
        if not arg.startswith("-"):
            return False
    return False


def main(argv: list[str] | None = None) -> int:
    """Entry point and the one error path: a usage error or MemcalcError is one line and exit
    2, Ctrl-C one line and exit 130, an internal error one line (a bug report) and exit 1."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        code = app.main(args=args, prog_name="memcalc", standalone_mode=False)
    except MemcalcError as e:
        click.echo(f"error: {_one_line(str(e))}", err=True)
        return 2
    except click.exceptions.NoArgsIsHelpError as e:
        click.echo(e.ctx.get_help() if e.ctx else str(e))
        return 0
    except click.UsageError as e:
        click.echo(f"error: {_one_line(e.format_message())}", err=True)
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("error: interrupted (Ctrl-C)", err=True)
        return 130
    except Exception as e:
        if _debug(args):
            traceback.print_exc()
        where = "" if _debug(args) else "; run again with --debug for the traceback"
        click.echo(
            f"error: internal error in memcalc {__version__}: {type(e).__name__}: "
            f"{_one_line(str(e))[:200]} -- this is a bug: please report it with the command "
            f"line{where}",
            err=True,
        )
        return 1
    return code if isinstance(code, int) else 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run() -> None:  # pragma: no cover - console script
    sys.exit(main())
