"""Study sheets as files: ``--reveal --format markdown | html | anki``.

- markdown: one section per question (answer, explanation, why the other options are wrong);
  Urdu sits in ``<div dir="rtl" lang="ur">`` with its lines marked right-to-left after their
  own syntax (``## `` + RLM, ``- `` + RLM: CommonMark still finds the headings and lists).
- html: one standalone page; Urdu pages are ``<html lang="ur" dir="rtl">`` and every Latin
  run or number is a ``<bdi dir="ltr">``, so ``16-bit`` never shows as ``bit-16``.
- anki: a CSV deck Anki imports as it is (File > Import): columns guid, front, back, tags,
  with Anki's file headers (comma separator, HTML fields, the GUID in column 1 so a re-import
  updates its notes, tags in column 4).
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
from dataclasses import replace

from memcalc.quiz.bank import NUM_OPTIONS, Lang, Question
from memcalc.quiz.bidi import rtl_markdown, segments
from memcalc.quiz.messages import MESSAGES
from memcalc.quiz.render import (
    QuizInfo,
    header,
    option_label,
    option_line,
    question_title,
    why_not,
)
from memcalc.quiz.select import Asked, source_of

ANKI_HEADERS = ("#separator:comma", "#html:true", "#guid column:1", "#tags column:4")
"""Anki's text-import file headers (Anki 2.1.55+, docs.ankiweb.net "Importing: text files"):
the separator, fields are HTML, the column with each note's GUID (a note whose GUID Anki
already has is updated, not duplicated) and the column with the tags."""


def _md_escape(text: str) -> str:
    """Text safe inside Markdown (no accidental emphasis, links or HTML)."""
    for ch in "\\`*_[]<>#|":
        text = text.replace(ch, "\\" + ch)
    return text


def markdown(asked: list[Asked], info: QuizInfo) -> str:
    """The study sheet as Markdown."""
    lang, words = info.lang, MESSAGES[info.lang]
    out = [
        f"# {words['sheet_title']}",
        "",
        _md_escape(header(info, len(asked), key="sheet_header")),
    ]
    for index, item in enumerate(asked):
        text = item.question.text(lang)
        out += ["", f"## {_md_escape(question_title(item, index, len(asked), lang))}", ""]
        out += [_md_escape(text.prompt), ""]
        out += [f"- {_md_escape(option_line(item, i, lang))}" for i in range(NUM_OPTIONS)]
        answer = option_line(item, item.correct_position, lang)
        out += ["", f"**{_md_escape(words['answer'].format(answer=answer))}**", ""]
        out += [_md_escape(words["why"].format(explanation=text.explanation))]
        notes = why_not(item, lang)
        if notes:
            out += [""] + [f"- {_md_escape(n)}" for n in notes]
    body = "\n".join(out) + "\n"
    if lang is Lang.ur:
        return f'<div dir="rtl" lang="ur">\n\n{rtl_markdown(body)}\n</div>\n'
    return body


def _html_text(text: str, lang: Lang) -> str:
    """Escaped text; in Urdu, Latin runs and numbers isolated as ``<bdi dir="ltr">``."""
    if lang is not Lang.ur:
        return html.escape(text)
    return "".join(
        f'<bdi dir="ltr">{html.escape(piece)}</bdi>' if ltr else html.escape(piece)
        for ltr, piece in segments(text)
    )


def _html_question(item: Asked, index: int, total: int, lang: Lang) -> str:
    words, text = MESSAGES[lang], item.question.text(lang)
    options = "".join(
        f'<li><span class="letter">{option_label(i, lang)}</span> '
        f"{_html_text(item.options(lang)[i], lang)}</li>"
        for i in range(NUM_OPTIONS)
    )
    answer = option_line(item, item.correct_position, lang)
    notes = "".join(f"<li>{_html_text(n, lang)}</li>" for n in why_not(item, lang))
    return (
        f'<section class="question" id="q{index + 1}">'
        f"<h2>{_html_text(question_title(item, index, total, lang), lang)}</h2>"
        f'<p class="prompt">{_html_text(text.prompt, lang)}</p>'
        f'<ul class="options">{options}</ul>'
        f'<p class="answer"><strong>{_html_text(words["answer"].format(answer=answer), lang)}'
        "</strong></p>"
        f'<p class="why">{_html_text(words["why"].format(explanation=text.explanation), lang)}'
        "</p>" + (f'<ul class="why-not">{notes}</ul>' if notes else "") + "</section>"
    )


def html_sheet(asked: list[Asked], info: QuizInfo) -> str:
    """The study sheet as one standalone HTML page."""
    lang, words = info.lang, MESSAGES[info.lang]
    direction = "rtl" if lang is Lang.ur else "ltr"
    sections = "\n".join(_html_question(item, i, len(asked), lang) for i, item in enumerate(asked))
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="{lang.value}" dir="{direction}">\n'
        "<head>\n"
        '<meta charset="utf-8">\n'
        f"<title>{html.escape(words['sheet_title'])}</title>\n"
        "<style>body{font-family:sans-serif;max-width:50em;margin:auto;line-height:1.6}"
        ".options{list-style:none}.answer{color:#064}.why-not{color:#555}</style>\n"
        "</head>\n"
        "<body>\n"
        f"<h1>{html.escape(words['sheet_title'])}</h1>\n"
        f"<p>{_html_text(header(info, len(asked), key='sheet_header'), lang)}</p>\n"
        f"{sections}\n"
        "</body>\n"
        "</html>\n"
    )


def _anki_field(parts: list[str], lang: Lang) -> str:
    inner = "<br>".join(_html_text(p, lang) for p in parts)
    if lang is Lang.ur:
        return f'<div dir="rtl" lang="ur">{inner}</div>'
    return inner


def card_id(question: Question) -> str:
    """A note's stable GUID: the question's id, and for a computed question a digest of its
    English prompt (which holds the model's numbers and never the seed), so re-exporting
    with another seed updates the same notes and another model's questions are new ones.

    >>> from memcalc.quiz.bank import load_bank
    >>> card_id(load_bank()[0]) == "memcalc:" + load_bank()[0].id
    True
    """
    if source_of(question) == "bank":
        return f"memcalc:{question.id}"
    digest = hashlib.sha1(question.en.prompt.encode("utf-8")).hexdigest()[:12]
    return f"memcalc:{question.id}:{digest}"


def _stable_order(item: Asked) -> Asked:
    """``item`` with its options in an order drawn from its card id, not from the seed: the
    same card shows the same front whatever seed exported it."""
    guid = card_id(item.question)
    order = sorted(
        range(NUM_OPTIONS), key=lambda i: hashlib.sha1(f"{guid}:{i}".encode()).hexdigest()
    )
    return replace(item, order=tuple(order))


def anki(asked: list[Asked], info: QuizInfo) -> str:
    """The study sheet as an Anki deck: one note per question (guid: ``card_id``; front: the
    question and its options, in an order fixed per card; back: the answer, the explanation,
    why the others are wrong; tags: memcalc, the topic, the difficulty and the concept)."""
    lang, words = info.lang, MESSAGES[info.lang]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for item in map(_stable_order, asked):
        q, text = item.question, item.question.text(lang)
        front = [text.prompt] + [option_line(item, i, lang) for i in range(NUM_OPTIONS)]
        answer = option_line(item, item.correct_position, lang)
        back = [words["answer"].format(answer=answer), text.explanation, *why_not(item, lang)]
        tags = f"memcalc memcalc::{q.topic.value} memcalc::{q.difficulty.value} {q.concept}"
        writer.writerow([card_id(q), _anki_field(front, lang), _anki_field(back, lang), tags])
    return "\n".join(ANKI_HEADERS) + "\n" + buffer.getvalue()
