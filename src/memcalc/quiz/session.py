"""The question loop and the score.

The loop is the same for a learner at the keyboard and for a script (``--answers``): it asks
``read`` for an answer and shows everything through ``write``. An invalid answer is asked
again; end of input, Ctrl-C or ``q`` ends the quiz with the score so far.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from memcalc.errors import MemcalcError
from memcalc.quiz import render
from memcalc.quiz.bank import LETTERS, NUM_OPTIONS, Lang
from memcalc.quiz.messages import MESSAGES
from memcalc.quiz.select import Asked

QUIT_WORDS = frozenset({"q", "quit", "exit"})


class EndOfQuiz(Exception):
    """The learner ended the quiz: end of input, Ctrl-C or ``q``."""


def parse_answer(text: str) -> int | None:
    """A 0-based option from ``a``-``d`` or ``1``-``4`` (case and a trailing ``)`` or ``.``
    ignored); None when it is neither.

    >>> parse_answer("B"), parse_answer("3"), parse_answer("d)"), parse_answer("e")
    (1, 2, 3, None)
    """
    t = text.strip().lower().rstrip(").")
    if len(t) == 1 and t in LETTERS:
        return LETTERS.index(t)
    if t.isdigit() and 1 <= int(t) <= NUM_OPTIONS:
        return int(t) - 1
    return None


def parse_answers(text: str) -> list[int]:
    """``--answers b,d,a,c`` (letters or numbers, comma-separated) as 0-based options."""
    parts = [p.strip() for p in text.split(",")]
    out = []
    for i, part in enumerate(parts, start=1):
        choice = parse_answer(part)
        if choice is None:
            raise MemcalcError(
                f"--answers: answer {i} is {part!r}; use one of: a, b, c, d (or 1-4), "
                "comma-separated, e.g. b,d,a,c"
            )
        out.append(choice)
    return out


@dataclass(frozen=True)
class Outcome:
    """One answered question."""

    asked: Asked
    chosen: int
    """0-based position the learner chose, as shown."""

    @property
    def is_correct(self) -> bool:
        return self.chosen == self.asked.correct_position


@dataclass(frozen=True)
class Result:
    """What happened in one quiz."""

    outcomes: tuple[Outcome, ...]
    total: int
    """Questions in the quiz, answered or not."""
    stopped: bool
    """True when the learner ended the quiz before the last question."""

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


Reader = Callable[[str], str]
"""Shows a prompt and returns the answer typed; raises EndOfQuiz at the end of input."""
Writer = Callable[[str], None]
"""Shows one block of text."""


def run_session(asked: list[Asked], lang: Lang, read: Reader, write: Writer) -> Result:
    """Ask every question in turn, show right/wrong, the correct answer and the explanation;
    stop cleanly at EndOfQuiz or Ctrl-C."""
    outcomes: list[Outcome] = []
    try:
        for index, item in enumerate(asked):
            write(render.question_block(item, index, len(asked), lang))
            chosen = _ask(read, write, lang)
            outcome = Outcome(item, chosen)
            outcomes.append(outcome)
            write(render.feedback(item, chosen, lang))
    except (EndOfQuiz, KeyboardInterrupt):
        return Result(tuple(outcomes), len(asked), stopped=True)
    return Result(tuple(outcomes), len(asked), stopped=False)


def _ask(read: Reader, write: Writer, lang: Lang) -> int:
    """One valid answer, asking again after an invalid one."""
    words = MESSAGES[lang]
    while True:
        text = read(words["prompt"])
        if text.strip().lower() in QUIT_WORDS:
            raise EndOfQuiz
        choice = parse_answer(text)
        if choice is not None:
            return choice
        write(words["invalid"])


def scripted_reader(answers: Iterable[int], write: Writer | None = None) -> Reader:
    """A Reader that gives the ``--answers`` in turn (shown through ``write`` when given, as
    if typed) and ends the quiz when they run out."""
    it: Iterator[int] = iter(answers)

    def read(prompt: str) -> str:
        try:
            letter = LETTERS[next(it)]
        except StopIteration:
            raise EndOfQuiz from None
        if write is not None:
            write(prompt + letter)
        return letter

    return read
