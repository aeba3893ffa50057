"""``memcalc quiz``'s work: build the quiz from the flags' values, run it, print. The command
(its flags, the shared ones of ``memcalc estimate``) is in ``memcalc/cli/quiz.py``. Bad input
is a MemcalcError,
shown as one line ``error: <flag or file>: ...`` on stderr (in Urdu with ``--lang ur``) with
exit code 2; Ctrl-C at any moment prints one line and exits 130.
"""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

import click
from tabulate import tabulate

from memcalc.errors import MemcalcError
from memcalc.estimate import MIN_MFU
from memcalc.profiles import GpuProfile, load_profile
from memcalc.quiz import export, render
from memcalc.quiz.bank import Bank, Difficulty, Lang, Question, Topic, load_bank_data
from memcalc.quiz.bidi import rtl_table, rtl_text
from memcalc.quiz.context import QuizContext, context_of, restore
from memcalc.quiz.draft import KINDS, MODEL_ID_PREFIX
from memcalc.quiz.errors import QuizError, error_text
from memcalc.quiz.facts import ModelFacts, model_facts
from memcalc.quiz.generate import kind_of, model_questions, question_for, variant_question, vary
from memcalc.quiz.messages import MESSAGES, TOPIC_NAMES, questions_text
from memcalc.quiz.progress import (
    Progress,
    default_progress_path,
    due_for_review,
    load_progress,
    next_due,
    record_answer,
    save_progress,
    topic_stats,
)
from memcalc.quiz.render import QuizInfo
from memcalc.quiz.result import Outcome, Result
from memcalc.quiz.select import (
    DEFAULT_COUNT,
    Asked,
    Source,
    parse_choices,
    parse_enum,
    pick,
    pick_review,
)
from memcalc.quiz.session import EndOfQuiz, Reader, parse_answers, run_session, scripted_reader
from memcalc.quiz.siblings import FollowUps
from memcalc.quiz.terminal import Screen, terminal_width
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import (
    Attention,
    GradDType,
    Loss,
    OptimizerKind,
    Precision,
    TrainingSetup,
)


class Format(str, Enum):
    """Output format (``--format``)."""

    text = "text"
    """Questions, feedback and the score as text."""
    json = "json"
    """One JSON document (with ``--answers`` or ``--reveal``)."""
    markdown = "markdown"
    """A study sheet in Markdown (with ``--reveal``)."""
    html = "html"
    """A study sheet as one HTML page (with ``--reveal``)."""
    anki = "anki"
    """A study sheet as an Anki CSV deck: front, back, tags (with ``--reveal``)."""


SHEET_FORMATS = (Format.markdown, Format.html, Format.anki)


def choices(enum: type[Enum]) -> str:
    return ", ".join(str(m.value) for m in enum)


def quiz_command(
    *,
    model: str,
    gpu: str,
    batch: int,
    seq: int,
    precision: Precision,
    grad_dtype: GradDType | None,
    optimizer: OptimizerKind,
    foreach: bool,
    fused: bool,
    attention: Attention,
    loss: Loss,
    dropout: float | None,
    mfu: float,
    count: int | None,
    seed: int | None,
    topic: list[str] | None,
    difficulty: list[str] | None,
    source: str,
    lang: str,
    reveal: bool,
    answers: str | None,
    fmt: str,
    typed: bool,
    review: bool,
    stats: bool,
    progress: Path | None,
    finetune: dict[str, object] | None = None,
) -> None:
    """Quiz yourself on training memory, with numbers computed for your model and GPU.
    ``finetune``: the LoRA / quantization fields of the setup (``--lora-rank``,
    ``--quantize``, ...), as ``memcalc.cli.common.finetune_fields`` makes them."""
    language = Lang.en
    try:
        language = parse_enum("--lang", lang, Lang)
        _quiz(
            model=model,
            gpu=gpu,
            setup_flags={
                "batch": batch,
                "seq": seq,
                "precision": precision,
                "grad_dtype": grad_dtype,
                "optimizer": optimizer,
                "optimizer_foreach": foreach,
                "optimizer_fused": fused,
                "attention": attention,
                "loss": loss,
                "dropout": dropout,
            }
            | (finetune or {}),
            mfu=mfu,
            count=count,
            seed=seed,
            topic=topic,
            difficulty=difficulty,
            source=source,
            lang=language,
            reveal=reveal,
            answers=answers,
            fmt=fmt,
            typed=typed,
            review=review,
            stats=stats,
            progress_file=progress,
        )
    except MemcalcError as e:
        click.echo(f"error: {error_text(e, language)}", err=True)
        raise click.exceptions.Exit(2) from None
    except KeyboardInterrupt:
        click.echo(MESSAGES[language]["interrupted_start"], err=True)
        raise click.exceptions.Exit(130) from None


