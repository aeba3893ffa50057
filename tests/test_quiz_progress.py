"""Memory across sessions: the progress file (default under $XDG_STATE_HOME), Leitner
scheduling, what is due for review, mastery per topic, atomic writes, and a file that does not
parse."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from memcalc.quiz import progress as progress_module
from memcalc.quiz.bank import load_bank
from memcalc.quiz.errors import QuizError
from memcalc.quiz.progress import (
    BOX_DAYS,
    Progress,
    default_progress_path,
    due_for_review,
    load_progress,
    record_answer,
    save_progress,
    topic_stats,
)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def test_default_path_follows_xdg_state_home(tmp_path):
    assert default_progress_path({"XDG_STATE_HOME": str(tmp_path)}) == (
        tmp_path / "memcalc" / "quiz.json"
    )
    fallback = Path.home() / ".local" / "state" / "memcalc" / "quiz.json"
    assert default_progress_path({}) == fallback
    assert default_progress_path({"XDG_STATE_HOME": "relative/dir"}) == fallback


def test_leitner_boxes_schedule_the_next_review():
    q = load_bank()[0]
    p = record_answer(Progress(), q, True, "a", T0)
    assert p.questions[q.id].box == 2 and p.questions[q.id].due == T0 + timedelta(days=1)
    for box in (3, 4, 5, 5):
        p = record_answer(p, q, True, "a", T0)
        assert p.questions[q.id].box == box
        assert p.questions[q.id].due == T0 + timedelta(days=BOX_DAYS[box - 1])
    p = record_answer(p, q, False, "b", T0)
    assert p.questions[q.id].box == 1 and p.questions[q.id].due == T0
    assert p.questions[q.id].missed


def test_review_asks_missed_first_then_due():
    bank = load_bank()
    missed, due, later = bank[0], bank[1], bank[2]
    p = record_answer(Progress(), due, True, "a", T0 - timedelta(days=3))  # box 2, due T0-2d
    p = record_answer(p, later, True, "a", T0)  # box 2, due tomorrow
    p = record_answer(p, missed, False, "c", T0 - timedelta(hours=1))
    assert due_for_review(p, T0) == [missed.id, due.id]
    assert due_for_review(p, T0 + timedelta(days=2)) == [missed.id, due.id, later.id]


def test_topic_stats_numbers():
    bank = load_bank()
    q = next(x for x in bank if x.topic.value == "recompute")
    p = Progress()
    for _ in range(4):
        p = record_answer(p, q, True, "a", T0)
    rows = {r.topic.value if r.topic else "all": r for r in topic_stats(p, {q.topic: 2}, T0)}
    r = rows["recompute"]
    assert (r.seen, r.answers, r.right, r.mastered, r.due) == (1, 4, 4, 1, 0)
    assert r.mastery_percent == 50  # box 5 of 5 for one of two questions
    assert rows["attention"].mastery_percent == 0 and rows["all"].seen == 1


def test_progress_is_written_atomically(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    q = load_bank()[0]
    save_progress(path, record_answer(Progress(), q, True, "a", T0))
    before = path.read_text()

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(progress_module.os, "replace", crash)
    with pytest.raises(QuizError, match="cannot write the quiz progress file"):
        save_progress(path, record_answer(load_progress(path), q, False, "b", T0))
    assert path.read_text() == before  # the old file, whole
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temporary left behind


def test_save_and_load_round_trip_and_a_corrupt_file(tmp_path):
    bank = load_bank()
    p = record_answer(Progress(), bank[0], True, "b", T0)
    p = record_answer(p, bank[1], False, "12.5 GiB", T0)
    path = tmp_path / "deep" / "quiz.json"
    save_progress(path, p)
    assert load_progress(path) == p
    assert load_progress(tmp_path / "missing.json") == Progress()
    path.write_text("{not json")
    with pytest.raises(QuizError, match=r"cannot read the quiz progress file \(malformed JSON"):
        load_progress(path)
    assert path.read_text() == "{not json"
