"""Urdu: the wording fixes of issue 14, in the question bank and in the generated questions."""

from __future__ import annotations

from memcalc.profiles import load_profile
from memcalc.quiz.bank import load_bank
from memcalc.quiz.generate import model_questions
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
