"""Urdu: the wording fixes of issue 14, right-to-left marks in terminal output (U+200F at the
start of each paragraph, Latin runs and numbers isolated with U+2066 ... U+2069), Urdu answer
letters and digits, errors and notes in Urdu, and wrapping to the terminal width."""

from __future__ import annotations

import re

import pytest

from memcalc.profiles import load_profile
from memcalc.quiz.bank import LETTERS, Lang, load_bank, load_bank_data
from memcalc.quiz.bidi import LRI, PDI, RLM, isolate, rtl_line, segments, strip_marks
from memcalc.quiz.generate import model_questions
from memcalc.quiz.messages import MESSAGES
from memcalc.quiz.terminal import Screen
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup
from quiz_helpers import cli, isolated_state, quiz, reveal

pytestmark = pytest.mark.usefixtures(isolated_state.__name__)

QUIZ = ("--model", "llama-2-7b", "--gpu", "a100-sxm-80gb", "--seed", "7", "--count", "4")
ARABIC = re.compile("[\u0600-\u06ff]")


def _outside_isolates(line: str) -> str:
    """What a line shows outside its LRI ... PDI runs."""
    return re.sub(f"{LRI}.*?{PDI}", "", line)


def _check_rtl(output: str) -> int:
    """Every non-empty Urdu line starts with RLM and has no Latin letter or digit outside an
    isolate; returns the number of lines checked."""
    checked = 0
    for line in output.split("\n"):
        if not line.strip():
            continue
        assert line.startswith(RLM), repr(line[:60])
        outside = _outside_isolates(line)
        assert not re.search("[A-Za-z0-9]", outside), repr(outside[:80])
        assert line.count(LRI) == line.count(PDI)
        checked += 1
    return checked


def test_urdu_terminal_output_is_marked_right_to_left():
    questions = reveal(*QUIZ, lang="ur")["questions"]
    typed = "".join(f"{'ابجد'[LETTERS.index(q['correct'])]}\n" for q in questions)
    result = quiz(*QUIZ, "--lang", "ur", input=typed)
    assert result.exit_code == 0, result.output
    assert _check_rtl(result.stdout) > 20
    # Paragraphs that start with Latin text still read right to left, and "16-bit" keeps its
    # order inside an isolate (a renderer would otherwise show "bit-16").
    sheet = quiz(*QUIZ, "--lang", "ur", "--reveal", "--count", "30", "--source", "bank")
    assert _check_rtl(sheet.stdout) > 100
    assert f"{RLM}{LRI}Korthikanti" in sheet.stdout or f"{RLM}{LRI}ZeRO" in sheet.stdout
    assert f"{LRI}16-bit" in sheet.stdout


def test_english_output_has_no_marks():
    result = quiz(*QUIZ, "--reveal")
    assert not set(result.stdout) & {RLM, LRI, PDI}


def test_json_keeps_the_text_unmarked():
    data = reveal(*QUIZ, lang="ur")
    assert not set(str(data)) & {RLM, LRI, PDI}


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


def test_feedback_line_follows_urdu_word_order():
    questions = reveal(*QUIZ, lang="ur")["questions"]
    wrong = next(x for x in LETTERS if x != questions[0]["correct"])
    result = quiz(*QUIZ, "--lang", "ur", input=f"{wrong}\n")
    line = next(
        strip_marks(x) for x in result.stdout.split("\n") if strip_marks(x).startswith("غلط")
    )
    assert re.fullmatch(r"غلط۔ آپ کا جواب: [ابجد]\) .+۔ درست جواب: [ابجد]\) .+", line), line
    assert MESSAGES[Lang.ur]["wrong"] == "غلط۔ آپ کا جواب: {choice}۔ درست جواب: {answer}"


def test_urdu_letters_and_digits_answer_the_quiz():
    questions = reveal(*QUIZ, lang="ur")["questions"]
    correct = [LETTERS.index(q["correct"]) for q in questions]
    typed = ["ابجد"[correct[0]], "۱۲۳۴"[correct[1]], "١٢٣٤"[correct[2]], "abcd"[correct[3]]]
    result = quiz(*QUIZ, "--lang", "ur", input="".join(f"{t}\n" for t in typed))
    assert result.exit_code == 0
    assert strip_marks(result.stdout).count("درست! ") == 4
    scripted = quiz(*QUIZ, "--lang", "ur", "--answers", "،".join(typed), "--format", "json")
    assert scripted.exit_code == 0, scripted.output
    assert '"correct": 4' in scripted.stdout


def test_options_are_lettered_in_urdu():
    result = quiz(*QUIZ, "--lang", "ur", "--reveal", "--count", "1")
    lines = [strip_marks(x).strip() for x in result.stdout.split("\n")]
    assert [x[:2] for x in lines if x[:2] in ("ا)", "ب)", "ج)", "د)")][:4] == [
        "ا)",
        "ب)",
        "ج)",
        "د)",
    ]


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


def test_review_line_names_concepts_in_urdu():
    questions = reveal(*QUIZ, lang="ur")["questions"]
    wrong = next(x for x in LETTERS if x != questions[0]["correct"])
    result = quiz(*QUIZ, "--lang", "ur", input=f"{wrong}\n")
    line = next(
        strip_marks(x)
        for x in result.stdout.split("\n")
        if strip_marks(x).startswith("دہرانے کے لیے تصورات")
    )
    name = load_bank_data().concepts[questions[0]["concept"]].ur
    assert name in line and questions[0]["concept"] not in line


def test_errors_and_notes_in_urdu(capsys):
    code, _, err = cli(capsys, "quiz", "--lang", "ur", "--topic", "memory")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: --topic: نامعلوم قدر 'memory'؛ ان میں سے ایک چنیں:")
    code, _, err = cli(capsys, "quiz", "--lang", "ur", "--count", "0")
    assert code == 2 and "--count: مثبت عدد صحیح ہونا چاہیے" in err
    code, _, err = cli(capsys, "quiz", "--lang", "ur", "--answers", "a", "--reveal")
    assert code == 2 and "--reveal: اسے --answers کے ساتھ نہیں ملایا جا سکتا" in err
    result = quiz("--lang", "ur", "--source", "model", "--count", "50", "--reveal")
    assert strip_marks(result.stderr).startswith("نوٹ: صرف ")
    assert result.stderr.startswith(RLM)


def test_long_lines_wrap_to_the_terminal_width_without_breaking_words():
    plain = quiz(*QUIZ, "--reveal")
    wrapped = quiz(*QUIZ, "--reveal", env={"COLUMNS": "60"})
    assert max(len(x) for x in plain.stdout.split("\n")) > 60
    words = set(plain.stdout.split())
    for line in wrapped.stdout.split("\n"):
        assert len(line) <= 60 or " " not in line.strip(), line
    assert wrapped.stdout.split() == plain.stdout.split()  # same words, none broken
    assert set(wrapped.stdout.split()) == words
    # An option's continuation lines are indented under its text.
    lines = Screen(Lang.en, 30).lines("  b) " + "word " * 12)
    assert lines[0].startswith("  b) ") and all(x.startswith("     ") for x in lines[1:])
    urdu = quiz(*QUIZ, "--reveal", "--lang", "ur", env={"COLUMNS": "60"})
    assert _check_rtl(urdu.stdout) > 0
    assert all(len(strip_marks(x)) <= 60 or " " not in x.strip() for x in urdu.stdout.split("\n"))
