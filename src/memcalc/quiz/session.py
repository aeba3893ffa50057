"""The question loop and the score.

The loop is the same for a learner at the keyboard and for a script (``--answers``): it asks
``read`` for an answer and shows everything through ``write``. An invalid answer is asked
again; end of input or ``q`` ends the quiz with the score so far; Ctrl-C ends it as
interrupted (the command prints one line and exits 130). After a miss, ``follow_up`` may
schedule a sibling question on the same concept a few questions later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from memcalc.quiz import render
from memcalc.quiz.bank import LETTERS, NUM_OPTIONS, URDU_LETTERS, Lang
from memcalc.quiz.errors import QuizError
from memcalc.quiz.messages import MESSAGES
from memcalc.quiz.result import Outcome, Result
from memcalc.quiz.select import Asked
from memcalc.quiz.typed import accepted, parse_typed

QUIT_WORDS = frozenset({"q", "quit", "exit", "ختم"})
"""Typed instead of an answer, these end the quiz (``ختم``: Urdu for "end")."""

FOLLOW_UP_GAP = 2
"""A sibling of a missed question comes after this many other questions (or at the end)."""

_DIGITS = {str(i + 1): i for i in range(NUM_OPTIONS)}
_DIGITS |= {chr(0x06F1 + i): i for i in range(NUM_OPTIONS)}  # Urdu/Persian ۱ ۲ ۳ ۴
_DIGITS |= {chr(0x0661 + i): i for i in range(NUM_OPTIONS)}  # Arabic-Indic ١ ٢ ٣ ٤
_LETTERS = {c: i for i, c in enumerate(LETTERS)} | {c: i for i, c in enumerate(URDU_LETTERS)}
_LETTERS["ا"] = 0  # alif alone, as a quick answer for الف


class EndOfQuiz(Exception):
    """The learner ended the quiz: end of input or ``q``."""


def parse_answer(text: str) -> int | None:
    """A 0-based option from a letter (``a``-``d``, or Urdu ``الف ب ج د``, alif alone for
    الف) or a digit (``1``-``4``, Urdu ``۱``-``۴`` or Arabic-Indic ``١``-``٤``); case, spaces,
    the brackets of ``(ب)`` and a trailing ``)``, ``.`` or ``۔`` are ignored; None when it is
    none of these.

    >>> parse_answer("B"), parse_answer("3"), parse_answer("d)"), parse_answer("e")
    (1, 2, 3, None)
    >>> parse_answer("ج"), parse_answer("۴"), parse_answer("٢")
    (2, 3, 1)
    >>> parse_answer("الف"), parse_answer("(الف)"), parse_answer("ا"), parse_answer("(ب)")
    (0, 0, 0, 1)
    """
    t = text.strip().lower().rstrip(".۔").strip("() ")
    if t in _LETTERS:
        return _LETTERS[t]
    return _DIGITS.get(t)


def parse_answers(text: str) -> list[int]:
    """``--answers b,d,a,c`` (letters or numbers, comma-separated; the Urdu comma ``،``
    too) as 0-based options."""
    parts = [p.strip() for p in text.replace("،", ",").split(",")]
    out = []
    for i, part in enumerate(parts, start=1):
        choice = parse_answer(part)
        if choice is None:
            raise QuizError("answers.bad", index=i, part=part)
        out.append(choice)
    return out


Reader = Callable[[str], str]
"""Shows a prompt and returns the answer typed; raises EndOfQuiz at the end of input."""
Writer = Callable[[str], None]
"""Shows one block of text."""
FollowUp = Callable[[Asked, set[str]], Asked | None]
"""The sibling of a missed question, given the ids already asked or queued; None if none."""
OnAnswer = Callable[[Outcome], None]
"""Called after every answer (to save progress)."""


def run_session(
    asked: list[Asked],
    lang: Lang,
    read: Reader,
    write: Writer,
    *,
    typed: bool = False,
    follow_up: FollowUp | None = None,
    on_answer: OnAnswer | None = None,
    pause: bool = False,
) -> Result:
    """Ask every question in turn, show right/wrong, the mistake and the explanation; after a
    miss queue a sibling; stop cleanly at EndOfQuiz or Ctrl-C."""
    queue = list(asked)
    outcomes: list[Outcome] = []
    index = 0
    try:
        while index < len(queue):
            item = queue[index]
            write(render.question_block(item, index, len(queue), lang, typed))
            if render.is_typed(item, typed):
                outcome = _ask_number(item, read, write, lang)
            else:
                outcome = Outcome(item, _ask_letter(read, write, lang))
            outcomes.append(outcome)
            if on_answer is not None:
                on_answer(outcome)
            write(render.feedback(outcome, lang))
            if not outcome.is_correct and follow_up is not None and not item.follow_up:
                seen = {q.question.id for q in queue}
                sibling = follow_up(item, seen)
                if sibling is not None:
                    queue.insert(min(index + 1 + FOLLOW_UP_GAP, len(queue)), sibling)
            index += 1
            if pause and index < len(queue):
                _pause(read, lang)
    except EndOfQuiz:
        return Result(tuple(outcomes), len(queue), stopped=True)
    except KeyboardInterrupt:
        return Result(tuple(outcomes), len(queue), stopped=True, interrupted=True)
    return Result(tuple(outcomes), len(queue), stopped=False)


def _ask_letter(read: Reader, write: Writer, lang: Lang) -> int:
    """One valid option, asking again after an invalid answer."""
    words = MESSAGES[lang]
    while True:
        text = read(words["prompt"])
        if text.strip().lower() in QUIT_WORDS:
            raise EndOfQuiz
        choice = parse_answer(text)
        if choice is not None:
            return choice
        write(words["invalid"])


def _ask_number(item: Asked, read: Reader, write: Writer, lang: Lang) -> Outcome:
    """One number in a unit that fits the question, asking again after anything else."""
    numeric = item.question.numeric
    assert numeric is not None  # only called for questions with a numeric answer
    words = MESSAGES[lang]
    while True:
        text = read(render.typed_prompt(item, lang))
        if text.strip().lower() in QUIT_WORDS:
            raise EndOfQuiz
        value = parse_typed(text, numeric)
        if value is not None:
            return Outcome(
                item, None, text.strip(), typed_value=value, correct=accepted(value, numeric)
            )
        write(words["typed_invalid"].format(unit_hint=render.unit_hint(item, lang)))


def _pause(read: Reader, lang: Lang) -> None:
    """Wait for Enter between questions (at a terminal); ``q`` ends the quiz."""
    if read(MESSAGES[lang]["pause"]).strip().lower() in QUIT_WORDS:
        raise EndOfQuiz


def scripted_reader(answers: Iterable[int], write: Writer | None = None) -> Reader:
    """A Reader that gives the ``--answers`` in turn (shown through ``write`` when given, as
    if typed) and ends the quiz when they run out."""
    it: Iterator[int] = iter(answers)

    def read(prompt: str) -> str:
        try:
            answer = LETTERS[next(it)]
        except StopIteration:
            raise EndOfQuiz from None
        if write is not None:
            write(prompt + answer)
        return answer

    return read
