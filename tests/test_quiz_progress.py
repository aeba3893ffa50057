"""Memory across sessions: the progress file (default under $XDG_STATE_HOME, --progress to
choose, never written by --answers unless asked), Leitner scheduling, --review, --stats,
atomic writes, and a corrupt file that stops the quiz with one line and is not overwritten."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from memcalc.quiz import command as quiz_module
from memcalc.quiz import progress as progress_module
from memcalc.quiz.bank import LETTERS, load_bank
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
from quiz_helpers import cli, isolated_state, quiz, reveal

pytestmark = pytest.mark.usefixtures(isolated_state.__name__)

QUIZ = ("--model", "gpt2", "--seed", "3", "--count", "3")
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def _answers(right: list[bool], *args: str) -> str:
    questions = reveal(*QUIZ, *args)["questions"]
    return ",".join(
        q["correct"] if ok else next(x for x in LETTERS if x != q["correct"])
        for q, ok in zip(questions, right, strict=True)
    )


def test_default_path_follows_xdg_state_home(tmp_path):
    assert default_progress_path({"XDG_STATE_HOME": str(tmp_path)}) == (
        tmp_path / "memcalc" / "quiz.json"
    )
    fallback = Path.home() / ".local" / "state" / "memcalc" / "quiz.json"
    assert default_progress_path({}) == fallback
    assert default_progress_path({"XDG_STATE_HOME": "relative/dir"}) == fallback


def test_answers_mode_never_writes_unless_asked(isolated_state, tmp_path):
    result = quiz(*QUIZ, "--answers", _answers([True, False, True]))
    assert result.exit_code == 0
    assert not isolated_state.exists()  # nothing under $XDG_STATE_HOME
    chosen = tmp_path / "mine.json"
    result = quiz(*QUIZ, "--answers", _answers([True, False, True]), "--progress", str(chosen))
    assert result.exit_code == 0 and chosen.exists()
    assert not isolated_state.exists()


def test_piped_interactive_quiz_writes_nothing_by_default(isolated_state):
    result = quiz(*QUIZ, input="a\nb\nc\n")
    assert result.exit_code == 0 and not isolated_state.exists()


def test_at_a_terminal_progress_goes_to_the_state_dir_and_the_quiz_pauses(
    isolated_state, monkeypatch
):
    monkeypatch.setattr(quiz_module, "_at_terminal", lambda: True)
    questions = reveal(*QUIZ)["questions"]
    c = [q["correct"] for q in questions]
    # Answers, with an Enter (the pause) after each question but the last.
    result = quiz(*QUIZ, input=f"{c[0]}\n\n{c[1]}\n\n{c[2]}\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("Press Enter for the next question") == 2
    saved = isolated_state / "memcalc" / "quiz.json"
    data = json.loads(saved.read_text())
    assert set(data["questions"]) == {q["id"] for q in questions}
    assert f"Progress saved to {saved}" in result.stdout


def test_round_trip_and_history(tmp_path):
    path = tmp_path / "p.json"
    args = ("--progress", str(path))
    quiz(*QUIZ, "--answers", _answers([True, False, True]), *args)
    quiz(*QUIZ, "--answers", _answers([True, True, False]), *args)
    progress = load_progress(path)
    questions = reveal(*QUIZ)["questions"]
    records = [progress.questions[q["id"]] for q in questions]
    assert [len(r.history) for r in records] == [2, 2, 2]
    assert [[a.correct for a in r.history] for r in records] == [
        [True, True],
        [False, True],
        [True, False],
    ]
    assert [r.box for r in records] == [3, 2, 1]
    assert records[0].history[0].answer == questions[0]["correct"]
    assert records[0].topic.value == questions[0]["topic"]
    # What is written is what is read.
    again = tmp_path / "again.json"
    save_progress(again, progress)
    assert load_progress(again) == progress


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


def test_review_command_asks_what_is_due(tmp_path):
    path = tmp_path / "p.json"
    first = reveal(*QUIZ)["questions"]
    quiz(*QUIZ, "--answers", _answers([True, False, True]), "--progress", str(path))
    result = quiz(
        "--review", "--progress", str(path), "--seed", "1", "--reveal", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    asked = [q["id"] for q in json.loads(result.stdout)["questions"]]
    assert asked == [first[1]["id"]]  # the miss; the right answers are due tomorrow
    # Tomorrow the right ones are due as well.
    data = json.loads(path.read_text())
    for record in data["questions"].values():
        record["due"] = "2000-01-01T00:00:00Z"
    path.write_text(json.dumps(data))
    result = quiz("--review", "--progress", str(path), "--reveal", "--format", "json")
    assert {q["id"] for q in json.loads(result.stdout)["questions"]} == {q["id"] for q in first}
    interactive = quiz("--review", "--progress", str(path), "--count", "1", input="a\n")
    assert interactive.stdout.startswith("memcalc quiz review: 1 question due or missed.")


def test_review_with_nothing_due(tmp_path):
    result = quiz("--review", "--progress", str(tmp_path / "none.json"))
    assert result.exit_code == 0
    assert "Nothing to review in" in result.stdout
    path = tmp_path / "p.json"
    quiz(*QUIZ, "--answers", _answers([True, True, True]), "--progress", str(path))
    result = quiz("--review", "--progress", str(path))
    assert "Nothing to review" in result.stdout and "Next due: " in result.stdout
    assert "(3 questions)" in result.stdout


def test_stats_show_mastery_per_topic(tmp_path, capsys):
    path = tmp_path / "p.json"
    code, out, _ = cli(capsys, "quiz", "--stats", "--progress", str(path))
    assert code == 0 and "No answers recorded" in out
    quiz(*QUIZ, "--answers", _answers([True, False, True]), "--progress", str(path))
    code, out, _ = cli(capsys, "quiz", "--stats", "--progress", str(path))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"memcalc quiz progress: {path}"
    assert lines[1].split() == ["topic", "seen", "answers", "right", "mastered", "due", "mastery"]
    total = next(x for x in lines if x.startswith("all "))
    assert total.split()[2:4] == ["3", "67%"] and total.split()[5] == "1"
    assert "Leitner boxes 1-5" in out
    code, out, _ = cli(capsys, "quiz", "--stats", "--progress", str(path), "--lang", "ur")
    assert code == 0 and "موضوع" in out and "ری کمپیوٹ" in out


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


@pytest.mark.parametrize(
    "content, reason",
    [
        ("{not json", "malformed JSON at line 1"),
        ('{"version": 2, "questions": {}}', "version"),
        ('{"version": 1, "questions": {"x": {"box": 9}}}', "questions.x"),
        ('{"version": 1, "questions": {}, "extra": 1}', "extra"),
        ("[]", "Input should be"),
    ],
)
def test_corrupt_progress_file_is_one_line_and_never_overwritten(tmp_path, capsys, content, reason):
    path = tmp_path / "p.json"
    path.write_text(content)
    for args in (
        ("--answers", "a,b,c", *QUIZ, "--progress", str(path)),
        ("--stats", "--progress", str(path)),
        ("--review", "--progress", str(path)),
    ):
        code, out, err = cli(capsys, "quiz", *args)
        assert code == 2 and out == ""
        assert err.startswith(f"error: {path}: cannot read the quiz progress file (")
        assert reason in err and err.count("\n") == 1
        assert path.read_text() == content


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


def test_unwritable_progress_file_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = cli(
        capsys, "quiz", *QUIZ, "--answers", "a,b,c", "--progress", str(blocker / "p.json")
    )
    assert code == 2 and err.startswith(f"error: {blocker / 'p.json'}: cannot")
    assert err.count("\n") == 1


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


def test_review_asks_computed_questions_in_the_numbers_of_the_quiz_it_reviews(tmp_path):
    """Issue 26: a llama-3-8b quiz is reviewed in llama-3-8b's numbers, though --review runs
    with the default model (gpt2); a context that no longer loads falls back to the flags'."""
    path = tmp_path / "p.json"
    args = ("--model", "llama-3-8b", "--batch", "2", "--source", "model", "--seed", "1")
    asked = reveal(*args, "--count", "3")["questions"]
    wrong = ",".join(next(x for x in "abcd" if x != q["correct"]) for q in asked)
    quiz(*args, "--count", "3", "--answers", wrong, "--progress", str(path))
    data = json.loads(path.read_text())
    record = data["questions"][asked[0]["id"]]
    assert record["context"]["model"] == "llama-3-8b"
    assert record["context"]["setup"]["batch"] == 2
    review = quiz("--review", "--progress", str(path), "--reveal", "--format", "json")
    prompts = {q["id"]: q["prompt"] for q in json.loads(review.stdout)["questions"]}
    assert set(prompts) == {q["id"] for q in asked}
    assert all(prompts[q["id"]] == q["prompt"] for q in asked)  # the same numbers
    assert all("gpt2" not in p for p in prompts.values())
    record["context"]["model"] = str(tmp_path / "gone.json")  # the model file moved away
    path.write_text(json.dumps(data))
    review = quiz("--review", "--progress", str(path), "--reveal", "--format", "json")
    assert review.exit_code == 0, review.output
    first = next(q for q in json.loads(review.stdout)["questions"] if q["id"] == asked[0]["id"])
    assert first["prompt"] != asked[0]["prompt"]  # asked for the current flags instead
