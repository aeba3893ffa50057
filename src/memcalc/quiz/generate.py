"""Questions generated from the learner's model: every number comes from ``estimate``.

``model_questions`` asks every registered kind (``kinds.py``, ``kinds_finetune.py``,
``kinds_parallel.py``, ``kinds_moe.py``) for its question; a kind whose
options cannot keep the margin for this model is left out rather than asked with options a
learner cannot tell apart. ``variant_question`` builds the same kind for a varied setup: the
sibling asked later in the session after a miss.
"""

from __future__ import annotations

from memcalc.estimate import DEFAULT_MFU
from memcalc.profiles import GpuProfile
from memcalc.quiz import kinds as _kinds  # noqa: F401  (registers the question kinds)
from memcalc.quiz import kinds_finetune as _finetune  # noqa: F401
from memcalc.quiz import kinds_moe as _moe  # noqa: F401
from memcalc.quiz import kinds_parallel as _parallel  # noqa: F401
from memcalc.quiz import kinds_runtime as _runtime  # noqa: F401
from memcalc.quiz.bank import Question
from memcalc.quiz.draft import KINDS, MODEL_ID_PREFIX, Kind, Variation, build, gb_read_as_gib
from memcalc.quiz.facts import ModelFacts, model_facts
from memcalc.quiz.templates import strategy_label
from memcalc.spec.model import ModelSpec
from memcalc.spec.presets import PRESETS
from memcalc.spec.training import OptimizerKind, Precision, TrainingSetup

__all__ = [
    "KINDS",
    "MODEL_ID_PREFIX",
    "Kind",
    "ModelFacts",
    "gb_read_as_gib",
    "kind_of",
    "model_facts",
    "model_questions",
    "question_for",
    "strategy_label",
    "variant_question",
    "vary",
]


def question_for(kind: Kind, facts: ModelFacts) -> Question | None:
    """The question of one kind for these facts, or None when it is left out."""
    draft = kind.make(facts)
    return None if draft is None else build(kind, facts, draft)


def model_questions(
    spec: ModelSpec, setup: TrainingSetup, gpu: GpuProfile, mfu: float = DEFAULT_MFU
) -> list[Question]:
    """One question of every kind in ``KINDS`` that has honest options for this model,
    setup and GPU, in ``KINDS`` order."""
    facts = model_facts(spec, setup, gpu, mfu)
    out = []
    for kind in KINDS.values():
        q = question_for(kind, facts)
        if q is not None:
            out.append(q)
    return out


def kind_of(question: Question) -> Kind | None:
    """The kind a generated question was built from; None for a bank question."""
    if not question.id.startswith(MODEL_ID_PREFIX):
        return None
    return KINDS.get(question.id.removeprefix(MODEL_ID_PREFIX))


def _other_depth(spec: ModelSpec) -> ModelSpec:
    """The preset whose number of blocks is closest to ``spec``'s but different, of the same
    kind (a mixture of experts for a mixture of experts, else a dense model), so the sibling
    can ask the same question."""
    others = [
        s
        for s in PRESETS.values()
        if s.num_layers != spec.num_layers and (s.moe is None) == (spec.moe is None)
    ]
    return min(others, key=lambda s: (abs(s.num_layers - spec.num_layers), s.name))


def vary(
    variation: Variation, spec: ModelSpec, setup: TrainingSetup
) -> tuple[ModelSpec, TrainingSetup]:
    """The model and setup of a sibling question.

    >>> from memcalc.spec.presets import preset
    >>> s, t = vary(Variation.batch, preset("gpt2"), TrainingSetup(batch=2))
    >>> (s.name, t.batch)
    ('gpt2', 4)
    """
    if variation is Variation.batch:
        return spec, setup.replace(batch=2 * setup.batch)
    if variation is Variation.precision:
        target = Precision.fp32 if setup.precision is Precision.bf16_mixed else Precision.bf16_mixed
        return spec, setup.replace(precision=target, grad_dtype=None)
    if variation is Variation.optimizer:
        adam_like = setup.optimizer in (
            OptimizerKind.adam,
            OptimizerKind.adamw,
            OptimizerKind.adamw_8bit,
            OptimizerKind.adafactor,
        )
        other = OptimizerKind.sgd_momentum if adam_like else OptimizerKind.adamw
        return spec, setup.replace(optimizer=other)
    return _other_depth(spec), setup


def variant_question(
    kind: Kind,
    spec: ModelSpec,
    setup: TrainingSetup,
    gpu: GpuProfile,
    mfu: float = DEFAULT_MFU,
) -> Question | None:
    """The question of ``kind`` for the varied model or setup (``kind.variation``)."""
    varied_spec, varied_setup = vary(kind.variation, spec, setup)
    return question_for(kind, model_facts(varied_spec, varied_setup, gpu, mfu))
