"""``memcalc quiz``: parse the flags (the training setup ones shared with ``estimate``), run
the quiz (``memcalc.quiz.command``)."""

from __future__ import annotations

from typing import Any

import click

from memcalc.cli.common import finetune_options, gpu_option, model_option, setup_options
from memcalc.cli.options import Parsed, option
from memcalc.inputs.catalog import MFU, MFU_FLAG
from memcalc.inputs.flags import path
from memcalc.inputs.read import FINETUNE_KEYS, finetune_fields
from memcalc.quiz.bank import Difficulty, Lang, Topic
from memcalc.quiz.command import Format, choices, quiz_command
from memcalc.quiz.select import DEFAULT_COUNT, Source
from memcalc.strategies.options import DEFAULT_MFU

EXAMPLES = """\b
Examples:
  memcalc quiz --model llama-2-7b --gpu a100 --count 10 --seed 7
  memcalc quiz --lang ur
  memcalc quiz --model llama-2-7b --lora-rank 16 --quantize nf4 --topic lora
  memcalc quiz --reveal --format html > sheet.html
  memcalc quiz --answers b,d,a,c --format json
"""


@click.command("quiz", epilog=EXAMPLES)
@model_option()
@gpu_option
@setup_options
@finetune_options
@option(
    MFU_FLAG.with_default(
        DEFAULT_MFU,
        parse=MFU,
        help="Model-FLOPs utilisation for the times shown.",
        show_default=True,
    )
)
@click.option(
    "--count",
    "-n",
    type=int,
    default=None,
    help=f"Number of questions (default {DEFAULT_COUNT}, or one per --answers).",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed for choosing and shuffling; the same seed asks the same quiz.",
)
@click.option(
    "--topic",
    multiple=True,
    help=f"Only these topics (repeat or comma-separate): {choices(Topic)}.",
)
@click.option(
    "--difficulty", multiple=True, help=f"Only these difficulties: {choices(Difficulty)}."
)
@click.option(
    "--source",
    default="mixed",
    show_default=True,
    help=f"Where questions come from: {choices(Source)}.",
)
@click.option("--lang", default="en", show_default=True, help=f"Language: {choices(Lang)}.")
@click.option("--reveal", is_flag=True, help="Print a study sheet: every question with its answer.")
@click.option(
    "--answers", default=None, help="Answer non-interactively, e.g. b,d,a,c (letters or 1-4)."
)
@click.option(
    "--format",
    "fmt",
    default="text",
    show_default=True,
    help=f"Output: {choices(Format)} (json with --answers or --reveal; markdown, html and anki "
    "with --reveal).",
)
@click.option(
    "--typed", is_flag=True, help="Type the number for arithmetic questions instead of a letter."
)
@click.option("--review", is_flag=True, help="Ask the questions that are due or were missed.")
@click.option("--stats", is_flag=True, help="Show mastery per topic from the progress file.")
@click.option(
    "--progress",
    type=Parsed(path, "path"),
    default=None,
    help="Progress file (default $XDG_STATE_HOME/memcalc/quiz.json, else "
    "~/.local/state/memcalc/quiz.json).",
)
def quiz(**values: Any) -> None:
    """Quiz yourself on training memory, with numbers computed for your model and GPU."""
    values["topic"] = list(values["topic"]) or None
    values["difficulty"] = list(values["difficulty"]) or None
    finetune = finetune_fields(values)
    for key in FINETUNE_KEYS:
        values.pop(key)
    quiz_command(**values, finetune=finetune)
