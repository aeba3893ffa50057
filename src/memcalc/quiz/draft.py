"""The machinery of a generated question: options that carry the mistake they stand for, the
margin that keeps them apart, the registry of question kinds, and the step from a ``Draft``
to a ``Question``.

A question kind is one function ``ModelFacts -> Draft | None`` registered with
``@question_kind(...)`` plus its words in ``templates.py`` (prompt, explanation, and one
sentence per mistake its distractors stand for). Returning None drops the question for that
model (when no honest set of four options exists).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from memcalc.quiz.bank import (
    NUM_OPTIONS,
    AnswerUnit,
    Difficulty,
    Lang,
    Numeric,
    NumericMistake,
    Question,
    Text,
)
from memcalc.quiz.bank import Topic as Topic
from memcalc.quiz.facts import ModelFacts
from memcalc.quiz.figures import Scale, SizeUnit, far_apart
from memcalc.quiz.templates import CONTEXT, LABELS, MISTAKES, TEMPLATES
from memcalc.units import GB, GIB, Unit, format_bytes

MODEL_ID_PREFIX = "model-"
"""Generated question ids are ``model-<kind>``; bank ids never start with it."""

SIZE_TOLERANCE = 0.02
"""``--typed``: a memory size within 2% of the answer is right (the options are 5% apart)."""
PERCENT_TOLERANCE = 0.03
"""``--typed``: a percentage within 3% (relative) of the answer is right."""


class Variation(str, Enum):
    """How the sibling of a missed generated question differs from it (asked later in the
    session, so the learner meets the concept again with other numbers)."""

    batch = "batch"
    """The same model with twice the micro-batch."""
    precision = "precision"
    """The same model under another precision recipe (bf16-mixed <-> fp32)."""
    optimizer = "optimizer"
    """The same model with another optimizer (Adam-type <-> SGD with momentum)."""
    depth = "depth"
    """A preset of another depth (number of blocks)."""


@dataclass(frozen=True)
class Choice:
    """One option in both languages, with the number it states and the mistake it is."""

    en: str
    ur: str
    value: float | None = None
    """The number the option states, as printed (bytes, a percentage, a count), for the
    margin; None for options that are words."""
    group: str = ""
    """Options are held to the margin only against options of the same group (e.g. the
    same size with a different verdict is a different option)."""
    mistake: str = ""
    """Key of the mistake in ``MISTAKES``; empty on the correct option."""
    values: dict[str, str] = field(default_factory=dict)
    """Numbers for the mistake's sentence, the same in both languages."""
    lang_values: dict[Lang, dict[str, str]] = field(default_factory=dict)
    """Words for the mistake's sentence, per language."""

    def text(self, lang: Lang) -> str:
        """The option in ``lang``."""
        return self.en if lang is Lang.en else self.ur


def label(key: str, mistake: str = "", **values: str) -> Choice:
    """An option made of words from ``LABELS``."""
    en, ur = (LABELS[lang][key].format(**values) for lang in Lang)
    return Choice(en, ur, mistake=mistake)


def size_text(scale: Scale, num_bytes: int | float, lang: Lang = Lang.en) -> str:
    """A size as printed in ``lang`` (``bytes`` is written in Urdu, GiB/MiB/KiB are not)."""
    text = scale.text(num_bytes)
    if scale.unit is SizeUnit.bytes and lang is Lang.ur:
        return text.removesuffix(" bytes") + " بائٹس"
    return text


def size(scale: Scale, num_bytes: int | float, mistake: str = "", **values: str) -> Choice:
    """An option stating a memory size in ``scale``."""
    return Choice(
        size_text(scale, num_bytes, Lang.en),
        size_text(scale, num_bytes, Lang.ur),
        value=scale.shown_bytes(num_bytes),
        mistake=mistake,
        values=values,
    )


Candidate = tuple[int | float, str, dict[str, str]]
"""A wrong size a kind offers: (bytes, mistake key, values for the mistake's sentence)."""


def in_units_of(scale: Scale, candidates: Iterable[Candidate]) -> list[Candidate]:
    """The candidates whose mistake makes sense in the unit the options print: a GB read as
    GiB only on GiB options. On MiB options the same slip would be an MB read as MiB, 4.9%
    off, and on KiB options a kB read as KiB, 2.4%: both inside the margin, so neither is
    offered."""
    return [c for c in candidates if not (c[1] == "gb_as_gib" and scale.unit is not SizeUnit.GiB)]


