"""The configs users already have, read as memcalc options: DeepSpeed JSON, HF
``TrainingArguments`` / TRL ``SFTConfig`` (JSON or YAML), accelerate config YAML (FSDP /
DeepSpeed / Megatron-LM plugins), axolotl YAML, torchtitan TOML and PEFT
``adapter_config.json`` (one reader module per kind; ``detect.py`` tells them apart by their
fields). The result is a plain mapping of memcalc's own option names -- the keywords of
``memcalc.estimate`` / ``memcalc.plan`` and the command line's options -- plus one warning
per field that changes memory in a way memcalc does not model (docs/configs.md lists every
field).

>>> import json, pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "ds.json"
>>> _ = path.write_text(json.dumps({"zero_optimization": {"stage": 3,
...     "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": True}}))
>>> c = read_configs([path])
>>> c.sources[0][0], c.options
('DeepSpeed config', {'precision': 'bf16-mixed', 'zero': 3, 'offload': ['optimizer=cpu'], \
'zero_engine': 'deepspeed'})
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcalc.configs.base import ConfigFile
from memcalc.configs.detect import KINDS, reader_for
from memcalc.files import read_data_file


def read_config(path: Path | str) -> ConfigFile:
    """One config file: its kind (detected from its content), options and warnings."""
    path = Path(path)
    data = read_data_file(path, "--config")
    return reader_for(data, path)(data, path)


@dataclass(frozen=True)
class Configs:
    """Several config files read together (``--config`` repeated)."""

    options: dict[str, Any] = field(default_factory=dict)
    """memcalc option -> value; a later file's value replaces an earlier one's (said in
    ``warnings``), offloads add up."""
    sources: tuple[tuple[str, Path], ...] = ()
    """(kind, path) of each file, in order."""
    warnings: tuple[str, ...] = ()


def read_configs(paths: Iterable[Path | str]) -> Configs:
    options: dict[str, Any] = {}
    origin: dict[str, Path] = {}
    sources, warnings = [], []
    for path in paths:
        one = read_config(path)
        sources.append((one.kind, one.path))
        warnings += one.warnings
        for key, value in one.options.items():
            if key == "offload":
                options["offload"] = list(dict.fromkeys([*options.get("offload", []), *value]))
                continue
            if key in options and options[key] != value:
                warnings.append(
                    f"--config {one.path}: {key} {value!r} replaces {options[key]!r} from "
                    f"{origin[key]}"
                )
            options[key], origin[key] = value, one.path
    return Configs(options, tuple(sources), tuple(warnings))


__all__ = ["KINDS", "ConfigFile", "Configs", "read_config", "read_configs"]
