"""What every config reader shares: the result (``ConfigFile``: memcalc's own option names and
values, plus one warning per field memcalc cannot model) and ``Fields``, a reader's view of a
file that names each field as the file spells it in errors and warnings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcalc.validate import FieldError

AUTO = "auto"
"""DeepSpeed / HF's "take it from the trainer's own arguments"."""


@dataclass
class ConfigFile:
    """One config file read: its kind, memcalc options (the keyword names of
    ``memcalc.estimate`` / the command-line options: ``zero``, ``offload``, ``precision``,
    ``batch``, ``microbatches``, ``seq``, ``recompute``, ``lora_rank``, ...) and warnings."""

    kind: str
    path: Path
    options: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def merge(self, other: ConfigFile) -> None:
        """Take ``other``'s options (a config that file names, e.g. a DeepSpeed JSON from
        a TrainingArguments' ``deepspeed``) where this file set none; its warnings too."""
        for key, value in other.options.items():
            if key == "offload":
                self.options["offload"] = sorted({*self.options.get("offload", ()), *value})
            else:
                self.options.setdefault(key, value)
        self.warnings += other.warnings


class Fields:
    """A config's fields as one reader takes them: typed getters that name the field on a bad
    value (``--config ds.json: zero_optimization.stage: expected an integer, got 'x'``), and
    ``unmodelled`` for warnings. ``prefix`` is the dotted path of a nested table."""

    def __init__(self, data: Mapping[str, Any], result: ConfigFile, prefix: str = "") -> None:
        self.data, self.result, self.prefix = data, result, prefix

    @property
    def where(self) -> str:
        return f"--config {self.result.path}"

    def name(self, key: str) -> str:
        return self.prefix + key

    def fail(self, key: str, problem: str) -> FieldError:
        return FieldError(self.name(key), problem, self.where)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str) -> Any:
        return self.data.get(key)

    def table(self, key: str) -> Fields:
        """The nested table ``key`` (empty when absent)."""
        value = self.data.get(key)
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise self.fail(key, f"expected a table, got {_shown(value)}")
        return Fields(value, self.result, self.name(key) + ".")

    def integer(self, key: str, *, auto: bool = False) -> int | None:
        """An integer (None when absent, or ``"auto"`` where ``auto`` allows it)."""
        value = self.data.get(key)
        if value is None or (auto and value == AUTO):
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 5e8 in JSON
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {_shown(value)}")
        return value

    def flag(self, key: str, *, auto: bool = False) -> bool | None:
        value = self.data.get(key)
        if value is None or (auto and value == AUTO):
            return None
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"  # YAML and accelerate write some as strings
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {_shown(value)}")
        return value

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, got {_shown(value)}")
        return value

    def choice(self, key: str, allowed: Mapping[str, Any]) -> Any:
        """The memcalc value of a string field from ``allowed`` (matched in any case); a
        value memcalc cannot model is a warning, and None."""
        given = self.text(key)
        if given is None:
            return None
        for name, value in allowed.items():
            if name.lower() == given.lower():
                return value
        self.unmodelled(key, f"{given!r} is not modelled (memcalc reads: {', '.join(allowed)})")
        return None

    def names(self, key: str) -> list[str] | None:
        """A list of names, or one name / a comma-separated string."""
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise self.fail(key, f"expected a list of names, got {_shown(value)}")

    def unmodelled(self, key: str, why: str) -> None:
        """One warning line naming the field."""
        self.result.warnings.append(f"--config {self.result.path}: {self.name(key)}: {why}")

    def unmodelled_if_set(self, keys: Iterable[str], why: str, *, unless: Any = None) -> None:
        """A warning for each of ``keys`` that the file sets (to anything but ``unless``)."""
        for key in keys:
            value = self.data.get(key)
            if value is not None and value != unless and value != AUTO:
                self.unmodelled(key, f"{_shown(value)}: {why}")

    def unknown(self, known: Iterable[str]) -> None:
        """One warning listing the fields no rule of the reader knows (as the file spells
        them), so that nothing is dropped silently."""
        seen = set(known)
        extra = [k for k in self.data if k not in seen]
        if extra:
            shown = ", ".join(self.name(k) for k in extra[:12])
            more = f" and {len(extra) - 12} more" if len(extra) > 12 else ""
            self.result.warnings.append(
                f"--config {self.result.path}: not read (no rule in docs/configs.md): {shown}{more}"
            )

    def set(self, option: str, value: Any) -> None:
        """Set memcalc option ``option`` (None: leave it unset)."""
        if value is not None:
            self.result.options[option] = value

    def offload(self, what: str, where: str | None) -> None:
        if where is not None:
            offload = self.result.options.setdefault("offload", [])
            if f"{what}={where}" not in offload:
                offload.append(f"{what}={where}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