def readable_sizes(scale: Scale, candidates: Iterable[Candidate]) -> list[Choice]:
    """Size options for (bytes, mistake, values), leaving out sizes that would print with
    fewer than two significant digits, as zero (``0.00 GiB`` for a few MiB) or as negative;
    the decimal-for-binary slip is put in the options' unit (``in_units_of``)."""
    return [
        size(scale, b, m, **v)
        for b, m, v in in_units_of(scale, candidates)
        if b > 0 and scale.readable(b) and scale.number(b) != 0
    ]


def gb_read_as_gib(num_bytes: int | float) -> float:
    """The bytes someone claims when they compute GB (10^9) and write GiB (2^30).

    >>> format_bytes(gb_read_as_gib(2**30))
    '1.07 GiB'
    """
    return num_bytes * GIB / GB


def size_fallbacks(value: int | float) -> list[tuple[float, str, dict[str, str]]]:
    """Wrong sizes with a named slip, used after a kind's own mistakes: a factor of 2 too
    many or too few, bits counted as bytes or bytes as bits."""
    x = float(value)
    none: dict[str, str] = {}
    return [(x * 2, "double", none), (x / 2, "half", none), (x * 8, "bits", none)] + [
        (x / 8, "bytes_as_bits", none)
    ]


def numeric_size(scale: Scale, num_bytes: int) -> Numeric:
    """The ``--typed`` answer of a size question: the printed number and unit."""
    return Numeric(
        value=float(scale.number(num_bytes)),
        unit=AnswerUnit(scale.unit.value),
        tolerance=SIZE_TOLERANCE,
    )


def gb_text(num_bytes: int | float) -> str:
    """Decimal GB, two decimals (only ever shown to name the GB-for-GiB mistake)."""
    return format_bytes(num_bytes, Unit.GB)


@dataclass(frozen=True)
class Draft:
    """A generated question before it becomes a ``Question``: correct option first."""

    correct: Choice
    distractors: list[Choice]
    """Candidates in order of preference; the first that keep the margin are used."""
    values: dict[str, str] = field(default_factory=dict)
    """Numbers for the templates, the same in both languages."""
    lang_values: dict[Lang, dict[str, str]] = field(default_factory=dict)
    """Words for the templates, per language."""
    numeric: Numeric | None = None
    """What ``--typed`` accepts instead of a letter; None for questions answered in words."""


def pick_options(correct: Choice, candidates: Iterable[Choice]) -> list[Choice] | None:
    """The correct option and the first ``NUM_OPTIONS - 1`` distractors whose text differs
    from every option chosen so far and whose number (when it has one) is at least
    ``MARGIN`` away from every chosen number of its group; None when there are not enough."""
    chosen = [correct]
    for c in candidates:
        if not c.mistake:
            raise ValueError(f"distractor {c.en!r} names no mistake")  # a generator bug
        if any(c.en.strip() == o.en.strip() or c.ur.strip() == o.ur.strip() for o in chosen):
            continue
        if c.value is not None and any(
            o.value is not None and o.group == c.group and not far_apart(o.value, c.value)
            for o in chosen
        ):
            continue
        chosen.append(c)
        if len(chosen) == NUM_OPTIONS:
            return chosen
    return None


Maker = Callable[[ModelFacts], Draft | None]


@dataclass(frozen=True)
class Kind:
    """What a generated question teaches, how it is filed, and how its sibling varies."""

    name: str
    concept: str
    topic: Topic
    difficulty: Difficulty
    variation: Variation
    make: Maker


KINDS: dict[str, Kind] = {}
"""Every generated question kind, in the order they were registered."""


def question_kind(
    name: str,
    *,
    concept: str,
    topic: Topic,
    difficulty: Difficulty,
    variation: Variation = Variation.batch,
) -> Callable[[Maker], Maker]:
    """Register a question kind; its words are ``TEMPLATES[name]``."""

    def register(make: Maker) -> Maker:
        if name in KINDS:
            raise ValueError(f"question kind {name!r} registered twice")
        KINDS[name] = Kind(name, concept, topic, difficulty, variation, make)
        return make

    return register


def context_words(facts: ModelFacts, lang: Lang) -> str:
    """How a prompt names the learner's setup: the defaults always, the rest when changed."""
    setup, words = facts.setup, LABELS[lang]
    extra = []
    if setup.attention.value != "sdpa":
        extra.append(words["ctx.attention"].format(attention=setup.attention.value))
    if setup.loss.value != "standard":
        extra.append(words["ctx.loss"].format(loss=setup.loss.value))
    if setup.dropout is not None:
        extra.append(words["ctx.dropout"].format(dropout=f"{setup.dropout:g}"))
    if setup.grad_dtype is not None:
        extra.append(words["ctx.grad_dtype"].format(grad_dtype=setup.grad_dtype.value))
    if not setup.optimizer_foreach:
        extra.append(words["ctx.no_foreach"])
    values = {
        "model": facts.spec.name,
        "batch": str(setup.batch),
        "seq": str(setup.seq),
        "precision": setup.precision.value,
        "optimizer": setup.optimizer.value,
        "extra": "".join(words["list_sep"] + e for e in extra),
    }
    return CONTEXT[lang].format(**values)


