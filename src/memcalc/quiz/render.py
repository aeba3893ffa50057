"""Quiz output: the text blocks of a session or a study sheet, and the JSON of a scripted run.

The words come from ``messages.py``; this module only arranges them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memcalc.quiz.bank import LETTERS, NUM_OPTIONS, Lang
from memcalc.quiz.messages import DIFFICULTY_NAMES, MESSAGES, TOPIC_NAMES
from memcalc.quiz.select import Asked

if TYPE_CHECKING:  # session imports render; the type is only needed for annotations
    from memcalc.quiz.session import Result


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
    seed: int
    lang: Lang


def _option(item: Asked, position: int, lang: Lang) -> str:
    return f"{LETTERS[position]}) {item.options(lang)[position]}"


def header(info: QuizInfo, count: int, *, sheet: bool = False) -> str:
    """The first line: the model the numbers are for, and the seed."""
    key = "sheet_header" if sheet else "header"
    return MESSAGES[info.lang][key].format(
        count=count,
        model=info.model,
        batch=info.batch,
        seq=info.seq,
        precision=info.precision,
        optimizer=info.optimizer,
        gpu=info.gpu,
        seed=info.seed,
    )


def question_block(item: Asked, index: int, total: int, lang: Lang) -> str:
    """The question with its options, lettered a-d in the order shown."""
    words = MESSAGES[lang]
    q = item.question
    title = words["question"].format(
        index=index + 1,
        total=total,
        topic=TOPIC_NAMES[lang][q.topic],
        difficulty=DIFFICULTY_NAMES[lang][q.difficulty],
        source=words[f"source.{item.source}"],
    )
    lines = ["", title, q.text(lang).prompt]
    lines += [f"  {_option(item, i, lang)}" for i in range(NUM_OPTIONS)]
    return "\n".join(lines)


def feedback(item: Asked, chosen: int, lang: Lang) -> str:
    """Right or wrong, the correct answer, and the explanation."""
    words = MESSAGES[lang]
    answer = _option(item, item.correct_position, lang)
    if chosen == item.correct_position:
        verdict = words["right"].format(answer=answer)
    else:
        verdict = words["wrong"].format(choice=_option(item, chosen, lang), answer=answer)
    return "\n".join(
        [verdict, words["why"].format(explanation=item.question.text(lang).explanation)]
    )


def summary(result: Result, info: QuizInfo) -> str:
    """The score so far and the concepts to review."""
    words = MESSAGES[info.lang]
    lines = [""]
    if result.stopped:
        lines.append(words["stopped"].format(answered=result.answered, total=result.total))
    if result.answered:
        percent = round(100 * result.correct / result.answered)
        lines.append(
            words["score"].format(correct=result.correct, answered=result.answered, percent=percent)
        )
        review = result.review
        lines.append(
            words["review"].format(concepts=words["list_join"].join(review))
            if review
            else words["no_review"]
        )
    else:
        lines.append(words["no_answers"])
    lines.append(words["again"].format(seed=info.seed))
    return "\n".join(lines)


def study_sheet(asked: list[Asked], info: QuizInfo) -> str:
    """``--reveal``: every question with its answer and explanation."""
    words = MESSAGES[info.lang]
    blocks = [header(info, len(asked), sheet=True)]
    for index, item in enumerate(asked):
        blocks.append(question_block(item, index, len(asked), info.lang))
        blocks.append(
            words["answer"].format(answer=_option(item, item.correct_position, info.lang))
        )
        blocks.append(words["why"].format(explanation=item.question.text(info.lang).explanation))
    return "\n".join(blocks)


def _question_json(item: Asked, lang: Lang, chosen: int | None) -> dict[str, Any]:
    q = item.question
    return {
        "id": q.id,
        "concept": q.concept,
        "topic": q.topic.value,
        "difficulty": q.difficulty.value,
        "source": item.source,
        "prompt": q.text(lang).prompt,
        "options": item.options(lang),
        "answer": None if chosen is None else LETTERS[chosen],
        "correct": LETTERS[item.correct_position],
        "is_correct": None if chosen is None else chosen == item.correct_position,
        "explanation": q.text(lang).explanation,
    }


def to_json(asked: list[Asked], info: QuizInfo, result: Result | None) -> str:
    """The quiz as JSON: every question (with the learner's answer when scripted), the score
    and the concepts to review; ``result`` is None for ``--reveal``."""
    chosen = {id(o.asked): o.chosen for o in result.outcomes} if result else {}
    doc: dict[str, Any] = {
        "model": info.model,
        "gpu": info.gpu_profile,
        "batch": info.batch,
        "seq": info.seq,
        "precision": info.precision,
        "optimizer": info.optimizer,
        "lang": info.lang.value,
        "seed": info.seed,
        "questions": [_question_json(a, info.lang, chosen.get(id(a))) for a in asked],
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
