"""Load a ModelSpec from a preset name, a memcalc TOML/JSON spec file, or an HF config.json.

Errors are MemcalcError with one line naming the file, the field and what is allowed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from memcalc.files import read_data_file
from memcalc.spec.families import spec_from_hf_config
from memcalc.spec.model import ModelSpec
from memcalc.spec.parallel import Parallelism
from memcalc.spec.presets import PRESETS, preset
from memcalc.spec.training import TrainingSetup
from memcalc.validate import FieldError, parse


def load_model(name_or_path: str) -> ModelSpec:
    """A preset by name, or a spec / HF config.json file by path."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if path.suffix not in (".toml", ".json"):
        return preset(name_or_path)  # raises the "unknown value; choose one of" error
    data = read_data_file(path, "--model")
    if "model_type" in data:
        return spec_from_hf_config(data, source=str(path))
    return parse(ModelSpec, {"name": path.stem, **data}, str(path))


FLAGS = {
    "optimizer_foreach": "--foreach/--no-foreach",
    "optimizer_fused": "--fused/--no-fused",
    "lora.rank": "--lora-rank",
    "lora.alpha": "--lora-alpha",
    "lora.targets": "--lora-targets",
    "lora.dropout": "--lora-dropout",
    "lora.modules_to_save": "--modules-to-save",
    "megatron.moe_token_dispatcher": "--moe-dispatcher",
}
"""TrainingSetup fields whose command-line flag is not ``--`` + the field name."""


PARALLEL_FIELDS = frozenset(f.name for f in dataclasses.fields(Parallelism))


def training_setup(**fields: Any) -> TrainingSetup:
    """A TrainingSetup from command-line values (the parallel layout's fields flat beside the
    others; ``gpus`` is ``dp``); a bad value names its flag."""
    if "gpus" in fields:
        fields["dp"] = fields.pop("gpus")
    layout = {k: fields.pop(k) for k in list(fields) if k in PARALLEL_FIELDS}
    try:
        return parse(TrainingSetup, {**fields, "parallel": layout})
    except FieldError as e:
        name = e.field.removeprefix("parallel.")
        if name.startswith("megatron.") and name not in FLAGS:
            name = name.removeprefix("megatron.")
        flag = FLAGS.get(name, "--" + name.replace("_", "-"))
        raise FieldError(flag, e.problem) from None
