"""Memory across sessions: what was asked, how it went, and when to ask it again.

One JSON file (default ``$XDG_STATE_HOME/memcalc/quiz.json``, else
``~/.local/state/memcalc/quiz.json``; ``--progress FILE`` to choose) holds each question's
history and its Leitner box (Leitner 1972, as in most flash-card tools): a right answer moves
the question up one box, a wrong one sends it back to box 1; box ``n`` is due again
``BOX_DAYS[n - 1]`` days after the last answer. Writes are atomic (a temporary file in the
same folder, then ``os.replace``); a file that does not parse is an error naming it, and it is
never overwritten.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from memcalc.errors import MemcalcError
from memcalc.files import parse_data, read_text_file, shown
from memcalc.quiz.bank import Question, Topic
from memcalc.quiz.context import QuizContext
from memcalc.quiz.errors import QuizError

BOX_DAYS = (0, 1, 3, 7, 21)
"""Days until a question in box 1..5 is due again after its last answer."""

MASTERED_BOX = 4
"""A question in box 4 or 5 counts as mastered in ``--stats``."""

HISTORY_LIMIT = 50
"""Attempts kept per question (the oldest are dropped)."""


def default_progress_path(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/memcalc/quiz.json`` when that variable holds an absolute path (the
    XDG Base Directory spec ignores relative ones), else ``~/.local/state/memcalc/quiz.json``.

    >>> default_progress_path({"XDG_STATE_HOME": "/tmp/state"}).as_posix()
    '/tmp/state/memcalc/quiz.json'
    """
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "memcalc" / "quiz.json"


class Attempt(BaseModel):
    """One answer to one question."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: AwareDatetime = Field(description="When it was answered (with its time zone).")
    correct: bool = Field(description="Whether the answer was right.")
    answer: str = Field(description="What was answered: a letter, or the number typed.")


class Record(BaseModel):
    """A question's history and schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: Topic = Field(description="The question's topic (for --stats).")
    concept: str = Field(description="The question's concept tag.")
    box: int = Field(ge=1, le=len(BOX_DAYS), description="Leitner box, 1 (new or missed) to 5.")
    due: AwareDatetime = Field(description="When the question is due again.")
    history: list[Attempt] = Field(min_length=1, description="Answers, oldest first.")
    context: QuizContext | None = Field(
        default=None,
        description="For a computed question: the model, GPU and setup of its last asking, "
        "which --review asks it for again (absent for bank questions and older files).",
    )

    @property
    def missed(self) -> bool:
        """True when the last answer was wrong."""
        return not self.history[-1].correct


class Progress(BaseModel):
    """The whole progress file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = Field(default=1, description="File format version.")
    questions: dict[str, Record] = Field(
        default_factory=dict, description="By question id (generated ones: model-<kind>)."
    )


def load_progress(path: Path) -> Progress:
    """The progress in ``path``; an empty one when the file does not exist yet."""
    try:
        missing = not path.exists() and not path.is_symlink()
    except (OSError, ValueError):
        missing = False  # read_text_file says what is wrong with the path
    if missing:
        return Progress()
    try:
        data = parse_data(read_text_file(path), "json", shown(path))
        return Progress.model_validate(data)
    except MemcalcError as e:
        reason = str(e).removeprefix(f"{shown(path)}: ")
        raise QuizError("progress.read", path=shown(path), reason=reason) from None
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(x) for x in first["loc"]) or "file"
        reason = f"{field}: {first['msg']}"
        raise QuizError("progress.read", path=shown(path), reason=reason) from None


def save_progress(path: Path, progress: Progress) -> None:
    """Write ``progress`` to ``path`` atomically: a temporary file beside it, flushed to
    disk, then renamed over it, so a crash leaves the old file or the new one, never half."""
    text = json.dumps(progress.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise QuizError("progress.write", path=path, reason=e.strerror or str(e)) from None


def record_answer(
    progress: Progress,
    question: Question,
    correct: bool,
    answer: str,
    now: datetime,
    context: QuizContext | None = None,
) -> Progress:
    """``progress`` with one more answer: the question moves up a box when right (a new
    question starts in box 1, so a first right answer puts it in box 2) and back to box 1
    when wrong; it is due again after its box's interval. ``context``: what a computed
    question was computed for (kept for ``--review``)."""
    old = progress.questions.get(question.id)
    box = old.box if old else 1
    box = min(box + 1, len(BOX_DAYS)) if correct else 1
    history = [*(old.history if old else []), Attempt(at=now, correct=correct, answer=answer)]
    record = Record(
        topic=question.topic,
        concept=question.concept,
        box=box,
        due=now + timedelta(days=BOX_DAYS[box - 1]),
        history=history[-HISTORY_LIMIT:],
        context=context,
    )
    return progress.model_copy(update={"questions": {**progress.questions, question.id: record}})


def due_for_review(progress: Progress, now: datetime) -> list[str]:
    """Question ids to review: the missed ones first (most recent miss first), then those
    due by ``now`` (longest overdue first)."""
    missed = [(r.history[-1].at, qid) for qid, r in progress.questions.items() if r.missed]
    due = [(r.due, qid) for qid, r in progress.questions.items() if not r.missed and r.due <= now]
    return [q for _, q in sorted(missed, reverse=True)] + [q for _, q in sorted(due)]


def next_due(progress: Progress) -> tuple[datetime, int] | None:
    """When the next question falls due, and how many fall due then (same day)."""
    if not progress.questions:
        return None
    first = min(r.due for r in progress.questions.values())
    same_day = sum(r.due.date() == first.date() for r in progress.questions.values())
    return first, same_day


@dataclass(frozen=True)
class TopicStats:
    """Mastery of one topic."""

    topic: Topic | None
    """None for the total line."""
    available: int
    """Questions of the topic (bank + generated kinds)."""
    seen: int
    answers: int
    right: int
    mastered: int
    due: int
    level_sum: int
    """Sum of (box - 1) over the seen questions: 0 for box 1, 4 for box 5."""

    @property
    def right_percent(self) -> int | None:
        return round(100 * self.right / self.answers) if self.answers else None

    @property
    def mastery_percent(self) -> int:
        """How far up the boxes the topic's questions are: 0% when none is past box 1 (or
        none was seen), 100% when every question of the topic is in box 5."""
        top = (len(BOX_DAYS) - 1) * max(self.available, self.seen)
        return round(100 * self.level_sum / top) if top else 0


def topic_stats(progress: Progress, available: dict[Topic, int], now: datetime) -> list[TopicStats]:
    """One line per topic (in ``Topic`` order) and a total line."""
    rows = []
    for topic in Topic:
        records = [r for r in progress.questions.values() if r.topic is topic]
        rows.append(_stats(topic, available.get(topic, 0), records, now))
    rows.append(_stats(None, sum(available.values()), list(progress.questions.values()), now))
    return rows


def _stats(
    topic: Topic | None, available: int, records: Iterable[Record], now: datetime
) -> TopicStats:
    records = list(records)
    return TopicStats(
        topic=topic,
        available=available,
        seen=len(records),
        answers=sum(len(r.history) for r in records),
        right=sum(a.correct for r in records for a in r.history),
        mastered=sum(r.box >= MASTERED_BOX for r in records),
        due=sum(r.missed or r.due <= now for r in records),
        level_sum=sum(r.box - 1 for r in records),
    )
