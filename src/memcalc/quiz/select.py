"""Which questions are asked, in which order, with their options in which order.

Everything random goes through one ``random.Random(seed)``, so the same ``--seed`` (with the
same flags and bank) asks the same questions with the same option order.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from memcalc.errors import one_of
from memcalc.quiz.bank import NUM_OPTIONS, Difficulty, Lang, Question, Topic
from memcalc.quiz.context import QuizContext
from memcalc.quiz.errors import QuizError

DEFAULT_COUNT = 10
"""Questions per quiz when ``--count`` is not given."""

E = TypeVar("E", bound=Enum)


class Source(str, Enum):
    """Where the questions come from (``--source``)."""

    mixed = "mixed"
    """Half from the bank, half computed for your model (topped up from the other side when
    one runs short)."""
    bank = "bank"
    """Only the question bank (``quiz/*.toml``)."""
    model = "model"
    """Only questions computed for your model, setup and GPU."""


@dataclass(frozen=True)
class Asked:
    """A question as it is asked: ``order[i]`` is the file index of the option shown at
    position ``i`` (a, b, c, d)."""

    question: Question
    order: tuple[int, ...]
    source: str
    """``bank`` or ``model``."""
    follow_up: bool = False
    """True for the sibling asked after a miss on the same concept."""
    context: QuizContext | None = None
    """For a computed question: the model, GPU and setup its numbers are for (kept in the
    progress file, so ``--review`` asks it in the same numbers)."""

    def options(self, lang: Lang) -> list[str]:
        """The options in the order shown."""
        text = self.question.text(lang)
        return [text.options[i] for i in self.order]

    @property
    def correct_position(self) -> int:
        """0-based position of the correct option as shown."""
        return self.order.index(self.question.correct)

    def mistake(self, position: int, lang: Lang) -> str:
        """What picking the option shown at ``position`` means ("" when nothing is said)."""
        return self.question.mistake(self.order[position], lang)


def shuffled(
    question: Question,
    source: str,
    rng: random.Random,
    follow_up: bool = False,
    context: QuizContext | None = None,
) -> Asked:
    """``question`` with its options in a random order."""
    order = list(range(NUM_OPTIONS))
    rng.shuffle(order)
    return Asked(question, tuple(order), source, follow_up, context)


def source_of(question: Question) -> str:
    """``model`` for a generated question, ``bank`` otherwise."""
    return "model" if question.id.startswith("model-") else "bank"


def parse_enum(flag: str, value: str, enum: type[E]) -> E:
    """``value`` as a member of ``enum``; a one-line error naming ``flag`` otherwise."""
    try:
        return enum(value.strip().lower())
    except ValueError:
        raise one_of(flag, value, [m.value for m in enum]) from None


def parse_choices(flag: str, values: Iterable[str] | None, enum: type[E]) -> frozenset[E]:
    """Repeated and/or comma-separated flag values (``--topic a,b --topic c``); empty means
    no filter."""
    out: set[E] = set()
    for value in values or ():
        for part in value.split(","):
            if part.strip():
                out.add(parse_enum(flag, part, enum))
    return frozenset(out)


def matching(
    questions: Iterable[Question], topics: frozenset[Topic], difficulties: frozenset[Difficulty]
) -> list[Question]:
    """The questions whose topic and difficulty pass the filters (empty filter: all)."""
    return [
        q
        for q in questions
        if (not topics or q.topic in topics) and (not difficulties or q.difficulty in difficulties)
    ]


def split_count(count: int, bank_size: int, model_size: int, source: Source) -> tuple[int, int]:
    """How many (bank, model) questions to ask: half and half when mixed, topped up from the
    other side when one runs short; never more than there are.

    >>> split_count(10, 40, 10, Source.mixed), split_count(10, 40, 3, Source.mixed)
    ((5, 5), (7, 3))
    """
    if source is Source.bank:
        return min(count, bank_size), 0
    if source is Source.model:
        return 0, min(count, model_size)
    n_model = min(model_size, count // 2)
    n_bank = min(bank_size, count - n_model)
    n_model = min(model_size, count - n_bank)
    return n_bank, n_model


def pick(
    bank: list[Question],
    generated: list[Question],
    *,
    count: int,
    source: Source,
    topics: frozenset[Topic],
    difficulties: frozenset[Difficulty],
    rng: random.Random,
) -> list[Asked]:
    """Choose and shuffle the questions; a MemcalcError when no question passes the filters."""
    bank_pool = matching(bank, topics, difficulties) if source is not Source.model else []
    model_pool = matching(generated, topics, difficulties) if source is not Source.bank else []
    if not bank_pool and not model_pool:
        wanted = [f"--topic {','.join(sorted(t.value for t in topics))}"] if topics else []
        wanted += (
            [f"--difficulty {','.join(sorted(d.value for d in difficulties))}"]
            if difficulties
            else []
        )
        raise QuizError("no_match", wanted=" and ".join(wanted) or "--source", source=source.value)
    n_bank, n_model = split_count(count, len(bank_pool), len(model_pool), source)
    chosen = [(q, "bank") for q in rng.sample(bank_pool, n_bank)] + [
        (q, "model") for q in rng.sample(model_pool, n_model)
    ]
    rng.shuffle(chosen)
    return [shuffled(q, origin, rng) for q, origin in chosen]


def pick_review(
    due_ids: list[str],
    available: list[Question],
    *,
    count: int,
    topics: frozenset[Topic],
    difficulties: frozenset[Difficulty],
    rng: random.Random,
    contexts: dict[str, QuizContext] | None = None,
) -> list[Asked]:
    """``--review``: the due or missed questions that still exist and pass the filters, in
    the order given (missed first), at most ``count``, options shuffled; ``contexts``: what
    each computed question among them was computed for."""
    by_id = {q.id: q for q in matching(available, topics, difficulties)}
    chosen = [by_id[i] for i in due_ids if i in by_id][:count]
    found = contexts or {}
    return [shuffled(q, source_of(q), rng, context=found.get(q.id)) for q in chosen]
