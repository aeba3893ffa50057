"""Flags (``memcalc.inputs``) as click options: the command line's spelling of the library's
inputs. Each option converts with its flag's own parser, so the command line and the Python
API refuse the same values with the same message."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from memcalc.inputs.flags import Flag, FlagError, Parse, metavar

F = TypeVar("F", bound=Callable[..., Any])


class Parsed(click.ParamType):  # type: ignore[type-arg]
    """A click type that converts with a flag's parser (``memcalc.inputs.flags``)."""

    def __init__(self, parse: Parse, name: str | None = None) -> None:
        self.parse, self.name = parse, name or metavar(parse)

    def get_metavar(self, param: Any, ctx: Any = None) -> str:
        return self.name

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        try:
            return self.parse(value)
        except FlagError as e:
            self.fail(e.detail, param, ctx)


def option(flag: Flag) -> Callable[[F], F]:
    """The click option of ``flag``."""
    decls = [*flag.spellings, *flag.short]
    kwargs: dict[str, Any] = {
        "default": flag.default.value if isinstance(flag.default, Enum) else flag.default,
        "help": flag.help,
        "hidden": flag.hidden,
        "show_default": flag.show_default and flag.default is not None,
    }
    if flag.switch is not None:
        if flag.switch:
            decls = [f"{s}/{flag.switch}" if i == 0 else s for i, s in enumerate(decls)]
        else:
            kwargs["is_flag"] = True
        kwargs["show_default"] = kwargs["show_default"] and bool(flag.switch)
    else:
        kwargs["type"] = Parsed(flag.parse, flag.metavar)
        kwargs["multiple"] = flag.multiple
        if flag.multiple:
            kwargs["default"] = ()
    return click.option(*decls, flag.name, **kwargs)


def options(flags: Iterable[Flag]) -> Callable[[F], F]:
    """Every flag's option, in the order given (click applies the last decorator first)."""
    decorators = [option(f) for f in flags]

    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


def given_names() -> frozenset[str]:
    """The options the user set in the running command (not left at their default)."""
    ctx = click.get_current_context()
    return frozenset(
        name
        for name in ctx.params
        if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)
    )
