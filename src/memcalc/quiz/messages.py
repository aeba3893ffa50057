"""The words of the quiz screen (headers, prompts, feedback, score, progress, errors and
notes) in English and Urdu.

Urdu follows Urdu word order (``غلط۔ آپ کا جواب: ...۔ درست جواب: ...``), not a word-for-word
copy of the English; the terminal marks each Urdu line right-to-left (``bidi.py``).
"""

from __future__ import annotations

from memcalc.quiz.bank import Difficulty, Lang, Topic

MESSAGES: dict[Lang, dict[str, str]] = {
    Lang.en: {
        "header": "memcalc quiz: {questions}. Your model: {model} (batch {batch}, "
        "sequence {seq}, {precision}, {optimizer}, {attention} attention) on {gpu}. "
        "Seed {seed}.",
        "review_header": "memcalc quiz review: {questions} due or missed. Your model: "
        "{model} (batch {batch}, sequence {seq}, {precision}, {optimizer}, {attention} "
        "attention) on {gpu}; each computed question comes back for the model and setup it "
        "was asked with. Seed {seed}.",
        "sheet_header": "memcalc quiz study sheet: {questions} with answers. Your model: "
        "{model} (batch {batch}, sequence {seq}, {precision}, {optimizer}, {attention} "
        "attention) on {gpu}. Seed {seed}.",
        "sheet_title": "memcalc quiz study sheet",
        "question": "Question {index}/{total} · {topic} · {difficulty} · {source}",
        "source.bank": "from the question bank",
        "source.model": "computed for your model",
        "follow_up": "again, on a concept you missed",
        "prompt": "Your answer (a-d, q to quit): ",
        "typed_prompt": "Your answer (a number{unit_hint}; within {tolerance}; q to quit): ",
        "typed_unit_hint": " with its unit, e.g. 12.5 GiB",
        "typed_percent_hint": ", e.g. 33%",
        "typed_count_hint": "",
        "invalid": "Please answer with a letter a-d or a number 1-4 (q to quit).",
        "typed_invalid": "Please type a number{unit_hint} (q to quit).",
        "pause": "Press Enter for the next question (q to quit): ",
        "right": "Right! {answer}",
        "wrong": "Wrong: you chose {choice}. The correct answer is {answer}",
        "typed_right": "Right! You typed {typed}; the answer is {answer} (within {tolerance}).",
        "typed_wrong": "Wrong: you typed {typed}. The answer is {answer} (within {tolerance} "
        "counts).",
        "mistake": "Your choice: {mistake}",
        "typed_mistake": "That matches a common mistake, {option}: {mistake}",
        "why": "Why: {explanation}",
        "answer": "Answer: {answer}",
        "why_not": "Why not {option}: {mistake}",
        "exactly": "exactly",
        "stopped": "Quiz ended after {answered} of {total_questions}.",
        "interrupted": "Quiz interrupted after {answered} of {total_questions}; score "
        "{correct}/{answered}.",
        "interrupted_start": "Quiz interrupted before the first question.",
        "score": "Score: {correct}/{answered} ({percent}%)",
        "no_answers": "No question answered.",
        "review": "Concepts to review: {concepts}",
        "no_review": "Nothing to review: every answer was right.",
        "again": "Same questions again: --seed {seed}",
        "saved": "Progress saved to {path} (memcalc quiz --review asks what is due).",
        "list_join": ", ",
        "nothing_due": "Nothing to review in {path}: no question is due and none was missed.",
        "next_due": "Next due: {when} ({questions}).",
        "stats_title": "memcalc quiz progress: {path}",
        "stats_header": "topic|seen|answers|right|mastered|due|mastery",
        "stats_total": "all",
        "stats_empty": "No answers recorded in {path} yet: answer a quiz at the keyboard, or "
        "pass --progress FILE.",
        "stats_note": "Leitner boxes 1-5: a right answer moves a question up one box (asked "
        "again after 0, 1, 3, 7 or 21 days); a wrong one sends it back to box 1. Mastered: box "
        "4 or 5. Mastery: how far up the boxes all questions of the topic are (box 1: 0%, "
        "box 5: 100%).",
        "note_only": "note: only {questions} match; asking {count}",
        "note_only.one": "note: only 1 question matches; asking 1",
        "questions.one": "{n} question",
        "questions.many": "{n} questions",
        "error": "error: {message}",
    },
    Lang.ur: {
        "header": "memcalc کوئز: {questions}۔ آپ کا ماڈل: {model} (بیچ {batch}، سیکوئنس "
        "{seq}، {precision}، {optimizer}، {attention} اٹینشن)، {gpu} پر۔ سیڈ {seed}۔",
        "review_header": "memcalc کوئز دہرائی: {questions} جن کی باری ہے یا جو غلط ہوئے۔ آپ "
        "کا ماڈل: {model} (بیچ {batch}، سیکوئنس {seq}، {precision}، {optimizer}، {attention} "
        "اٹینشن)، {gpu} پر؛ ہر حساب شدہ سوال اسی ماڈل اور سیٹ اپ کے لیے دوبارہ آتا ہے جس کے "
        "لیے پوچھا گیا تھا۔ سیڈ {seed}۔",
        "sheet_header": "memcalc کوئز اسٹڈی شیٹ: {questions} جوابات کے ساتھ۔ آپ کا ماڈل: "
        "{model} (بیچ {batch}، سیکوئنس {seq}، {precision}، {optimizer}، {attention} اٹینشن)، "
        "{gpu} پر۔ سیڈ {seed}۔",
        "sheet_title": "memcalc کوئز اسٹڈی شیٹ",
        "question": "سوال {index}/{total} · {topic} · {difficulty} · {source}",
        "source.bank": "سوالات کے ذخیرے سے",
        "source.model": "آپ کے ماڈل کے لیے حساب شدہ",
        "follow_up": "دوبارہ، اس تصور پر جس میں غلطی ہوئی",
        "prompt": "آپ کا جواب (الف، ب، ج، د یا a-d؛ ختم کرنے کے لیے q): ",
        "typed_prompt": "آپ کا جواب (ایک عدد{unit_hint}؛ {tolerance} کے اندر؛ ختم کرنے کے لیے q): ",
        "typed_unit_hint": " اکائی کے ساتھ، مثلاً 12.5 GiB",
        "typed_percent_hint": "، مثلاً 33%",
        "typed_count_hint": "",
        "invalid": "براہِ کرم الف، ب، ج، د یا a-d میں سے کوئی حرف، یا 1-4 (یا ۱-۴) میں سے "
        "کوئی عدد لکھیں (ختم کرنے کے لیے q)۔",
        "typed_invalid": "براہِ کرم ایک عدد{unit_hint} لکھیں (ختم کرنے کے لیے q)۔",
        "pause": "اگلے سوال کے لیے Enter دبائیں (ختم کرنے کے لیے q): ",
        "right": "درست! {answer}",
        "wrong": "غلط۔ آپ کا جواب: {choice}۔ درست جواب: {answer}",
        "typed_right": "درست! آپ نے {typed} لکھا؛ جواب {answer} ہے ({tolerance} کے اندر)۔",
        "typed_wrong": "غلط۔ آپ کا جواب: {typed}۔ درست جواب: {answer} ({tolerance} کے اندر "
        "درست مانا جاتا ہے)۔",
        "mistake": "آپ کا انتخاب: {mistake}",
        "typed_mistake": "یہ ایک عام غلطی سے ملتا ہے، {option}: {mistake}",
        "why": "وضاحت: {explanation}",
        "answer": "جواب: {answer}",
        "why_not": "{option} کیوں نہیں: {mistake}",
        "exactly": "بالکل درست",
        "stopped": "کوئز {total_questions} میں سے {answered} کے بعد ختم ہوا۔",
        "interrupted": "کوئز {total_questions} میں سے {answered} کے بعد روک دیا گیا؛ اسکور "
        "{correct}/{answered}۔",
        "interrupted_start": "کوئز پہلے سوال سے پہلے ہی روک دیا گیا۔",
        "score": "اسکور: {correct}/{answered} ({percent}%)",
        "no_answers": "کسی سوال کا جواب نہیں دیا گیا۔",
        "review": "دہرانے کے لیے تصورات: {concepts}",
        "no_review": "دہرانے کو کچھ نہیں: ہر جواب درست تھا۔",
        "again": "یہی سوالات دوبارہ: --seed {seed}",
        "saved": "پیش رفت {path} میں محفوظ ہو گئی (memcalc quiz --review وہ سوال پوچھتا ہے جن "
        "کی باری ہے)۔",
        "list_join": "، ",
        "nothing_due": "{path} میں دہرانے کو کچھ نہیں: نہ کسی سوال کی باری ہے اور نہ کوئی غلط ہوا۔",
        "next_due": "اگلی باری: {when} ({questions})۔",
        "stats_title": "memcalc کوئز کی پیش رفت: {path}",
        "stats_header": "موضوع|دیکھے|جوابات|درست|سیکھ لیے|باری|مہارت",
        "stats_total": "کل",
        "stats_empty": "{path} میں ابھی کوئی جواب درج نہیں: کی بورڈ پر کوئز دیں، یا --progress "
        "FILE دیں۔",
        "stats_note": "لائٹنر خانے 1-5: درست جواب سوال کو ایک خانہ اوپر لے جاتا ہے (0، 1، 3، 7 "
        "یا 21 دن بعد دوبارہ)؛ غلط جواب اسے خانہ 1 میں واپس بھیجتا ہے۔ سیکھ لیے: خانہ 4 یا 5۔ "
        "مہارت: موضوع کے تمام سوالات خانوں میں کتنا اوپر ہیں (خانہ 1: 0%، خانہ 5: 100%)۔",
        "note_only": "نوٹ: صرف {questions} ملتے ہیں؛ {count} پوچھے جا رہے ہیں",
        "note_only.one": "نوٹ: صرف 1 سوال ملتا ہے؛ 1 پوچھا جا رہا ہے",
        "questions.one": "{n} سوال",
        "questions.many": "{n} سوالات",
        "error": "error: {message}",
    },
}
"""Screen text by language; ``str.format`` fills in the numbers."""


