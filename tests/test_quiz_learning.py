"""Learning features: per-option feedback in the question bank (what picking a wrong option
means), validated like every other field."""

from __future__ import annotations

import pytest

from memcalc.errors import MemcalcError
from memcalc.quiz.bank import Lang, load_bank


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
