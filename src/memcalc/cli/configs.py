"""``--config FILE`` (repeatable) on ``estimate`` and ``plan``: the files' options as if given
as flags, below the flags the user gave (the reading is ``memcalc.configs``)."""

from __future__ import annotations

from typing import Any

import click

from memcalc.cli.inputs import given

config_option = click.option(
    "--config",
    multiple=True,
    metavar="FILE",
    help="A trainer config to read the job from (repeatable): DeepSpeed JSON, HF "
    "TrainingArguments / TRL SFTConfig, accelerate, axolotl, torchtitan, PEFT "
    "adapter_config.json (docs/configs.md). Flags override it.",
)


def with_configs(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the options of the ``--config`` files; what was read, how, and each
    field memcalc cannot model, on stderr (one line each)."""
    paths = values.get("config") or ()
    if not paths:
        return values
    from memcalc.configs import read_configs
    from memcalc.configs.options import merge_options, unused_note

    read = read_configs(paths)
    for kind, path in read.sources:
        click.echo(f"note: --config {path}: read as: {kind}", err=True)
    for warning in read.warnings:
        click.echo(f"warning: {warning}", err=True)
    ctx = click.get_current_context()
    params = {p.name: p for p in ctx.command.params if p.name}
    merged, unused = merge_options(
        values,
        read.options,
        accepts=set(params),
        given=given,
        convert=lambda key, value: _click_value(params[key], ctx, value),
    )
    note = unused_note(unused, ctx.command.name or "")
    if note:
        click.echo(f"note: {note}", err=True)
    return merged


def _click_value(param: click.Parameter, ctx: click.Context, value: Any) -> Any:
    """``value`` as the option's own conversion makes it from the command line."""
    if param.multiple:
        items = value if isinstance(value, (list, tuple)) else [value]
        return param.type_cast_value(ctx, [str(v) for v in items])
    if isinstance(value, bool) and isinstance(param, click.Option) and param.is_flag:
        return value
    if isinstance(value, bool):
        value = str(value).lower()
    elif isinstance(value, (list, tuple)):
        value = ",".join(map(str, value))
    return param.type_cast_value(ctx, str(value))