def _check_modes(
    *,
    output: Format,
    reveal: bool,
    scripted: bool,
    typed: bool,
    review: bool,
    stats: bool,
    origin: Source,
) -> None:
    """Flags that cannot go together, each a one-line error naming the flag."""
    if stats:
        for flag, given in (
            ("--reveal", reveal),
            ("--answers", scripted),
            ("--typed", typed),
            ("--review", review),
        ):
            if given:
                raise QuizError("stats.mode", flag=flag)
    if typed and (reveal or scripted):
        raise QuizError("typed.mode", flag="--reveal" if reveal else "--answers")
    if reveal and scripted:
        raise QuizError("reveal.answers")
    if output is Format.json and not reveal and not scripted and not stats:
        raise QuizError("format.json")
    if output in SHEET_FORMATS and not reveal:
        raise QuizError("format.sheet", fmt=output.value)
    if review and origin is not Source.mixed:
        raise QuizError("review.source")


def _quiz(
    *,
    model: str,
    gpu: str,
    setup_flags: dict[str, object],
    mfu: float,
    count: int | None,
    seed: int | None,
    topic: list[str] | None,
    difficulty: list[str] | None,
    source: str,
    lang: Lang,
    reveal: bool,
    answers: str | None,
    fmt: str,
    typed: bool,
    review: bool,
    stats: bool,
    progress_file: Path | None,
) -> None:
    output = parse_enum("--format", fmt, Format)
    origin = parse_enum("--source", source, Source)
    topics = parse_choices("--topic", topic, Topic)
    difficulties = parse_choices("--difficulty", difficulty, Difficulty)
    scripted = parse_answers(answers) if answers is not None else None
    _check_modes(
        output=output,
        reveal=reveal,
        scripted=scripted is not None,
        typed=typed,
        review=review,
        stats=stats,
        origin=origin,
    )
    for flag, value in (
        ("--batch", setup_flags["batch"]),
        ("--seq", setup_flags["seq"]),
        ("--count", count),
    ):
        if isinstance(value, int) and value < 1:
            raise QuizError("positive", flag=flag, value=value)
    if not MIN_MFU <= mfu <= 1:  # also refuses nan
        raise QuizError("mfu", value=mfu)
    screen = Screen(lang, terminal_width())
    path = progress_file or default_progress_path()
    interactive = not reveal and scripted is None and not stats
    # Progress is written when asked for, or for a learner at a terminal; never for a script
    # or a pipe unless --progress names the file.
    at_terminal = interactive and _at_terminal()
    saving = progress_file is not None or at_terminal
    bank = load_bank_data()  # the concept names, even when no bank question is asked
    progress = load_progress(path) if (saving or review or stats) else Progress()
    if stats:
        click.echo(_stats_text(progress, path, bank, lang))
        return

    spec = load_model(model)
    profile = load_profile(gpu)
    setup = training_setup(**setup_flags)
    bank_questions = bank.questions if origin is not Source.model or review else []
    generated = (
        model_questions(spec, setup, profile, mfu) if origin is not Source.bank or review else []
    )
    if seed is None:
        seed = random.SystemRandom().randrange(1_000_000)
    rng = random.Random(seed)
    wanted = count or (len(scripted) if scripted is not None else DEFAULT_COUNT)
    base = context_of(model, profile.name, mfu, setup)
    if review:
        due = due_for_review(progress, datetime.now(timezone.utc))
        pool, contexts = _review_pool(due, progress, bank_questions, generated, base)
        asked = pick_review(
            due,
            pool,
            count=wanted,
            topics=topics,
            difficulties=difficulties,
            rng=rng,
            contexts=contexts,
        )
        if not asked:
            click.echo(screen.text(_nothing_due(progress, path, lang)))
            return
    else:
        asked = pick(
            bank_questions,
            generated,
            count=wanted,
            source=origin,
            topics=topics,
            difficulties=difficulties,
            rng=rng,
        )
        asked = [replace(a, context=base) if a.source == "model" else a for a in asked]
    if scripted is not None and len(scripted) != len(asked):
        raise QuizError("answers.count", got=len(scripted), want=len(asked))
    if len(asked) < wanted and not review:
        key = "note_only.one" if len(asked) == 1 else "note_only"
        note = MESSAGES[lang][key].format(
            count=len(asked), questions=questions_text(len(asked), lang)
        )
        click.echo(screen.text(note), err=True)

    info = QuizInfo(
        model=spec.name,
        gpu=profile.display_name,
        gpu_profile=profile.name,
        batch=setup.batch,
        seq=setup.seq,
        precision=setup.precision.value,
        optimizer=setup.optimizer.value,
        attention=setup.attention.value,
        seed=seed,
        lang=lang,
    )
    if reveal:
        click.echo(_sheet(asked, info, output, screen), nl=output is not Format.anki)
        return

    recorder = _Recorder(path, progress) if saving else None
    on_answer = recorder.add if recorder else None
    if output is Format.json:
        result = run_session(
            asked, lang, scripted_reader(scripted or []), lambda _: None, on_answer=on_answer
        )
        click.echo(render.to_json(asked, info, result))
        return

    def write(text: str) -> None:
        click.echo(screen.text(text))

    if scripted is not None:
        read = scripted_reader(scripted, write)
        follow_ups = None
    else:
        read = _terminal_reader(screen)
        follow_ups = FollowUps(
            bank_questions + generated,
            lambda q: _variant(q, model, spec, setup, profile, mfu),
            rng,
            base,
        )
    write(render.header(info, len(asked), key="review_header" if review else "header"))
    result = run_session(
        asked,
        lang,
        read,
        write,
        typed=typed,
        follow_up=follow_ups,
        on_answer=on_answer,
        pause=at_terminal,
    )
    _finish(result, info, bank, lang, screen, recorder)