def questions_text(count: int, lang: Lang) -> str:
    """``1 question`` / ``3 questions`` (``1 سوال`` / ``3 سوالات``).

    >>> questions_text(1, Lang.ur), questions_text(3, Lang.en)
    ('1 سوال', '3 questions')
    """
    key = "questions.one" if count == 1 else "questions.many"
    return MESSAGES[lang][key].format(n=count)


TOPIC_NAMES: dict[Lang, dict[Topic, str]] = {
    Lang.en: {t: t.value for t in Topic},
    Lang.ur: {
        Topic.recompute: "ری کمپیوٹ",
        Topic.activations: "ایکٹیویشنز",
        Topic.parameters: "پیرامیٹرز",
        Topic.optimizer: "آپٹیمائزر",
        Topic.attention: "اٹینشن",
        Topic.offload: "آف لوڈ",
        Topic.precision: "پریسیژن",
        Topic.sharding: "شارڈنگ",
        Topic.parallel: "پیرالل ازم",
        Topic.lora: "LoRA",
        Topic.moe: "MoE",
    },
}
"""Topic names as shown above a question."""

DIFFICULTY_NAMES: dict[Lang, dict[Difficulty, str]] = {
    Lang.en: {d: d.value for d in Difficulty},
    Lang.ur: {Difficulty.easy: "آسان", Difficulty.medium: "درمیانہ", Difficulty.hard: "مشکل"},
}
"""Difficulty names as shown above a question."""
