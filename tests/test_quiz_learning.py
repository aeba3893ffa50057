"""Learning features: per-option feedback in the question bank (what picking a wrong option
means), validated like every other field; typed numeric answers."""

from __future__ import annotations

import pytest

from memcalc.errors import MemcalcError
from memcalc.quiz.bank import AnswerUnit, Lang, Numeric, load_bank
from memcalc.quiz.typed import accepted, parse_typed


def test_bank_questions_carry_optional_per_option_feedback():
    bank = {q.id: q for q in load_bank()}
    q = bank["params-gb-vs-gib"]
    assert q.en.feedback and q.ur.feedback and q.en.feedback[q.correct] == ""
    assert "multiplies" in q.mistake(1, Lang.en) and "ضرب" in q.mistake(1, Lang.ur)
    without = [x for x in bank.values() if x.en.feedback is None]
    assert without  # older questions without feedback stay valid


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
