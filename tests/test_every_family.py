"""Every registered family, found from the registry (``spec/families/*.py``: each module's
``FAMILIES``), not from a hand-written list: a new family module is covered by these tests the
moment it exists (docs/adding-a-family.md).

For each family: its definition is well-formed, it has a preset, its config.json mapping goes
both ways (``to_hf`` then ``from_hf`` gives the spec back, and the config back), the estimate of
its smallest preset counts 4 + 4 + 8 bytes per parameter in fp32 AdamW, its preset is pinned in
the layout snapshot, and (with transformers) the HF model built from ``to_hf`` on the meta
device has exactly the parameter tensors memcalc counts.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from pathlib import Path

import pytest

from memcalc.estimate import estimate
from memcalc.params import count_params, param_tensors
from memcalc.profiles import load_profile
from memcalc.spec.families import (
    FamilyDef,
    family_def,
    family_modules,
    hf_config_dict,
    hf_model_types,
    spec_from_hf_config,
)
from memcalc.spec.model import Family, ModelSpec
from memcalc.spec.presets import PRESETS
from memcalc.spec.training import TrainingSetup

sys.path.insert(0, str(Path(__file__).parent / "snapshots"))
import cases  # noqa: E402

GPU = load_profile("h100-sxm-80gb")
SPEC_FIELDS = {f.name for f in dataclasses.fields(ModelSpec)}


def registered() -> list[FamilyDef]:
    """Every FamilyDef the family modules export, in module order."""
    return [fam for module in family_modules() for fam in module.FAMILIES]


FAMILIES = registered()
IDS = [fam.family.value for fam in FAMILIES]


def presets_of(fam: FamilyDef) -> list[ModelSpec]:
    return [spec for spec in PRESETS.values() if spec.family is fam.family]


def smallest_preset(fam: FamilyDef) -> ModelSpec:
    """The family's preset with the fewest parameters (the cheapest to build and lower)."""
    return min(presets_of(fam), key=lambda spec: (count_params(spec).total, spec.name))


def test_the_registry_is_every_family_module_and_every_family():
    assert len(FAMILIES) == len({fam.family for fam in FAMILIES}), "a family defined twice"
    assert {fam.family for fam in FAMILIES} == set(Family)
    for fam in FAMILIES:
        assert family_def(fam.family) is fam
    types = [t for fam in FAMILIES for t in fam.model_types]
    assert len(types) == len(set(types)), "a model_type read by two families"
    assert set(hf_model_types()) == set(types)


@pytest.mark.parametrize("fam", FAMILIES, ids=IDS)
def test_definition_names_modelspec_fields(fam):
    assert fam.model_types, "a family reads at least one HF model_type"
    assert set(fam.defaults) <= SPEC_FIELDS, set(fam.defaults) - SPEC_FIELDS
    assert set(fam.dropouts) <= SPEC_FIELDS, set(fam.dropouts) - SPEC_FIELDS
    assert set(fam.attribute_map.values()).isdisjoint(fam.attribute_map)


@pytest.mark.parametrize("fam", FAMILIES, ids=IDS)
def test_family_has_a_preset_that_follows_its_rules(fam):
    specs = presets_of(fam)
    assert specs, f"{fam.family.value}: no preset (add one to its module's PRESETS)"
    for spec in specs:
        fam.check(spec)  # presets are built through ModelSpec; the family's rules hold


@pytest.mark.parametrize("fam", FAMILIES, ids=IDS)
def test_config_json_round_trips_every_preset(fam):
    """``from_hf(to_hf(spec)) == spec`` for every preset of the family (``to_hf`` writes
    head_dim explicitly), read through the registry by its model_type; and the config it
    writes is a fixed point (``to_hf(from_hf(cfg)) == cfg``)."""
    for spec in presets_of(fam):
        cfg = hf_config_dict(spec)
        assert cfg["model_type"] in fam.model_types
        again = spec_from_hf_config(cfg, f"{spec.name}.json")
        assert again.family is fam.family
        assert again.replace(head_dim=spec.head_dim) == spec, spec.name
        assert again.head_size == spec.head_size
        assert hf_config_dict(again) == json.loads(json.dumps(cfg)), spec.name


@pytest.mark.parametrize("fam", FAMILIES, ids=IDS)
def test_estimate_of_the_smallest_preset_counts_its_parameters(fam):
    """fp32 weights, fp32 gradients, AdamW's two fp32 moments: 4 + 4 + 8 bytes per parameter
    (the estimate's docstring example, for every family)."""
    spec = smallest_preset(fam)
    n = count_params(spec).total
    assert n == sum(t.numel for t in param_tensors(spec))
    # eager: the attention every family's HF implementation has (Gemma 2 has no SDPA)
    setup = TrainingSetup(batch=1, seq=128, precision="fp32", attention="eager")
    b = estimate(spec, setup, GPU)
    assert b.params.total == n
    assert (b.parameter_bytes, b.gradient_bytes) == (4 * n, 4 * n)
    assert b.optimizer_detail.state_bytes == 8 * n
    assert b.optimizer_detail.master_weight_bytes == 0
    assert b.activation_bytes > 0
    assert b.peak.total_bytes >= b.parameter_bytes + b.activation_bytes


def _snapshot_models() -> dict[str, list[str]]:
    """--model of every pinned layout case that ran (exit 0), by model."""
    pinned = json.loads(cases.SNAPSHOT.read_text())["layouts"]
    out: dict[str, list[str]] = {}
    for command in cases.layout_cases():
        words = shlex.split(command)
        model = words[words.index("--model") + 1]
        if not str(pinned.get(command, "exit")).startswith("exit"):
            out.setdefault(model, []).append(command)
    return out


SNAPSHOT_MODELS = _snapshot_models()


@pytest.mark.parametrize("fam", FAMILIES, ids=IDS)
def test_family_is_pinned_by_the_snapshot(fam):
    """Some preset of the family has layout cases in tests/snapshots/outputs.json whose
    output is pinned (not an error): an engine change that moves its numbers is caught."""
    models = [spec.name for spec in presets_of(fam) if spec.name in SNAPSHOT_MODELS]
    assert models, f"{fam.family.value}: no pinned snapshot case (python tests/snapshots/cases.py)"


@pytest.mark.hf
@pytest.mark.parametrize("fam", FAMILIES, ids=IDS)
def test_smallest_preset_is_the_hf_model_on_meta_device(fam):
    """The HF model built from ``to_hf`` of the family's smallest preset, on the meta device
    (no memory, no weights): every parameter tensor by HF name and size, and the total the
    estimate reports (skipped where the installed transformers has no such model_type)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    spec = smallest_preset(fam)
    cfg = dict(hf_config_dict(spec))
    if cfg["model_type"] not in transformers.CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} has no {cfg['model_type']}")
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    theirs = {name: p.numel() for name, p in model.named_parameters()}
    assert {t.name: t.numel for t in param_tensors(spec)} == theirs
    counts = count_params(spec)
    assert counts.total == sum(theirs.values())
    assert counts.tensors == len(theirs)
    setup = TrainingSetup(batch=1, seq=128, precision="fp32", attention="eager")
    assert estimate(spec, setup, GPU).params.total == sum(theirs.values())
