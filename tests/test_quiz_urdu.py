"""Urdu: the wording fixes of issue 14, in the question bank and in the generated questions;
right-to-left layout (U+200F at the start of each paragraph, Latin runs and numbers isolated
with U+2066 ... U+2069) and wrapping without breaking words."""

from __future__ import annotations

from memcalc.profiles import load_profile
from memcalc.quiz.bank import Lang, load_bank
from memcalc.quiz.bidi import LRI, PDI, isolate, rtl_line, segments, strip_marks
from memcalc.quiz.generate import model_questions
from memcalc.quiz.terminal import Screen
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup


def test_bank_urdu_wording_fixes():
    bank = {q.id: q for q in load_bank()}
    every_urdu = " ".join(
        q.ur.prompt + q.ur.explanation + " ".join(q.ur.options) for q in bank.values()
    )
    assert "ہڈن" not in every_urdu and "ہِڈن" in every_urdu
    assert "معنی خیز" not in every_urdu
    assert "گھڑی کے حساب" not in every_urdu
    master = bank["prec-fp32-master-weights"]
    assert "7 محفوظ مینٹیسا بٹس + 1 مضمر بٹ" in master.ur.options[master.correct]
    assert "7 stored mantissa bits + 1 implicit" in master.en.options[master.correct]


def test_generated_urdu_wording_fixes():
    questions = {
        q.id: q
        for q in model_questions(
            preset("llama-2-7b"), TrainingSetup(), load_profile("a100-sxm-80gb")
        )
    }
    acts = questions["model-activations"].ur.explanation
    assert "لاس مزید" in acts and "رکھتے ہیں" in acts  # the sentence has its verb
    flops = questions["model-full-recompute-flops"].ur.explanation
    assert "نصابی" in flops and "کتابی" not in flops


def test_isolation_rules():
    assert segments("(بیچ 1، adamw)") == [
        (False, "(بیچ "),
        (True, "1"),
        (False, "، "),
        (True, "adamw"),
        (False, ")"),
    ]
    assert isolate("Korthikanti et al. (2022) کے مطابق") == (
        f"{LRI}Korthikanti et al. (2022){PDI} کے مطابق"
    )
    assert (
        isolate("یعنی 25 GB/s پر ≈0.56 s، اس") == f"یعنی {LRI}25 GB/s{PDI} پر {LRI}≈0.56 s{PDI}، اس"
    )
    assert isolate("نصابی +33.3% یہ") == f"نصابی {LRI}+33.3%{PDI} یہ"
    assert isolate("دوبارہ: --seed 3") == f"دوبارہ: {LRI}--seed 3{PDI}"
    assert rtl_line("") == "" and strip_marks(rtl_line("ہر 16-bit")) == "ہر 16-bit"


def test_screen_wraps_without_breaking_words_and_marks_urdu_lines():
    lines = Screen(Lang.en, 30).lines("  b) " + "word " * 12)
    assert lines[0].startswith("  b) ") and all(x.startswith("     ") for x in lines[1:])
    assert all(len(x) <= 30 for x in lines)
    assert Screen(Lang.en, None).lines("x " * 100) == ["x " * 100]  # no width: no wrapping
    urdu = Screen(Lang.ur, 40).lines("ہر بلاک 16-bit ٹینسرز رکھتا ہے " * 4)
    assert len(urdu) > 1 and all(x.startswith("\u200f") for x in urdu)
    assert all(len(strip_marks(x)) <= 40 for x in urdu)
