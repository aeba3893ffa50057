"""Urdu: the wording fixes of issue 14, right-to-left marks in terminal output (U+200F at the
start of each paragraph, Latin runs and numbers isolated with U+2066 ... U+2069), Urdu answer
letters and digits, errors and notes in Urdu, and wrapping to the terminal width."""

from __future__ import annotations

import re

import pytest

from memcalc.profiles import load_profile
from memcalc.quiz.bank import LETTERS, URDU_LETTERS, Lang, load_bank, load_bank_data
from memcalc.quiz.bidi import LRI, PDI, RLM, isolate, rtl_line, segments, strip_marks
from memcalc.quiz.generate import model_questions
from memcalc.quiz.messages import MESSAGES
from memcalc.quiz.session import parse_answer
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
    label = r"\((?:الف|ب|ج|د)\)"
    assert re.fullmatch(rf"غلط۔ آپ کا جواب: {label} .+۔ درست جواب: {label} .+", line), line
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
    """(الف) (ب) (ج) (د), as Pakistani exam papers label their options; الف (or alif alone,
    or the label with its brackets) answers the first."""
    result = quiz(*QUIZ, "--lang", "ur", "--reveal", "--count", "1")
    lines = [strip_marks(x).strip() for x in result.stdout.split("\n")]
    labels = [x.split(" ")[0] for x in lines if x.startswith("(")][:4]
    assert labels == ["(الف)", "(ب)", "(ج)", "(د)"]
    for first in ("الف", "(الف)", "ا"):
        assert parse_answer(first) == 0
    assert parse_answer("(ب)") == 1 and parse_answer("د") == 3
    questions = reveal(*QUIZ, lang="ur")["questions"]
    typed = [URDU_LETTERS[LETTERS.index(q["correct"])] for q in questions]
    answered = quiz(*QUIZ, "--lang", "ur", input="".join(f"{t}\n" for t in typed))
    assert strip_marks(answered.stdout).count("درست! ") == 4
    assert "الف، ب، ج، د" in strip_marks(answered.stdout)  # the prompt names the letters


def test_one_question_is_singular():
    one = quiz("--lang", "ur", "--reveal", "--count", "1", "--seed", "1")
    assert "1 سوال جوابات" in strip_marks(one.stdout) and "1 سوالات" not in strip_marks(one.stdout)
    english = quiz("--reveal", "--count", "1", "--seed", "1")
    assert "1 question with answers" in english.stdout
    note = quiz("--source", "model", "--topic", "offload", "--difficulty", "medium", "--reveal")
    assert "1 questions" not in note.stderr


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


# --- issue 26: every export and screen keeps its right-to-left layout ------------------------


def _commonmark(text: str) -> list:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").parse(text)


@pytest.mark.parametrize("lang", ["ur", "en"])
def test_markdown_sheet_parses_as_headings_and_lists_under_commonmark(lang):
    """A real CommonMark parser finds one heading per question (and the title) and one list
    item per option and per wrong option's note; in Urdu each of them still opens with the
    right-to-left mark, placed after the ``## `` / ``- `` CommonMark must see first."""
    args = (*QUIZ, "--count", "5", "--reveal", "--format", "markdown", "--lang", lang)
    result = quiz(*args)
    assert result.exit_code == 0, result.output
    data = reveal(*QUIZ, "--count", "5", lang=lang)
    tokens = _commonmark(result.stdout)
    headings = [t for t in tokens if t.type == "heading_open"]
    assert len(headings) == 1 + len(data["questions"])
    notes = sum(len(q["mistakes"]) for q in data["questions"])
    items = [t for t in tokens if t.type == "list_item_open"]
    assert len(items) == 4 * len(data["questions"]) + notes
    inline = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    inline += [tokens[i + 2].content for i, t in enumerate(tokens) if t.type == "list_item_open"]
    if lang == "ur":
        assert all(text.startswith(RLM) for text in inline), [x[:20] for x in inline]
        for line in result.stdout.split("\n"):
            assert not re.match(f"^{RLM}(#|- |\\*\\*)", line), line[:30]
        bold = [t for t in tokens if t.type == "inline" and "strong_open" in str(t.children)]
        assert len(bold) == len(data["questions"])  # the answer line is still bold
    else:
        assert not set(result.stdout) & {RLM, LRI, PDI}


