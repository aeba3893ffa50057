"""The model, GPU and setup a computed question was asked for, as the progress file keeps it,
so ``--review`` asks it again in the same numbers (a llama-3-8b quiz is reviewed in
llama-3-8b's numbers, whatever ``--model`` the review is run with).

The setup is stored as its fields (enums by value, tuples as lists) and rebuilt with the same
validation as a spec file's; a context that no longer loads (a model file moved away, a field
renamed since) gives None, and the review asks the question for the current flags instead.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memcalc.errors import MemcalcError
from memcalc.profiles import GpuProfile, load_profile
from memcalc.spec.loaders import load_model
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.validate import parse


class QuizContext(BaseModel):
    """What a computed question's numbers were computed for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="The model as --model named it (a preset or a file).")
    gpu: str = Field(description="The GPU profile's name.")
    mfu: float = Field(description="Model-FLOPs utilisation of the times shown.")
    setup: dict[str, Any] = Field(description="The TrainingSetup's fields.")


def _plain(value: Any) -> Any:
    """``value`` with enums as their values and tuples as lists (JSON's types)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def context_of(model: str, gpu: str, mfu: float, setup: TrainingSetup) -> QuizContext:
    """The context of a question asked for ``model`` (as given), ``gpu``, ``setup``.

    >>> c = context_of("gpt2", "h100-sxm-80gb", 0.4, TrainingSetup(batch=2))
    >>> c.setup["batch"], c.setup["precision"]
    (2, 'bf16-mixed')
    """
    return QuizContext(model=model, gpu=gpu, mfu=mfu, setup=_plain(dataclasses.asdict(setup)))


def restore(context: QuizContext) -> tuple[ModelSpec, TrainingSetup, GpuProfile, float] | None:
    """The model, setup, GPU and MFU of ``context``; None when they no longer load.

    >>> spec, setup, gpu, mfu = restore(context_of("gpt2", "t4-16gb", 0.3, TrainingSetup(seq=64)))
    >>> spec.name, setup.seq, gpu.name, mfu
    ('gpt2', 64, 't4-16gb', 0.3)
    """
    try:
        spec = load_model(context.model)
        setup = parse(TrainingSetup, context.setup)
        gpu = load_profile(context.gpu)
    except (MemcalcError, TypeError, ValueError):
        return None
    return spec, setup, gpu, context.mfu