def _finish(
    result: Result,
    info: QuizInfo,
    bank: Bank | None,
    lang: Lang,
    screen: Screen,
    recorder: _Recorder | None,
) -> None:
    """The summary (or, after Ctrl-C, one line and exit code 130)."""
    if result.interrupted:
        click.echo("")  # end the prompt's line
        click.echo(screen.text(render.interrupted_line(result, lang)), err=True)
        raise click.exceptions.Exit(130)

    def name(concept: str) -> str:
        return bank.concept_name(concept, lang) if bank else concept

    click.echo(screen.text(render.summary(result, info, name)))
    if recorder is not None and recorder.saved:
        click.echo(screen.text(MESSAGES[lang]["saved"].format(path=recorder.path)))


def _variant(
    q: Question, model: str, spec: ModelSpec, setup: TrainingSetup, gpu: GpuProfile, mfu: float
) -> tuple[Question, QuizContext] | None:
    """The sibling of a computed question for a varied setup, and what it is computed for."""
    kind = kind_of(q)
    if kind is None:
        return None
    varied = variant_question(kind, spec, setup, gpu, mfu)
    if varied is None:
        return None
    varied_spec, varied_setup = vary(kind.variation, spec, setup)
    name = model if varied_spec is spec else varied_spec.name
    return varied, context_of(name, gpu.name, mfu, varied_setup)