def test_stats_in_urdu_mark_every_row_and_cell(tmp_path, capsys):
    """``--stats --lang ur``: every line a right-to-left paragraph; each cell isolated on its
    own, so the LoRA and MoE rows (Latin first cells) keep the columns in the order of the
    others; the path's leading / sits inside its isolate."""
    from datetime import datetime, timezone

    from memcalc.quiz.progress import Progress, record_answer, save_progress

    qs = model_questions(preset("mixtral-8x7b"), TrainingSetup(), load_profile("h100-sxm-80gb"))
    progress, now = Progress(), datetime.now(timezone.utc)
    for q in qs:
        if q.topic.value in ("lora", "moe", "recompute"):
            progress = record_answer(progress, q, True, "a", now)
    path = tmp_path / "quiz.json"
    save_progress(path, progress)
    code, out, _ = cli(capsys, "quiz", "--stats", "--lang", "ur", "--progress", str(path))
    assert code == 0
    lines = [x for x in out.split("\n") if x.strip()]
    table = [x for x in lines if not re.fullmatch(r"[- ]+", x)]
    assert all(x.startswith(RLM) for x in table), [x[:10] for x in table if x[:1] != RLM]
    for line in table:
        outside = _outside_isolates(line)
        assert not re.search("[A-Za-z0-9]", outside), repr(outside[:60])
        for run in re.findall(f"{LRI}(.*?){PDI}", line):
            assert "  " not in run, run  # never one isolate across two cells
    lora = next(x for x in table if "LoRA" in x)
    assert lora.startswith(f"{RLM}{LRI}LoRA{PDI} ")
    assert f"{LRI}{path}{PDI}" in out  # "/tmp/..." keeps its leading slash
    header = next(x for x in table if "موضوع" in x)
    assert "سیکھ لیے" in header and "پختہ" not in header
    english = cli(capsys, "quiz", "--stats", "--progress", str(path))[1]
    assert not set(english) & {RLM, LRI, PDI}


def test_paths_and_abbreviations_keep_their_punctuation_inside_the_isolate():
    assert isolate("فائل /tmp/x/quiz.json میں") == f"فائل {LRI}/tmp/x/quiz.json{PDI} میں"
    assert isolate("فائل ~/quiz.json میں") == f"فائل {LRI}~/quiz.json{PDI} میں"
    assert isolate("$XDG_STATE_HOME/memcalc میں") == f"{LRI}$XDG_STATE_HOME/memcalc{PDI} میں"
    assert isolate("Chen et al. کا sqrt(N)") == f"{LRI}Chen et al.{PDI} کا {LRI}sqrt(N){PDI}"
    assert isolate("(Dettmers et al.، bitsandbytes)") == (
        f"({LRI}Dettmers et al.{PDI}، {LRI}bitsandbytes{PDI})"
    )
    assert isolate("یہ GPU ہے۔") == f"یہ {LRI}GPU{PDI} ہے۔"  # a sentence's full stop stays out
    assert isolate("ری کمپیوٹ / آف لوڈ") == "ری کمپیوٹ / آف لوڈ"


UNIT_AT_START = re.compile(r"^(?:GiB|MiB|KiB|GB|MB|bytes|بائٹس|ms|s|TFLOP|GFLOP)\b")


@pytest.mark.parametrize("lang", ["en", "ur"])
def test_wrapping_at_50_columns_never_splits_a_number_from_its_unit(lang):
    args = ("--model", "llama-2-7b", "--seed", "3", "--count", "40", "--source", "model")
    plain = quiz(*args, "--reveal", "--lang", lang)
    wrapped = quiz(*args, "--reveal", "--lang", lang, env={"COLUMNS": "50"})
    assert strip_marks(wrapped.stdout).split() == strip_marks(plain.stdout).split()
    lines = [strip_marks(x).strip() for x in wrapped.stdout.split("\n")]
    splits = [
        (a[-12:], b[:8])
        for a, b in zip(lines, lines[1:], strict=False)
        if re.search(r"\d$", a) and UNIT_AT_START.match(b)
    ]
    assert not splits
    # the example, at the width it broke at
    line = "  b) 720.53 MiB of activations, kept for the backward of every block"
    assert [x.endswith("720.53") for x in Screen(Lang.en, 15).lines(line)].count(True) == 0
