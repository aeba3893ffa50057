"""Urdu: the wording fixes of issue 14 in the question bank."""

from __future__ import annotations

from memcalc.quiz.bank import load_bank


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
