"""Quiz output: the text blocks of a session or a study sheet, and the JSON of a scripted run.

The words come from ``messages.py``; this module only arranges them into logical lines (one
paragraph per line). Laying them out on a terminal (wrapping, right-to-left marks for Urdu) is
``terminal.py``'s job; the study-sheet files are ``export.py``'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memcalc.quiz.bank import LETTERS, NUM_OPTIONS, URDU_LETTERS, Lang, Numeric, NumericMistake
from memcalc.quiz.messages import DIFFICULTY_NAMES, MESSAGES, TOPIC_NAMES, questions_text
from memcalc.quiz.result import Outcome, Result
from memcalc.quiz.select import Asked
from memcalc.quiz.typed import answer_text, option_value, tolerance_text, unit_word

ConceptNames = Callable[[str], str]
"""A concept tag's name in the quiz's language."""


@dataclass(frozen=True)
class QuizInfo:
    """What the quiz is about, for its header and its JSON."""

    model: str
    gpu: str
    """The GPU's display name."""
    gpu_profile: str
    batch: int
    seq: int
    precision: str
    optimizer: str
    attention: str
    seed: int
    lang: Lang


def letter(position: int, lang: Lang) -> str:
    """The letter of an option: a-d in English, الف ب ج د in Urdu."""
    return (URDU_LETTERS if lang is Lang.ur else LETTERS)[position]


def option_label(position: int, lang: Lang) -> str:
    """An option's label as shown: ``b)`` in English, ``(ب)`` in Urdu (as Pakistani exam
    papers write it)."""
    if lang is Lang.ur:
        return f"({letter(position, lang)})"
    return f"{letter(position, lang)})"


def option_line(item: Asked, position: int, lang: Lang) -> str:
    """``b) 75.31 GiB``: an option with its label."""
    return f"{option_label(position, lang)} {item.options(lang)[position]}"


def header(info: QuizInfo, count: int, *, key: str = "header") -> str:
    """The first line: the model the numbers are for, and the seed."""
    return MESSAGES[info.lang][key].format(
        count=count,
        questions=questions_text(count, info.lang),
        model=info.model,
        batch=info.batch,
        seq=info.seq,
        precision=info.precision,
        optimizer=info.optimizer,
        attention=info.attention,
        gpu=info.gpu,
        seed=info.seed,
    )


def question_title(item: Asked, index: int, total: int, lang: Lang) -> str:
    """``Question 2/10 · recompute · hard · computed for your model``."""
    words = MESSAGES[lang]
    q = item.question
    source = words["follow_up"] if item.follow_up else words[f"source.{item.source}"]
    return words["question"].format(
        index=index + 1,
        total=total,
        topic=TOPIC_NAMES[lang][q.topic],
        difficulty=DIFFICULTY_NAMES[lang][q.difficulty],
        source=source,
    )


def is_typed(item: Asked, typed: bool) -> bool:
    """True when this question is answered by typing a number."""
    return typed and item.question.numeric is not None


def question_block(item: Asked, index: int, total: int, lang: Lang, typed: bool = False) -> str:
    """A blank line, the title, the question and (unless a number is typed) its options."""
    lines = ["", question_title(item, index, total, lang), item.question.text(lang).prompt]
    if not is_typed(item, typed):
        lines += [f"  {option_line(item, i, lang)}" for i in range(NUM_OPTIONS)]
    return "\n".join(lines)


def typed_prompt(item: Asked, lang: Lang) -> str:
    """The prompt for a typed number: the unit to give and the tolerance."""
    numeric = item.question.numeric
    assert numeric is not None  # only asked for questions with a numeric answer
    words = MESSAGES[lang]
    return words["typed_prompt"].format(
        unit_hint=unit_hint(item, lang), tolerance=tolerance_text(numeric, words["exactly"])
    )


def unit_hint(item: Asked, lang: Lang) -> str:
    """How to write the number: with a size unit, as a percentage, or a bare count."""
    numeric = item.question.numeric
    words = MESSAGES[lang]
    if numeric is None or unit_word(numeric) == "":
        return words["typed_count_hint"]
    return words["typed_percent_hint" if unit_word(numeric) == "%" else "typed_unit_hint"]


def feedback(outcome: Outcome, lang: Lang) -> str:
    """Right or wrong, the mistake the chosen option stands for, and the explanation."""
    words, item = MESSAGES[lang], outcome.asked
    answer = option_line(item, item.correct_position, lang)
    lines = []
    if outcome.chosen is None:
        lines += _typed_feedback(outcome, lang)
    elif outcome.is_correct:
        lines.append(words["right"].format(answer=answer))
    else:
        choice = option_line(item, outcome.chosen, lang)
        lines.append(words["wrong"].format(choice=choice, answer=answer))
        mistake = item.mistake(outcome.chosen, lang)
        if mistake:
            lines.append(words["mistake"].format(mistake=mistake))
    lines.append(words["why"].format(explanation=item.question.text(lang).explanation))
    return "\n".join(lines)


