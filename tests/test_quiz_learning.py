"""Learning features: the mistake behind a chosen option (generated and bank questions), a
sibling question after a miss, typed numeric answers, study-sheet exports (Markdown, HTML,
Anki), and Ctrl-C / end of input at any moment."""

from __future__ import annotations

import csv
import html
import io
import json
import os
import select
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser

import pytest

from memcalc.errors import MemcalcError
from memcalc.profiles import load_profile
from memcalc.quiz import command as quiz_module
from memcalc.quiz.bank import LETTERS, NUM_OPTIONS, AnswerUnit, Lang, Numeric, load_bank
from memcalc.quiz.bidi import strip_marks
from memcalc.quiz.export import ANKI_HEADERS
from memcalc.quiz.generate import model_questions
from memcalc.quiz.typed import accepted, parse_typed
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup
from quiz_helpers import ROOT, isolated_state, quiz, reveal

pytestmark = pytest.mark.usefixtures(isolated_state.__name__)

MODEL = ("--model", "llama-2-7b", "--gpu", "a100-sxm-80gb", "--source", "model")


def _wrong_with_mistake(q: dict) -> str:
    return next(letter for letter in q["mistakes"])


# --- feedback on the option chosen ------------------------------------------------------------


def test_a_wrong_pick_shows_the_mistake_it_stands_for():
    questions = reveal(*MODEL, "--seed", "2", "--count", "3")["questions"]
    picks = [_wrong_with_mistake(q) for q in questions]
    result = quiz(*MODEL, "--seed", "2", "--count", "3", input="".join(f"{p}\n" for p in picks))
    for q, pick in zip(questions, picks, strict=True):
        assert f"Your choice: {q['mistakes'][pick]}" in result.stdout
    ur = reveal(*MODEL, "--seed", "2", "--count", "3", lang="ur")["questions"]
    result = quiz(*MODEL, "--seed", "2", "--count", "3", "--lang", "ur", input=f"{picks[0]}\n")
    assert f"آپ کا انتخاب: {ur[0]['mistakes'][picks[0]]}" in strip_marks(result.stdout)


def test_bank_questions_carry_optional_per_option_feedback():
    bank = {q.id: q for q in load_bank()}
    q = bank["params-gb-vs-gib"]
    assert q.en.feedback and q.ur.feedback and q.en.feedback[q.correct] == ""
    assert "multiplies" in q.mistake(1, Lang.en) and "ضرب" in q.mistake(1, Lang.ur)


def test_every_bank_question_explains_each_wrong_option_in_both_languages():
    """Issue 26: 53 of 58 bank questions printed no "Your choice" line after a wrong pick."""
    for q in load_bank():
        for lang in Lang:
            feedback = q.text(lang).feedback
            assert feedback is not None, (q.id, lang)
            for i, sentence in enumerate(feedback):
                assert bool(sentence.strip()) == (i != q.correct), (q.id, lang, i)


def test_every_bank_concept_has_a_second_question():
    """Issue 26: a missed bank question came back as itself, reshuffled; every concept of the
    bank now has another question, which the sibling picks."""
    from random import Random

    from memcalc.quiz.select import shuffled
    from memcalc.quiz.siblings import FollowUps

    bank = load_bank()
    by_concept: dict[str, list[str]] = {}
    for q in bank:
        by_concept.setdefault(q.concept, []).append(q.id)
    assert all(len(ids) >= 2 for ids in by_concept.values()), {
        c: ids for c, ids in by_concept.items() if len(ids) < 2
    }
    follow = FollowUps(bank, lambda _q: None, Random(0))
    for q in bank:
        sibling = follow(shuffled(q, "bank", Random(0)), {q.id})
        assert sibling is not None and sibling.question.id != q.id
        assert sibling.question.concept == q.concept


