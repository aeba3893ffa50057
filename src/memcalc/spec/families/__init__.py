"""Model families: each maps its HF ``config.json`` to ModelSpec features and back, and says
how its implementation writes the ops. A new family is one module of this package with a
``FamilyDef`` per model_type in ``FAMILIES`` (found by ``family_modules``) and its published
models in ``PRESETS``. A module defines ``FAMILIES`` before ``PRESETS``: each ``FamilyDef``
registers its rules with ModelSpec as it is built, and the presets are validated against them.
Family modules import no other family module; what several share lives in ``base``."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from functools import cache
from types import ModuleType
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.spec.families.base import AliasedConfig, FamilyDef, Implementation
from memcalc.spec.model import Family, ModelSpec


@cache
def family_modules() -> tuple[ModuleType, ...]:
    """Every module of spec/families/ but ``base``: each exports ``FAMILIES`` (its
    ``FamilyDef`` s) and may export ``PRESETS`` (its published models)."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base")
    return tuple(importlib.import_module(f"{__name__}.{n}") for n in names)


@cache
def _registry() -> dict[Family, FamilyDef]:
    out: dict[Family, FamilyDef] = {}
    for module in family_modules():
        for fam in module.FAMILIES:
            out[fam.family] = fam
    return out


def family_def(family: Family) -> FamilyDef:
    """The definition of ``family``."""
    try:
        return _registry()[family]
    except KeyError:  # pragma: no cover - every Family member has a module
        raise MemcalcError(f"family: {family.value} has no definition yet") from None


def family_of(spec: ModelSpec) -> FamilyDef:
    return family_def(spec.family)


def hf_model_types() -> dict[str, FamilyDef]:
    """HF ``model_type`` -> its family, for every family memcalc reads."""
    return {t: fam for fam in _registry().values() for t in fam.model_types}


def spec_from_hf_config(cfg: Mapping[str, Any], source: str = "config.json") -> ModelSpec:
    """A ModelSpec from an HF ``config.json`` of any family memcalc reads.

    >>> spec_from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
    ...                      "vocab_size": 50257}).hidden_size
    768
    """
    model_type = cfg.get("model_type")
    types = hf_model_types()
    text = cfg.get("text_config")
    known = isinstance(model_type, str) and model_type in types
    text_type = text.get("model_type") if isinstance(text, Mapping) else None
    if not known and isinstance(text_type, str) and text_type in types:
        # a vision-language checkpoint (gemma3, mistral3, ...): its language model
        assert isinstance(text, Mapping)
        return spec_from_hf_config({"_name_or_path": cfg.get("_name_or_path"), **text}, source)
    if not isinstance(model_type, str) or model_type not in types:
        raise MemcalcError(
            f"{source}: model_type: unsupported value {model_type!r}; "
            f"memcalc reads: {', '.join(types)} (use `memcalc trace` for others)"
        )
    family = types[model_type]
    return family.from_hf(AliasedConfig(cfg, family.attribute_map), source)


def hf_config_dict(spec: ModelSpec) -> dict[str, Any]:
    """The HF config.json of ``spec`` (to build the HF model for measure and trace)."""
    return family_of(spec).to_hf(spec)


__all__ = ["FamilyDef", "Implementation", "family_def", "family_of", "spec_from_hf_config"]
