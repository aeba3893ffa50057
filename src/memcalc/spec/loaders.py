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


def load_model(name_or_path: str, revision: str | None = None) -> ModelSpec:
    """What ``--model`` names: a preset (by name, or by the hub id of its checkpoint), a
    spec / HF config.json file, a folder holding a config.json (an HF snapshot), or any
    Hugging Face hub repository ``ORG/NAME`` (its config.json, fetched into the HF cache:
    ``spec/hub.py``). ``revision`` (``--revision``) always reads the hub."""
    from memcalc.spec.hub import hub_config, is_hub_id
    from memcalc.spec.names import preset_for_hub_id

    if revision is not None and not is_hub_id(name_or_path):
        raise FieldError(
            "--revision", f"needs a hub id (ORG/NAME) as --model, got {name_or_path!r}"
        )
    if revision is None and name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if path.suffix in (".toml", ".json"):
        return _model_file(path)
    if _is_dir(path) and (path / "config.json").is_file():
        return _model_file(path / "config.json")
    if is_hub_id(name_or_path):
        known = preset_for_hub_id(name_or_path, sorted(PRESETS)) if revision is None else None
        if known is not None:
            return PRESETS[known]
        data, _ = hub_config(name_or_path, revision)
        return spec_from_hf_config(data, source=f"{name_or_path}/config.json")
    if any(sep in name_or_path for sep in ("/", "\\")) or name_or_path.startswith((".", "~")):
        raise FieldError(
            "--model",
            f"{name_or_path!r}: no such file or folder (a folder needs a config.json; a hub id "
            "is ORG/NAME; a preset has no '/')",
        )
    return preset(name_or_path)  # raises the "unknown value; did you mean" error


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a path too long, a NUL byte: read_data_file names it
        return False


def _model_file(path: Path) -> ModelSpec:
    """A spec file, or an HF config.json (it has a model_type)."""
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
    "deepspeed": "--ds",
}
"""TrainingSetup fields whose command-line flag is not ``--`` + the field name."""


PARALLEL_FIELDS = frozenset(f.name for f in dataclasses.fields(Parallelism))


def training_setup(**fields: Any) -> TrainingSetup:
    """A TrainingSetup from command-line values (the parallel layout's fields flat beside the
    others; ``gpus`` is ``dp``); a bad value names its flag."""
    flags = dict(FLAGS)
    if "gpus" in fields:
        fields["dp"] = fields.pop("gpus")
        flags["dp"] = "--gpus"
    layout = {k: fields.pop(k) for k in list(fields) if k in PARALLEL_FIELDS}
    try:
        return parse(TrainingSetup, {**fields, "parallel": layout})
    except FieldError as e:
        name = e.field.removeprefix("parallel.")
        if name.startswith("megatron.") and name not in flags:
            name = name.removeprefix("megatron.")
        flag = flags.get(name, "--" + name.replace("_", "-"))
        raise FieldError(flag, e.problem) from None