FEEDBACK = """
[[questions]]
id = "t-one"
concept = "c-one"
topic = "recompute"
difficulty = "easy"
correct = 1
[questions.en]
prompt = "p"
options = ["a", "b", "c", "d"]
explanation = "e"
feedback = ["A is wrong because.", "", "C is wrong.", ""]
[questions.ur]
prompt = "پ"
options = ["ا", "ب", "ج", "د"]
explanation = "و"
feedback = ["ا غلط ہے۔", "", "ج غلط ہے۔", ""]
"""


@pytest.mark.parametrize(
    "bad, message",
    [
        (FEEDBACK.replace('"", "C is wrong.", ""]', '"C is wrong."]'), "en.feedback"),
        (FEEDBACK.replace('feedback = ["ا غلط ہے۔", "", "ج غلط ہے۔", ""]\n', ""), "en only"),
        (FEEDBACK.replace('"A is wrong because.", ""', '"A is wrong because.", "B?"'), "entry 1"),
    ],
)
def test_bad_feedback_is_one_line(tmp_path, bad, message):
    (tmp_path / "x.toml").write_text(FEEDBACK, encoding="utf-8")
    assert load_bank(tmp_path)[0].mistake(0, Lang.en) == "A is wrong because."
    (tmp_path / "x.toml").write_text(bad, encoding="utf-8")
    with pytest.raises(MemcalcError) as e:
        load_bank(tmp_path)
    assert "\n" not in str(e.value) and message in str(e.value)
    assert str(e.value).startswith(f"{tmp_path / 'x.toml'}: questions[0] (id 't-one')")


# --- a sibling question after a miss ----------------------------------------------------------


def test_a_miss_schedules_a_sibling_on_the_same_concept_later():
    args = (*MODEL, "--seed", "5", "--count", "4")
    questions = reveal(*args)["questions"]
    c = [q["correct"] for q in questions]
    wrong = next(x for x in LETTERS if x != c[0])
    typed = [wrong, c[1], c[2], c[3], "a"]
    result = quiz(*args, input="".join(f"{t}\n" for t in typed))
    out = result.stdout
    assert "Question 2/5" in out  # the miss added one question...
    follow = out.index("Question 4/5 · ")  # ...after two others
    assert "again, on a concept you missed" in out[follow : follow + 200]
    # It is the same concept: the same kind for another setup (or a bank sibling).
    first_prompt = questions[0]["prompt"]
    sibling_block = out[follow:].split("\n")[1]
    assert sibling_block != first_prompt


def test_no_sibling_after_a_right_answer_or_in_scripted_mode():
    args = (*MODEL, "--seed", "5", "--count", "3")
    questions = reveal(*args)["questions"]
    right = "".join(f"{q['correct']}\n" for q in questions)
    assert "again, on a concept" not in quiz(*args, input=right).stdout
    wrong = ",".join(next(x for x in LETTERS if x != q["correct"]) for q in questions)
    scripted = quiz(*args, "--answers", wrong)
    assert scripted.exit_code == 0 and "again, on a concept" not in scripted.stdout


def test_sibling_prefers_another_question_of_the_same_concept():
    from random import Random

    from memcalc.quiz.select import shuffled
    from memcalc.quiz.siblings import FollowUps

    bank = load_bank()
    q = next(x for x in bank if x.concept == "optimizer-state-count")
    twin = q.model_copy(update={"id": "twin-question"})
    follow = FollowUps([q, twin], lambda _q: None, Random(0))
    sibling = follow(shuffled(q, "bank", Random(0)), {q.id})
    assert sibling is not None and sibling.question.id == "twin-question" and sibling.follow_up
    alone = FollowUps([q], lambda _q: None, Random(0))(shuffled(q, "bank", Random(0)), {q.id})
    assert alone.question.id == q.id  # nothing else on the concept: asked again, reshuffled


# --- typed numeric answers ---------------------------------------------------------------------


