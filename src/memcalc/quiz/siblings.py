"""The sibling of a missed question: another question on the same concept, asked later in
the same session so the learner meets the idea again with other words or numbers.

In order of preference: a question on the same concept not asked yet (bank or computed for
the model); for a computed question, the same kind for a varied setup (``Kind.variation``:
twice the batch, another precision, optimizer or depth); the same question again with its
options reshuffled.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from memcalc.quiz.bank import Question
from memcalc.quiz.context import QuizContext
from memcalc.quiz.select import Asked, shuffled, source_of

Variant = Callable[[Question], tuple[Question, QuizContext | None] | None]
"""The same generated question for a varied setup, with what it is computed for (None for a
bank question)."""


class FollowUps:
    """Finds siblings among ``pool`` (every question of the session's bank and model, the
    computed ones for ``context``)."""

    def __init__(
        self,
        pool: list[Question],
        variant: Variant,
        rng: random.Random,
        context: QuizContext | None = None,
    ) -> None:
        self._pool = pool
        self._variant = variant
        self._rng = rng
        self._context = context

    def __call__(self, missed: Asked, seen: set[str]) -> Asked | None:
        q = missed.question
        same = [p for p in self._pool if p.concept == q.concept and p.id not in seen]
        if same:
            sibling = self._rng.choice(same)
            context = self._context if source_of(sibling) == "model" else None
        else:
            varied = self._variant(q)
            if varied is not None and varied[0].en.prompt != q.en.prompt:
                sibling, context = varied
            else:
                sibling, context = q, missed.context
        return shuffled(sibling, source_of(sibling), self._rng, True, context)
