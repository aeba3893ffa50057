"""Inputs to an estimate: the model (ModelSpec), the training setup (TrainingSetup), loaders."""

from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup

__all__ = ["ModelSpec", "TrainingSetup"]
