"""The words of the quiz screen (headers, prompts, feedback, score) in English and Urdu."""

from __future__ import annotations

from memcalc.quiz.bank import Difficulty, Lang, Topic

MESSAGES: dict[Lang, dict[str, str]] = {
    Lang.en: {
        "header": "memcalc quiz: {count} questions. Your model: {model} (batch {batch}, "
        "sequence {seq}, {precision}, {optimizer}) on {gpu}. Seed {seed}.",
        "sheet_header": "memcalc quiz study sheet: {count} questions with answers. Your model: "
        "{model} (batch {batch}, sequence {seq}, {precision}, {optimizer}) on {gpu}. "
        "Seed {seed}.",
        "question": "Question {index}/{total} · {topic} · {difficulty} · {source}",
        "source.bank": "from the question bank",
        "source.model": "computed for your model",
        "prompt": "Your answer (a-d, q to quit): ",
        "invalid": "Please answer with a letter a-d or a number 1-4 (q to quit).",
        "your_answer": "Your answer: {choice}",
        "right": "Right! {answer}",
        "wrong": "Wrong: you chose {choice}. The correct answer is {answer}",
        "why": "Why: {explanation}",
        "answer": "Answer: {answer}",
        "stopped": "Quiz ended after {answered} of {total} questions.",
        "score": "Score: {correct}/{answered} ({percent}%)",
        "no_answers": "No question answered.",
        "review": "Concepts to review: {concepts}",
        "no_review": "Nothing to review: every answer was right.",
        "again": "Same questions again: --seed {seed}",
        "list_join": ", ",
    },
    Lang.ur: {
        "header": "memcalc کوئز: {count} سوالات۔ آپ کا ماڈل: {model} (بیچ {batch}، سیکوئنس "
        "{seq}، {precision}، {optimizer})، {gpu} پر۔ سیڈ {seed}۔",
        "sheet_header": "memcalc کوئز اسٹڈی شیٹ: {count} سوالات جوابات کے ساتھ۔ آپ کا ماڈل: "
        "{model} (بیچ {batch}، سیکوئنس {seq}، {precision}، {optimizer})، {gpu} پر۔ سیڈ {seed}۔",
        "question": "سوال {index}/{total} · {topic} · {difficulty} · {source}",
        "source.bank": "سوالات کے ذخیرے سے",
        "source.model": "آپ کے ماڈل کے لیے حساب شدہ",
        "prompt": "آپ کا جواب (a-d، ختم کرنے کے لیے q): ",
        "invalid": "براہِ کرم a-d میں سے کوئی حرف یا 1-4 میں سے کوئی عدد لکھیں (ختم کرنے کے لیے q)۔",
        "your_answer": "آپ کا جواب: {choice}",
        "right": "درست! {answer}",
        "wrong": "غلط: آپ نے {choice} چنا۔ درست جواب ہے {answer}",
        "why": "وضاحت: {explanation}",
        "answer": "جواب: {answer}",
        "stopped": "کوئز {total} میں سے {answered} سوالات کے بعد ختم ہوا۔",
        "score": "اسکور: {correct}/{answered} ({percent}%)",
        "no_answers": "کسی سوال کا جواب نہیں دیا گیا۔",
        "review": "دہرانے کے لیے تصورات: {concepts}",
        "no_review": "دہرانے کو کچھ نہیں: ہر جواب درست تھا۔",
        "again": "یہی سوالات دوبارہ: --seed {seed}",
        "list_join": "، ",
    },
}
"""Screen text by language; ``str.format`` fills in the numbers."""

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
    },
}
"""Topic names as shown above a question."""

DIFFICULTY_NAMES: dict[Lang, dict[Difficulty, str]] = {
    Lang.en: {d: d.value for d in Difficulty},
    Lang.ur: {Difficulty.easy: "آسان", Difficulty.medium: "درمیانہ", Difficulty.hard: "مشکل"},
}
"""Difficulty names as shown above a question."""