def _typed_feedback(outcome: Outcome, lang: Lang) -> list[str]:
    words, item = MESSAGES[lang], outcome.asked
    numeric = item.question.numeric
    assert numeric is not None
    values = {
        "typed": outcome.typed or "",
        "answer": answer_text(numeric),
        "tolerance": tolerance_text(numeric, words["exactly"]),
    }
    if outcome.is_correct:
        return [words["typed_right"].format(**values)]
    lines = [words["typed_wrong"].format(**values)]
    known = _known_mistake(numeric, outcome.typed_value)
    if known is not None:
        shown = f"{known.value:g}{unit_word(numeric)}"
        lines.append(words["typed_mistake"].format(option=shown, mistake=known.text(lang)))
    elif outcome.typed_value is not None:
        for position in range(NUM_OPTIONS):
            if position == item.correct_position:
                continue
            value = option_value(item.options(Lang.en)[position], numeric)
            mistake = item.mistake(position, lang)
            close = value is not None and abs(value - outcome.typed_value) <= max(
                numeric.tolerance * abs(value), 1e-9
            )
            if close and mistake:
                option = item.options(lang)[position]
                lines.append(words["typed_mistake"].format(option=option, mistake=mistake))
                break
    return lines


def _known_mistake(numeric: Numeric, typed: float | None) -> NumericMistake | None:
    """The known mistake (``Numeric.mistakes``) nearest the typed number, within the
    answer's tolerance of it; None when the number matches none."""
    if typed is None:
        return None
    near = [
        m
        for m in numeric.mistakes
        if abs(m.value - typed) <= max(numeric.tolerance * abs(m.value), 1e-9)
    ]
    return min(near, key=lambda m: abs(m.value - typed), default=None)


def summary(result: Result, info: QuizInfo, concept_name: ConceptNames) -> str:
    """The score so far and the concepts to review, by name."""
    words = MESSAGES[info.lang]
    lines = [""]
    if result.stopped:
        lines.append(
            words["stopped"].format(
                answered=result.answered,
                total_questions=questions_text(result.total, info.lang),
            )
        )
    if result.answered:
        percent = round(100 * result.correct / result.answered)
        lines.append(
            words["score"].format(correct=result.correct, answered=result.answered, percent=percent)
        )
        review = [concept_name(c) for c in result.review]
        lines.append(
            words["review"].format(concepts=words["list_join"].join(review))
            if review
            else words["no_review"]
        )
    else:
        lines.append(words["no_answers"])
    lines.append(words["again"].format(seed=info.seed))
    return "\n".join(lines)


def interrupted_line(result: Result, lang: Lang) -> str:
    """The one line printed when the learner presses Ctrl-C."""
    return MESSAGES[lang]["interrupted"].format(
        answered=result.answered,
        total_questions=questions_text(result.total, lang),
        correct=result.correct,
    )


def why_not(item: Asked, lang: Lang) -> list[str]:
    """``Why not b): ...`` for each wrong option that names its mistake."""
    words = MESSAGES[lang]
    return [
        words["why_not"].format(option=option_label(i, lang), mistake=item.mistake(i, lang))
        for i in range(NUM_OPTIONS)
        if i != item.correct_position and item.mistake(i, lang)
    ]


def study_sheet(asked: list[Asked], info: QuizInfo) -> str:
    """``--reveal``: every question with its answer, explanation and why the others are
    wrong."""
    words = MESSAGES[info.lang]
    blocks = [header(info, len(asked), key="sheet_header")]
    for index, item in enumerate(asked):
        blocks.append(question_block(item, index, len(asked), info.lang))
        blocks.append(
            words["answer"].format(answer=option_line(item, item.correct_position, info.lang))
        )
        blocks.append(words["why"].format(explanation=item.question.text(info.lang).explanation))
        blocks += why_not(item, info.lang)
    return "\n".join(blocks)


def _question_json(item: Asked, lang: Lang, outcome: Outcome | None) -> dict[str, Any]:
    q = item.question
    chosen = outcome.chosen if outcome else None
    return {
        "id": q.id,
        "concept": q.concept,
        "topic": q.topic.value,
        "difficulty": q.difficulty.value,
        "source": item.source,
        "prompt": q.text(lang).prompt,
        "options": item.options(lang),
        "answer": None if outcome is None else outcome.answer,
        "correct": LETTERS[item.correct_position],
        "is_correct": None if outcome is None else outcome.is_correct,
        "mistake": (item.mistake(chosen, lang) or None) if chosen is not None else None,
        "mistakes": {
            LETTERS[i]: item.mistake(i, lang)
            for i in range(NUM_OPTIONS)
            if i != item.correct_position and item.mistake(i, lang)
        },
        "explanation": q.text(lang).explanation,
    }


def to_json(asked: list[Asked], info: QuizInfo, result: Result | None) -> str:
    """The quiz as JSON: every question (with the learner's answer when scripted), the score
    and the concepts to review; ``result`` is None for ``--reveal``."""
    outcomes = {id(o.asked): o for o in result.outcomes} if result else {}
    doc: dict[str, Any] = {
        "model": info.model,
        "gpu": info.gpu_profile,
        "batch": info.batch,
        "seq": info.seq,
        "precision": info.precision,
        "optimizer": info.optimizer,
        "attention": info.attention,
        "lang": info.lang.value,
        "seed": info.seed,
        "questions": [_question_json(a, info.lang, outcomes.get(id(a))) for a in asked],
        "score": None
        if result is None
        else {
            "correct": result.correct,
            "answered": result.answered,
            "total": result.total,
        },
        "review": None if result is None else result.review,
    }
    return json.dumps(doc, ensure_ascii=False, indent=2)
