"""The quiz's own errors, worded in both languages, and the Urdu wording of the common errors
other modules raise (``--x: unknown value 'y'; choose one of: ...``).

Every error stays one line naming the flag or file; with ``--lang ur`` the command prints the
Urdu wording after ``error:``. Errors raised before ``--lang`` is read (and typer's own usage
errors) stay in English.
"""

from __future__ import annotations

import re
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.quiz.bank import Lang

ERRORS: dict[Lang, dict[str, str]] = {
    Lang.en: {
        "answers.bad": "--answers: answer {index} is {part!r}; use one of: a, b, c, d (or 1-4), "
        "comma-separated, e.g. b,d,a,c",
        "answers.count": "--answers: got {got} answers for {want} questions; give one answer "
        "per question",
        "reveal.answers": "--reveal: cannot be combined with --answers (a study sheet has no "
        "answers to score)",
        "format.json": "--format: json needs --answers or --reveal; an interactive quiz "
        "prints text",
        "format.sheet": "--format: {fmt} is a study-sheet format; use it with --reveal",
        "positive": "{flag}: must be a positive integer; got {value}",
        "mfu": "--mfu: must be from 0.001 to 1, got {value}",
        "no_match": "{wanted}: no question matches (source {source}); try another topic or "
        "difficulty",
        "typed.mode": "--typed: only for a quiz answered at the keyboard; it cannot be "
        "combined with {flag}",
        "stats.mode": "--stats: prints progress only; it cannot be combined with {flag}",
        "review.source": "--source: does not apply with --review (a review asks what is due, "
        "from the bank and from your model)",
        "progress.read": "{path}: cannot read the quiz progress file ({reason}); fix it or "
        "move it away, it is not overwritten",
        "progress.write": "{path}: cannot write the quiz progress file ({reason})",
        "one_of": "{flag}: unknown value {value}; choose one of: {allowed}",
    },
    Lang.ur: {
        "answers.bad": "--answers: جواب نمبر {index} {part!r} ہے؛ ان میں سے کوئی ایک لکھیں: "
        "a، b، c، d (یا 1-4، یا الف، ب، ج، د)، کوما سے الگ، مثلاً b,d,a,c",
        "answers.count": "--answers: {want} سوالات کے لیے {got} جوابات ملے؛ ہر سوال کا ایک "
        "جواب دیں",
        "reveal.answers": "--reveal: اسے --answers کے ساتھ نہیں ملایا جا سکتا (اسٹڈی شیٹ میں "
        "جانچنے کو جوابات نہیں ہوتے)",
        "format.json": "--format: json کے لیے --answers یا --reveal چاہیے؛ انٹرایکٹو کوئز "
        "ٹیکسٹ دکھاتا ہے",
        "format.sheet": "--format: {fmt} اسٹڈی شیٹ کا فارمیٹ ہے؛ اسے --reveal کے ساتھ دیں",
        "positive": "{flag}: مثبت عدد صحیح ہونا چاہیے؛ ملا {value}",
        "mfu": "--mfu: [0.001, 1] کے اندر ہونا چاہیے؛ ملا {value}",
        "no_match": "{wanted}: کوئی سوال نہیں ملتا (ماخذ {source})؛ کوئی اور موضوع یا مشکل آزمائیں",
        "typed.mode": "--typed: صرف کی بورڈ پر دیے جانے والے کوئز کے لیے ہے؛ اسے {flag} کے "
        "ساتھ نہیں ملایا جا سکتا",
        "stats.mode": "--stats: صرف پیش رفت دکھاتا ہے؛ اسے {flag} کے ساتھ نہیں ملایا جا سکتا",
        "review.source": "--source: --review کے ساتھ لاگو نہیں ہوتا (دہرائی میں وہ سوال آتے "
        "ہیں جن کی باری ہے، ذخیرے سے بھی اور آپ کے ماڈل سے بھی)",
        "progress.read": "{path}: کوئز کی پیش رفت والی فائل پڑھی نہیں جا سکی ({reason})؛ اسے "
        "ٹھیک کریں یا ہٹا دیں، اس پر دوبارہ نہیں لکھا جاتا",
        "progress.write": "{path}: کوئز کی پیش رفت والی فائل لکھی نہیں جا سکی ({reason})",
        "one_of": "{flag}: نامعلوم قدر {value}؛ ان میں سے ایک چنیں: {allowed}",
    },
}
"""Error wording by key and language; ``str.format`` fills in the flag, file and values."""

_ONE_OF = re.compile(
    r"^(?P<flag>--[\w-]+): unknown value (?P<value>.+?); choose one of: (?P<allowed>.*)$"
)


class QuizError(MemcalcError):
    """A quiz error with its wording in both languages."""

    def __init__(self, key: str, **values: Any) -> None:
        self.key = key
        self.values = values
        super().__init__(ERRORS[Lang.en][key].format(**values))

    def text(self, lang: Lang) -> str:
        """The message in ``lang``."""
        return ERRORS[lang][self.key].format(**self.values)


def error_text(err: MemcalcError, lang: Lang) -> str:
    """The one-line message of ``err`` in ``lang`` (English when no Urdu wording exists,
    e.g. a bank file's field errors)."""
    if isinstance(err, QuizError):
        return err.text(lang)
    message = str(err)
    match = _ONE_OF.match(message)
    if lang is Lang.ur and match:
        return ERRORS[lang]["one_of"].format(**match.groupdict())
    return message