def common_values(facts: ModelFacts, lang: Lang) -> dict[str, str]:
    """Values every template may use."""
    setup, gpu = facts.setup, facts.gpu
    return {
        "model": facts.spec.name,
        "params": f"{facts.base.params.total:,}",
        "layers": str(facts.spec.num_layers),
        "batch": str(setup.batch),
        "seq": str(setup.seq),
        "tokens": f"{setup.tokens:,}",
        "precision": setup.precision.value,
        "optimizer": setup.optimizer.value,
        "weight_dtype": setup.weight_dtype.value,
        "grad_dtype": setup.gradient_dtype.value,
        "state_dtype": setup.optimizer_dtype.value,
        "attention": setup.attention.value,
        "gpu": gpu.display_name,
        "gpu_memory": format_bytes(gpu.memory_bytes),
        "k": str(facts.k),
        "mfu": f"{facts.mfu:.0%}",
        "ctx": context_words(facts, lang),
    }


def build(kind: Kind, facts: ModelFacts, draft: Draft) -> Question | None:
    """The Question of a Draft in both languages, or None when the margin leaves fewer than
    four options. Each distractor's mistake becomes its ``feedback``."""
    options = pick_options(draft.correct, draft.distractors)
    if options is None:
        return None
    texts = {}
    for lang in Lang:
        values = (
            common_values(facts, lang)
            | {"value": draft.correct.text(lang)}
            | draft.values
            | draft.lang_values.get(lang, {})
        )
        template = TEMPLATES[kind.name][lang]
        feedback = [""] + [mistake_text(kind, facts, draft, c, lang) for c in options[1:]]
        texts[lang.value] = Text(
            prompt=template.prompt.format(**values),
            options=[o.text(lang) for o in options],
            explanation=template.explanation.format(**values),
            feedback=feedback,
        )
    numeric = draft.numeric
    if numeric is not None:
        numeric = numeric.model_copy(
            update={"mistakes": typed_mistakes(kind, facts, draft, numeric, options)}
        )
    return Question(
        id=MODEL_ID_PREFIX + kind.name,
        concept=kind.concept,
        topic=kind.topic,
        difficulty=kind.difficulty,
        correct=0,
        numeric=numeric,
        **texts,
    )


_UNIT_SIZE = {AnswerUnit.GiB: 2**30, AnswerUnit.MiB: 2**20, AnswerUnit.KiB: 2**10}
"""Bytes of the size units an answer is given in (a Choice's value is in bytes)."""


def typed_mistakes(
    kind: Kind, facts: ModelFacts, draft: Draft, numeric: Numeric, options: list[Choice]
) -> list[NumericMistake]:
    """Every distractor of ``draft`` with a number, shown as an option or not, as a number a
    ``--typed`` learner may type, with its mistake in both languages (the chosen options'
    first); a number within the answer's tolerance, or one already listed, is left out (the
    learner's number is matched to the nearest, ``render._known_mistake``)."""
    out: list[NumericMistake] = []
    candidates = options[1:] + [c for c in draft.distractors if c not in options]
    for c in candidates:
        if c.value is None or c.group != draft.correct.group:
            continue
        value = c.value / _UNIT_SIZE.get(numeric.unit, 1)
        if _near(value, numeric) or any(abs(value - m.value) <= 1e-9 * abs(value) for m in out):
            continue
        words = {lang: mistake_text(kind, facts, draft, c, lang) for lang in Lang}
        out.append(NumericMistake(value=round(value, 6), en=words[Lang.en], ur=words[Lang.ur]))
    return out


def _near(value: float, numeric: Numeric, other: float | None = None) -> bool:
    """``value`` within ``numeric``'s tolerance of ``other`` (default: the answer)."""
    target = numeric.value if other is None else other
    return abs(value - target) <= max(numeric.tolerance * abs(target), 1e-9)


def mistake_text(kind: Kind, facts: ModelFacts, draft: Draft, c: Choice, lang: Lang) -> str:
    """The sentence of distractor ``c``'s mistake in ``lang``."""
    values = (
        common_values(facts, lang)
        | {"value": draft.correct.text(lang)}
        | draft.values
        | draft.lang_values.get(lang, {})
    )
    fill = values | {"option": c.text(lang)} | c.values | c.lang_values.get(lang, {})
    return MISTAKES[lang][c.mistake].format(**fill)