def test_typed_number_parsing_and_tolerance():
    gib = Numeric(value=75.31, unit=AnswerUnit.GiB, tolerance=0.02)
    assert parse_typed("75.3", gib) == 75.3
    assert parse_typed("80.86 GB", gib) == pytest.approx(75.306, abs=1e-3)  # same bytes
    assert parse_typed("77,115 MiB", gib) == pytest.approx(75.31, abs=1e-2)
    assert parse_typed("۷۵٫۳ GiB", gib) == 75.3
    assert [parse_typed(x, gib) for x in ("", "GiB", "75 %", "7,5", "75 apples")] == [None] * 5
    assert accepted(74.0, gib) and not accepted(73.7, gib)
    count = Numeric(value=6, unit=AnswerUnit.counted, tolerance=0)
    assert parse_typed("6", count) == 6 and parse_typed("6.5", count) is None
    assert accepted(6, count) and not accepted(7, count)
    pct = Numeric(value=32.7, unit=AnswerUnit.percent, tolerance=0.03)
    assert parse_typed("+32%", pct) == 32 and accepted(32, pct)


def test_typed_mode_accepts_a_number_within_tolerance_and_shows_the_working():
    args = (*MODEL, "--seed", "4", "--count", "2", "--topic", "parameters,optimizer", "--typed")
    data = reveal(*args[:-1])["questions"]
    assert [q["id"] for q in data] == ["model-optimizer-states", "model-weights"]
    # 80.9 GB is the optimizer's 75.31 GiB in decimal units: right. 13.48 GiB for the weights
    # (12.55 GiB) is the GB-for-GiB slip: wrong, and named.
    result = quiz(*args, input="80.9 GB\nabc\n13.48 GiB\n")
    out = result.stdout
    assert "Your answer (a number with its unit, e.g. 12.5 GiB; within 2%; q to quit): " in out
    assert "Right! You typed 80.9 GB; the answer is 75.31 GiB (within 2%)." in out
    assert "Please type a number with its unit" in out
    assert "Wrong: you typed 13.48 GiB. The answer is 12.55 GiB" in out
    assert "That matches a common mistake, 13.48 GiB: That is the size in decimal GB" in out
    assert "6,738,415,616 × 2 bytes = 13,476,831,232 bytes = 12.55 GiB" in out  # the working
    assert "  a) " not in out  # no options to pick from


def test_typed_mode_diagnoses_every_known_mistake_not_only_the_options_shown():
    """Issue 26: a typed number that is a known mistake is named, whether or not its option
    was among the four: weights + gradients + optimizer states for the weights question."""
    spec, setup, gpu = preset("llama-2-7b"), TrainingSetup(), load_profile("a100-sxm-80gb")
    q = next(x for x in model_questions(spec, setup, gpu) if x.id == "model-weights")
    assert q.numeric is not None and len(q.numeric.mistakes) > 3  # more than the 3 shown
    shown = {o.split()[0] for o in q.en.options}
    hidden = next(m for m in q.numeric.mistakes if f"{m.value:,.2f}" not in shown)
    assert all(m.en.strip() and m.ur.strip() for m in q.numeric.mistakes)
    args = (*MODEL, "--seed", "4", "--count", "1", "--topic", "parameters", "--typed")
    typed = f"{hidden.value} {q.numeric.unit.value}"
    out = quiz(*args, input=f"{typed}\n").stdout
    assert f"Wrong: you typed {typed}." in out
    assert f"That matches a common mistake, {hidden.value:g} GiB: {hidden.en}" in out
    # a number that is no known mistake is not diagnosed
    assert "common mistake" not in quiz(*args, input="1.5 GiB\n").stdout


def test_bank_numeric_questions_list_their_mistakes():
    for q in load_bank():
        if q.numeric is not None:
            assert q.numeric.mistakes, q.id
            for m in q.numeric.mistakes:
                assert not accepted(m.value, q.numeric), (q.id, m.value)


