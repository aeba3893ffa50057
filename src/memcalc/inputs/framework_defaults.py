"""A framework's own defaults (``Framework.defaults``) for the flags the user did not give:
torchtitan's MixedPrecisionPolicy, fused AdamW and attention kernel."""

from __future__ import annotations

from typing import Any

from memcalc.frameworks import Framework, framework

FLAG_OF = {"optimizer_fused": "fused"}
"""The flag of a TrainingSetup field, where the names differ."""


def framework_defaults(fields: dict[str, Any], given: frozenset[str], said: list[str]) -> None:
    """Put the chosen framework's defaults into ``fields`` where no flag (or ``--config``
    file) gave the field; one note in ``said`` naming them."""
    name = fields.get("framework")
    if name is None:
        return
    fw = framework(name)
    used = []
    for field, value in fw.defaults:
        flag = FLAG_OF.get(field, field)
        if flag in given:
            continue
        if field == "precision" and fw.unsharded_precision and not _sharded(fields, fw):
            value = fw.unsharded_precision
        fields[field] = value
        option = "--" + flag.replace("_", "-")
        used.append(option if value is True else f"{option} {value}")
    if used:
        said.append(
            f"note: --framework {fw.label}: its defaults {', '.join(used)} "
            f"(torchtitan {fw.version}'s own; give the option to change it)"
        )


def _sharded(fields: dict[str, Any], fw: Framework) -> bool:
    """FSDP2 runs over more than one rank (dp x cp under a framework that shards over cp)."""
    cp = fields.get("cp", 1) if fw.shards_over_cp else 1
    return (fields.get("shard_size") or fields.get("dp") or fields.get("gpus") or 1) * cp > 1