def _review_pool(
    due: list[str],
    progress: Progress,
    bank_questions: list[Question],
    generated: list[Question],
    base: QuizContext,
) -> tuple[list[Question], dict[str, QuizContext]]:
    """The questions ``--review`` may ask: the bank's, and each due computed question
    rebuilt for the model and setup it was last asked with (the current flags' when that no
    longer loads or the kind is left out for it); and what each computed one is for."""
    rebuilt: dict[str, Question] = {}
    contexts = {q.id: base for q in generated}
    facts: dict[str, ModelFacts | None] = {}
    for qid in due:
        record = progress.questions.get(qid)
        kind = (
            KINDS.get(qid.removeprefix(MODEL_ID_PREFIX))
            if qid.startswith(MODEL_ID_PREFIX)
            else None
        )
        if record is None or record.context is None or kind is None:
            continue
        key = record.context.model_dump_json()
        if key not in facts:
            restored = restore(record.context)
            facts[key] = None if restored is None else model_facts(*restored)
        found = facts[key]
        question = None if found is None else question_for(kind, found)
        if question is not None:
            rebuilt[qid], contexts[qid] = question, record.context
    current = [rebuilt.get(q.id, q) for q in generated]
    current += [q for qid, q in rebuilt.items() if qid not in {g.id for g in generated}]
    return bank_questions + current, contexts


class _Recorder:
    """Writes each answer to the progress file as soon as it is given."""

    def __init__(self, path: Path, progress: Progress) -> None:
        self.path = path
        self.progress = progress
        self.saved = False

    def add(self, outcome: Outcome) -> None:
        now = datetime.now(timezone.utc)
        q = outcome.asked.question
        self.progress = record_answer(
            self.progress, q, outcome.is_correct, outcome.answer, now, outcome.asked.context
        )
        save_progress(self.path, self.progress)
        self.saved = True


def _at_terminal() -> bool:
    """True when a learner types the answers at a terminal (stdin is a TTY)."""
    return sys.stdin.isatty()


def _terminal_reader(screen: Screen) -> Reader:
    """Read one line from stdin; end of input ends the quiz; Ctrl-C propagates. When stdin
    is not a terminal the answer is echoed, so the output reads like a session."""

    def read(prompt: str) -> str:
        click.echo(screen.prompt(prompt), nl=False)
        line = sys.stdin.readline()
        if not line:  # end of input: the summary starts on the next line
            raise EndOfQuiz
        if not _at_terminal():
            click.echo(line.rstrip("\r\n"))
        return line.rstrip("\r\n")

    return read


def _sheet(asked: list[Asked], info: QuizInfo, output: Format, screen: Screen) -> str:
    if output is Format.json:
        return render.to_json(asked, info, None)
    if output is Format.markdown:
        return export.markdown(asked, info)
    if output is Format.html:
        return export.html_sheet(asked, info)
    if output is Format.anki:
        return export.anki(asked, info)
    return screen.text(render.study_sheet(asked, info))


def _nothing_due(progress: Progress, path: Path, lang: Lang) -> str:
    words = MESSAGES[lang]
    lines = [words["nothing_due"].format(path=path)]
    upcoming = next_due(progress)
    if upcoming is not None:
        when, n = upcoming
        lines.append(
            words["next_due"].format(
                when=f"{when:%Y-%m-%d %H:%M} UTC", questions=questions_text(n, lang)
            )
        )
    return "\n".join(lines)


def _stats_text(progress: Progress, path: Path, bank: Bank | None, lang: Lang) -> str:
    words = MESSAGES[lang]
    if not progress.questions:
        return words["stats_empty"].format(path=path)
    available = {t: 0 for t in Topic}
    for q in bank.questions if bank else []:
        available[q.topic] += 1
    for kind in KINDS.values():
        available[kind.topic] += 1
    rows = []
    for s in topic_stats(progress, available, datetime.now(timezone.utc)):
        name = words["stats_total"] if s.topic is None else TOPIC_NAMES[lang][s.topic]
        right = "-" if s.right_percent is None else f"{s.right_percent}%"
        rows.append(
            [
                name,
                f"{s.seen}/{s.available}",
                s.answers,
                right,
                s.mastered,
                s.due,
                f"{s.mastery_percent}%",
            ]
        )
    table = tabulate(rows, headers=words["stats_header"].split("|"), disable_numparse=True)
    title, note = words["stats_title"].format(path=path), words["stats_note"]
    if lang is Lang.ur:
        # every line a right-to-left paragraph; each cell isolated on its own, so the LoRA
        # and MoE rows keep the columns in the order of the others
        return "\n".join([rtl_text(title), rtl_table(table), rtl_text(note)])
    return "\n".join([title, table, note])
