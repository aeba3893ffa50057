"""``memcalc quiz``: the typer function. Parse the flags, build the quiz, run it, print.

Registered by the CLI as ``app.command("quiz")(quiz_command)``. Bad input is a MemcalcError,
shown as one line ``error: <flag>: ...`` on stderr with exit code 2.
"""

from __future__ import annotations

import random
from enum import Enum
from typing import Annotated

import typer

from memcalc.errors import MemcalcError
from memcalc.profiles import DEFAULT_GPU, load_profile
from memcalc.quiz import render
from memcalc.quiz.bank import Difficulty, Lang, Question, Topic, load_bank
from memcalc.quiz.generate import model_questions
from memcalc.quiz.render import QuizInfo
from memcalc.quiz.select import DEFAULT_COUNT, Source, parse_choices, parse_enum, pick
from memcalc.quiz.session import EndOfQuiz, parse_answers, run_session, scripted_reader
from memcalc.spec.loaders import load_model
from memcalc.spec.presets import DEFAULT_MODEL
from memcalc.spec.training import Precision, TrainingSetup

_SETUP_DEFAULTS = TrainingSetup()


class Format(str, Enum):
    """Output format (``--format``)."""

    text = "text"
    """Questions, feedback and the score as text."""
    json = "json"
    """One JSON document (with ``--answers`` or ``--reveal``)."""


def _choices(enum: type[Enum]) -> str:
    return ", ".join(str(m.value) for m in enum)


def quiz_command(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="Model preset name, or a spec / HF config.json file.",
        ),
    ] = DEFAULT_MODEL,
    gpu: Annotated[
        str,
        typer.Option(
            "--gpu",
            help="GPU profile name or profile file.",
        ),
    ] = DEFAULT_GPU,
    batch: Annotated[
        int,
        typer.Option(
            "--batch",
            help="Micro-batch size used for your model's numbers.",
        ),
    ] = _SETUP_DEFAULTS.batch,
    seq: Annotated[
        int,
        typer.Option(
            "--seq",
            help="Sequence length used for your model's numbers.",
        ),
    ] = _SETUP_DEFAULTS.seq,
    precision: Annotated[
        str,
        typer.Option(
            "--precision",
            help=f"Precision recipe: {_choices(Precision)}.",
        ),
    ] = _SETUP_DEFAULTS.precision.value,
    count: Annotated[
        int | None,
        typer.Option(
            "--count",
            "-n",
            help=f"Number of questions (default {DEFAULT_COUNT}, or one per --answers).",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Seed for choosing and shuffling; the same seed asks the same quiz.",
            show_default=False,
        ),
    ] = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            help=f"Only these topics (repeat or comma-separate): {_choices(Topic)}.",
            show_default=False,
        ),
    ] = None,
    difficulty: Annotated[
        list[str] | None,
        typer.Option(
            "--difficulty",
            help=f"Only these difficulties: {_choices(Difficulty)}.",
            show_default=False,
        ),
    ] = None,
    source: Annotated[
        str,
        typer.Option(
            "--source",
            help=f"Where questions come from: {_choices(Source)} (half and half).",
        ),
    ] = Source.mixed.value,
    lang: Annotated[
        str,
        typer.Option(
            "--lang",
            help=f"Language: {_choices(Lang)}.",
        ),
    ] = Lang.en.value,
    reveal: Annotated[
        bool,
        typer.Option(
            "--reveal",
            help="Print a study sheet: every question with its answer.",
        ),
    ] = False,
    answers: Annotated[
        str | None,
        typer.Option(
            "--answers",
            help="Answer non-interactively, e.g. b,d,a,c (letters or 1-4).",
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help=f"Output: {_choices(Format)} (json with --answers or --reveal).",
        ),
    ] = Format.text.value,
) -> None:
    """Quiz yourself on training memory, with numbers computed for your model and GPU."""
    try:
        _quiz(
            model=model,
            gpu=gpu,
            batch=batch,
            seq=seq,
            precision=precision,
            count=count,
            seed=seed,
            topic=topic,
            difficulty=difficulty,
            source=source,
            lang=lang,
            reveal=reveal,
            answers=answers,
            fmt=fmt,
        )
    except MemcalcError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def _quiz(
    *,
    model: str,
    gpu: str,
    batch: int,
    seq: int,
    precision: str,
    count: int | None,
    seed: int | None,
    topic: list[str] | None,
    difficulty: list[str] | None,
    source: str,
    lang: str,
    reveal: bool,
    answers: str | None,
    fmt: str,
) -> None:
    language = parse_enum("--lang", lang, Lang)
    output = parse_enum("--format", fmt, Format)
    origin = parse_enum("--source", source, Source)
    topics = parse_choices("--topic", topic, Topic)
    difficulties = parse_choices("--difficulty", difficulty, Difficulty)
    recipe = parse_enum("--precision", precision, Precision)
    scripted = parse_answers(answers) if answers is not None else None
    if reveal and scripted is not None:
        raise MemcalcError(
            "--reveal: cannot be combined with --answers (a study sheet has no answers to score)"
        )
    if output is Format.json and not reveal and scripted is None:
        raise MemcalcError(
            "--format: json needs --answers or --reveal; an interactive quiz prints text"
        )
    for flag, value in (("--batch", batch), ("--seq", seq), ("--count", count)):
        if value is not None and value < 1:
            raise MemcalcError(f"{flag}: must be a positive integer; got {value}")
    wanted = count or (len(scripted) if scripted is not None else DEFAULT_COUNT)

    spec = load_model(model)
    profile = load_profile(gpu)
    setup = TrainingSetup(batch=batch, seq=seq, precision=recipe)
    bank: list[Question] = load_bank() if origin is not Source.model else []
    generated = model_questions(spec, setup, profile) if origin is not Source.bank else []
    if seed is None:
        seed = random.SystemRandom().randrange(1_000_000)
    asked = pick(
        bank,
        generated,
        count=wanted,
        source=origin,
        topics=topics,
        difficulties=difficulties,
        rng=random.Random(seed),
    )
    if scripted is not None and len(scripted) != len(asked):
        raise MemcalcError(
            f"--answers: got {len(scripted)} answers for {len(asked)} questions; "
            "give one answer per question"
        )
    if len(asked) < wanted:
        typer.echo(f"note: only {len(asked)} questions match; asking {len(asked)}", err=True)

    info = QuizInfo(
        model=spec.name,
        gpu=profile.display_name,
        gpu_profile=profile.name,
        batch=setup.batch,
        seq=setup.seq,
        precision=setup.precision.value,
        optimizer=setup.optimizer.value,
        seed=seed,
        lang=language,
    )
    if reveal:
        typer.echo(
            render.to_json(asked, info, None)
            if output is Format.json
            else render.study_sheet(asked, info)
        )
        return
    if output is Format.json:
        result = run_session(asked, language, scripted_reader(scripted or []), lambda _: None)
        typer.echo(render.to_json(asked, info, result))
        return
    typer.echo(render.header(info, len(asked)))
    read = scripted_reader(scripted, typer.echo) if scripted is not None else _prompt
    result = run_session(asked, language, read, typer.echo)
    typer.echo(render.summary(result, info))


def _prompt(prompt: str) -> str:
    """Read one answer from the terminal; end of input or Ctrl-C ends the quiz."""
    try:
        return str(typer.prompt(prompt, default="", show_default=False, prompt_suffix=""))
    except typer.Abort:
        raise EndOfQuiz from None
