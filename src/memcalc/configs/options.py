"""Config options into a command's option values: a value the user gave (a flag, a keyword of
``memcalc.estimate``) always wins; an option the command does not have is returned, to be
said (``memcalc plan`` searches the layout and strategies itself)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

SEARCHED_BY_PLAN = frozenset(
    {"dp", "tp", "pp", "cp", "ep", "sp", "zero", "recompute", "offload", "fsdp_reshard"}
    | {"shard_size"}
)

ENGINE_KEYS = frozenset({"zero_engine", "ds"})
"""A DeepSpeed config's engine: plan's bounds are torch's placement (it has no --zero-engine)."""


def merge_options(
    values: Mapping[str, Any],
    options: Mapping[str, Any],
    *,
    accepts: Collection[str],
    given: Callable[[str], bool],
    convert: Callable[[str, Any], Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``values`` with each of ``options`` the command ``accepts`` and the user did not
    give (``convert``: to the command's own type), and the options it does not accept."""
    merged = dict(values)
    unused = {}
    for key, value in options.items():
        if key not in accepts:
            unused[key] = value
        elif not given(key):
            merged[key] = convert(key, value)
    return merged, unused


def unused_note(unused: Mapping[str, Any], command: str) -> str | None:
    """One line for the options a command has no flag for."""
    if command == "plan" and ENGINE_KEYS & set(unused):
        engine = {k: v for k, v in unused.items() if k in ENGINE_KEYS}
        rest = unused_note({k: v for k, v in unused.items() if k not in ENGINE_KEYS}, command)
        shown = ", ".join(f"{k} {v!r}" for k, v in engine.items())
        said = (
            f"--config: plan places ZeRO as torch does, so the file's engine is not used: {shown}"
        )
        return said if rest is None else f"{rest}; {said}"
    if not unused:
        return None
    shown = ", ".join(f"{k} {v!r}" for k, v in unused.items())
    if command == "plan" and set(unused) <= SEARCHED_BY_PLAN:
        return f"--config: plan searches these itself, so the file's are not fixed: {shown}"
    if set(unused) == {"global_batch"}:
        return f"--config: {shown} is memcalc plan's --global-batch; estimate does not read it"
    return f"--config: memcalc {command} has no option for {shown}"
