"""Inputs to an estimate: the model (ModelSpec), the training setup (TrainingSetup), loaders.

Importing this package loads every model family (``spec/families/``): each registers the rules
ModelSpec validates against (``model.register_family_rules``) before its presets are built."""

from memcalc.spec import families
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup

families.family_modules()

__all__ = ["ModelSpec", "TrainingSetup"]