def test_typed_mode_keeps_letters_for_word_questions():
    result = quiz(
        *MODEL, "--seed", "1", "--count", "1", "--topic", "offload", "--typed", input="a\n"
    )
    assert "Your answer (a-d, q to quit): a" in result.stdout  # cheapest-fit is answered in words


# --- study sheets ------------------------------------------------------------------------------


class _Checker(HTMLParser):
    """Parses a page and checks that every tag is closed in order."""

    VOID = {"meta", "br"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-3:])
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Checker:
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert not checker.stack, checker.stack
    return checker


ARGS = ("--seed", "1", "--count", "5")


def test_html_study_sheet():
    data = reveal(*ARGS)
    page = quiz(*ARGS, "--reveal", "--format", "html").stdout
    assert page.startswith("<!DOCTYPE html>")
    checker = _parse(page)
    html_tag = next(attrs for tag, attrs in checker.tags if tag == "html")
    assert html_tag == {"lang": "en", "dir": "ltr"}
    sections = [attrs for tag, attrs in checker.tags if tag == "section"]
    assert len(sections) == 5
    text = "".join(checker.text)
    for q in data["questions"]:
        assert q["prompt"] in text and q["explanation"] in text


def test_html_study_sheet_in_urdu_is_right_to_left():
    data = reveal(*ARGS, lang="ur")
    page = quiz(*ARGS, "--reveal", "--format", "html", "--lang", "ur").stdout
    checker = _parse(page)
    assert next(a for t, a in checker.tags if t == "html") == {"lang": "ur", "dir": "rtl"}
    bdi = [a for t, a in checker.tags if t == "bdi"]
    assert bdi and all(a == {"dir": "ltr"} for a in bdi)
    text = "".join(checker.text)
    for q in data["questions"]:
        assert q["prompt"] in text  # isolating runs keeps the words and their order
    assert "\u2066" not in page and "\u200f" not in page  # HTML isolates with tags instead


def test_anki_deck_imports_as_csv():
    data = reveal(*ARGS)
    deck = quiz(*ARGS, "--reveal", "--format", "anki").stdout
    lines = deck.split("\n")
    assert lines[: len(ANKI_HEADERS)] == list(ANKI_HEADERS)
    rows = list(csv.reader(io.StringIO("\n".join(lines[len(ANKI_HEADERS) :]))))
    rows = [r for r in rows if r]
    assert len(rows) == 5 and all(len(r) == 4 for r in rows)
    for row, q in zip(rows, data["questions"], strict=True):
        guid, front, back, tags = row  # Anki fields are HTML
        assert guid.startswith(f"memcalc:{q['id']}")
        assert q["prompt"] in html.unescape(front)
        assert all(o in html.unescape(front) for o in q["options"])
        assert q["explanation"] in html.unescape(back)
        assert tags.split() == [
            "memcalc",
            f"memcalc::{q['topic']}",
            f"memcalc::{q['difficulty']}",
            q["concept"],
        ]
        _parse(front)
        _parse(back)
    ur = quiz(*ARGS, "--reveal", "--format", "anki", "--lang", "ur").stdout
    urdu_rows = [r for r in csv.reader(io.StringIO(ur.split("\n", 4)[4])) if r]
    assert all(r[1].startswith('<div dir="rtl" lang="ur">') for r in urdu_rows)


def _deck(*args: str) -> dict[str, list[str]]:
    deck = quiz(*args, "--reveal", "--format", "anki").stdout.split("\n", len(ANKI_HEADERS))
    return {r[0]: r for r in csv.reader(io.StringIO(deck[-1])) if r}


