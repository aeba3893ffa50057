"""Config files that name other config files (a TrainingArguments' or axolotl's
``deepspeed: ds_z3.json``, accelerate's ``deepspeed_config_file``): found beside the naming
file, else in the working directory, as the trainers resolve them when launched from there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memcalc.configs.base import Fields
from memcalc.files import read_data_file


def nested_file(f: Fields, key: str, name: str) -> tuple[dict[str, Any] | None, Path]:
    """The data of the file ``f[key]`` names, and its path; a missing file is a warning
    (the trainer might be launched from elsewhere) and None."""
    here = Path(name)
    candidates = [here] if here.is_absolute() else [f.result.path.parent / here, here]
    for path in candidates:
        if path.is_file():
            return read_data_file(path, f"--config {f.result.path}: {f.name(key)}"), path
    f.unmodelled(key, f"{name!r}: no such file beside {f.result.path} or here; not applied")
    return None, here
