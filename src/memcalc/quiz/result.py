"""What happened in a quiz: one Outcome per answered question, and the Result of the session.

Below both ``session`` (which makes them) and ``render`` / ``export`` (which show them).
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.quiz.bank import LETTERS
from memcalc.quiz.select import Asked


@dataclass(frozen=True)
class Outcome:
    """One answered question."""

    asked: Asked
    chosen: int | None
    """0-based position the learner chose, as shown; None when a number was typed."""
    typed: str | None = None
    """What the learner typed under ``--typed``."""
    typed_value: float | None = None
    """The typed number in the answer's unit."""
    correct: bool | None = None
    """Whether a typed number was within the tolerance (None for a chosen option)."""

    @property
    def is_correct(self) -> bool:
        if self.chosen is None:
            return bool(self.correct)
        return self.chosen == self.asked.correct_position

    @property
    def answer(self) -> str:
        """The letter chosen (a-d) or the text typed, as recorded in JSON and progress."""
        return LETTERS[self.chosen] if self.chosen is not None else (self.typed or "")


@dataclass(frozen=True)
class Result:
    """What happened in one quiz."""

    outcomes: tuple[Outcome, ...]
    total: int
    """Questions in the quiz, answered or not (follow-ups included)."""
    stopped: bool
    """True when the learner ended the quiz before the last question."""
    interrupted: bool = False
    """True when the quiz ended with Ctrl-C."""

    @property
    def answered(self) -> int:
        return len(self.outcomes)

    @property
    def correct(self) -> int:
        return sum(o.is_correct for o in self.outcomes)

    @property
    def review(self) -> list[str]:
        """Concepts of the questions answered wrongly, each once, in the order asked."""
        out: list[str] = []
        for o in self.outcomes:
            if not o.is_correct and o.asked.question.concept not in out:
                out.append(o.asked.question.concept)
        return out