def test_anki_cards_keep_their_id_and_front_across_seeds():
    """Issue 26: re-exporting with another seed updated nothing and duplicated every note;
    each card now has a stable GUID (Anki's #guid column) and the same front text."""
    args = ("--model", "llama-2-7b", "--count", "60", "--source", "mixed")
    one, two = _deck(*args, "--seed", "1"), _deck(*args, "--seed", "2")
    common = set(one) & set(two)
    assert len(common) > 10
    assert all(one[g][1:] == two[g][1:] for g in common)  # same front, back and tags
    assert len(set(one)) == len(one)  # ids unique within a deck
    other = _deck("--model", "gpt2", "--count", "60", "--source", "model", "--seed", "1")
    model_ids = {g for g in one if g.startswith("memcalc:model-")}
    assert model_ids and not model_ids & set(other)  # another model's numbers: new cards


def test_markdown_study_sheet():
    data = reveal(*ARGS)
    sheet = quiz(*ARGS, "--reveal", "--format", "markdown").stdout
    assert sheet.startswith("# memcalc quiz study sheet\n")
    assert sheet.count("\n## Question ") == 5 and sheet.count("\n**Answer: ") == 5
    for q in data["questions"]:
        assert f"- {q['correct']}) " in sheet
    ur = quiz(*ARGS, "--reveal", "--format", "markdown", "--lang", "ur").stdout
    assert ur.startswith('<div dir="rtl" lang="ur">') and ur.rstrip().endswith("</div>")
    assert "\n# \u200f" in ur and "\u200f# " not in ur  # the mark after the heading's #


# --- Ctrl-C and end of input ----------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("COLUMNS", None)
    return env


def test_sigint_at_the_prompt_exits_130_with_one_line(tmp_path):
    env = _env() | {"XDG_STATE_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "memcalc", "quiz", "--seed", "1", "--count", "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    seen, deadline = b"", time.monotonic() + 60
    while b"Your answer" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1)
        if ready:
            seen += os.read(proc.stdout.fileno(), 4096)
    assert b"Your answer" in seen
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.decode() == "Quiz interrupted after 0 of 2 questions; score 0/0.\n"


def test_sigint_during_start_up_exits_130_with_one_line(tmp_path):
    """The signal arrives while the questions are being computed."""
    code = (
        "import os, signal, sys\n"
        "import memcalc.quiz.command as c\n"
        "real = c.model_questions\n"
        "def slow(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(*a, **k)\n"
        "c.model_questions = slow\n"
        "from memcalc.cli import main\n"
        "sys.exit(main(['quiz', '--count', '2']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=b"",
        capture_output=True,
        env=_env() | {"XDG_STATE_HOME": str(tmp_path)},
        timeout=60,
    )
    assert done.returncode == 130
    assert done.stderr.decode() == "Quiz interrupted before the first question.\n"
    assert done.stdout == b""


def test_keyboard_interrupt_while_loading_is_one_line(monkeypatch):
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(quiz_module, "load_bank_data", interrupted)
    result = quiz("--lang", "ur")
    assert result.exit_code == 130
    assert result.stderr == "کوئز پہلے سوال سے پہلے ہی روک دیا گیا۔\n"


def test_end_of_input_in_typed_mode_and_after_a_follow_up():
    args = (*MODEL, "--seed", "4", "--count", "2", "--topic", "parameters,optimizer", "--typed")
    result = quiz(*args, input="1 GiB\n")
    assert result.exit_code == 0
    assert "Quiz ended after 1 of 3 questions." in result.stdout
    assert "Score: 0/1 (0%)" in result.stdout


def test_json_marks_the_mistake_of_each_scripted_answer():
    questions = reveal(*MODEL, "--seed", "2", "--count", "2")["questions"]
    picks = [_wrong_with_mistake(q) for q in questions]
    result = quiz(
        *MODEL, "--seed", "2", "--count", "2", "--answers", ",".join(picks), "--format", "json"
    )
    data = json.loads(result.stdout)
    for q, pick in zip(data["questions"], picks, strict=True):
        assert q["answer"] == pick and q["mistake"] == q["mistakes"][pick]
        assert len(q["mistakes"]) == NUM_OPTIONS - 1
