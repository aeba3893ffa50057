"""The question schema and the loader of the bank files ``quiz/*.toml``.

One pydantic model per level of a bank file, ``extra="forbid"`` throughout; questions generated
from the learner's model (``generate.py``) are built with the same ``Question`` model, so they
pass the same checks. A bad file gives one line naming the file, the question and the field.

Besides its ``[[questions]]`` a bank file may name concepts (``[concepts]``: the words the
review line and ``--stats`` use for a concept tag, in both languages). A question may carry
per-option ``feedback`` (what picking each wrong option means) and a ``numeric`` answer (what
``--typed`` accepts); both are optional, so older files stay valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from memcalc.errors import MemcalcError
from memcalc.resources import data_dir
from memcalc.spec.loaders import read_data_file

NUM_OPTIONS = 4
"""Every question has four options, answered a-d or 1-4."""

LETTERS = "abcd"
"""The letters of the options as shown in English (and in JSON)."""

URDU_LETTERS = ("الف", "ب", "ج", "د")
"""The letters of the options in Urdu: alif, be, jim, dal (the abjad order), written in full
as Pakistani exam papers label their options: (الف) (ب) (ج) (د)."""

SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
"""Ids and concept tags: lower-case words joined by hyphens."""


class Topic(str, Enum):
    """What a question is about (``--topic``)."""

    recompute = "recompute"
    """Activation recompute / checkpointing."""
    activations = "activations"
    """What is saved for backward, and the step's peak."""
    parameters = "parameters"
    """Parameter counts and the bytes of the weights and model states."""
    optimizer = "optimizer"
    """Optimizer states, master weights, the optimizer step."""
    attention = "attention"
    """Attention kernels and the s x s score term."""
    offload = "offload"
    """Moving optimizer states, parameters or activations to the host."""
    precision = "precision"
    """Precision recipes: bytes per weight, gradient and state."""
    sharding = "sharding"
    """ZeRO / FSDP: model states sharded over data-parallel ranks."""
    parallel = "parallel"
    """Tensor, sequence, pipeline and context parallelism: what each divides."""
    lora = "lora"
    """Fine-tuning a frozen base: LoRA adapters, QLoRA's quantized weights."""
    moe = "moe"
    """Mixtures of experts: total and active parameters."""


class Difficulty(str, Enum):
    """How hard a question is (``--difficulty``)."""

    easy = "easy"
    """One fact or one multiplication."""
    medium = "medium"
    """Two facts combined, or a common mistake to avoid."""
    hard = "hard"
    """Several steps, or a result that surprises most people."""


class Lang(str, Enum):
    """Language of the quiz text (``--lang``)."""

    en = "en"
    """English."""
    ur = "ur"
    """Urdu."""


class Text(BaseModel):
    """A question in one language."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str = Field(min_length=1, description="The question.")
    options: list[str] = Field(
        min_length=NUM_OPTIONS,
        max_length=NUM_OPTIONS,
        description="The four answers, in the file's order (shuffled when asked).",
    )
    explanation: str = Field(min_length=1, description="Why the correct answer is right.")
    feedback: list[str] | None = Field(
        default=None,
        min_length=NUM_OPTIONS,
        max_length=NUM_OPTIONS,
        description="Optional: the mistake each option stands for, shown when it is picked, in "
        "the order of ``options``; an empty string for none (and for the correct option).",
    )

    @field_validator("prompt", "explanation")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("options")
    @classmethod
    def _distinct_options(cls, options: list[str]) -> list[str]:
        if any(not o.strip() for o in options):
            raise ValueError("options must not be blank")
        if len({o.strip() for o in options}) != len(options):
            raise ValueError("options must be distinct, so that exactly one is correct")
        return options


class AnswerUnit(str, Enum):
    """The unit of a numeric answer (``--typed``)."""

    GiB = "GiB"
    """Binary gibibytes (2^30 bytes); a learner may type any size unit."""
    MiB = "MiB"
    """Binary mebibytes (2^20 bytes)."""
    KiB = "KiB"
    """Binary kibibytes (2^10 bytes)."""
    GB = "GB"
    """Decimal gigabytes (10^9 bytes)."""
    MB = "MB"
    """Decimal megabytes (10^6 bytes)."""
    bytes = "bytes"
    """Bytes (also bytes per parameter or per element)."""
    percent = "percent"
    """A percentage (typed with or without %)."""
    counted = "count"
    """A whole number of things (layers, checkpoints); accepted only exactly."""


class NumericMistake(BaseModel):
    """A number a ``--typed`` learner may type that is a known mistake, and what it means."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float = Field(description="The mistaken number, in the answer's ``unit``.")
    en: str = Field(min_length=1, description="The mistake, in English.")
    ur: str = Field(min_length=1, description="The mistake, in Urdu.")

    def text(self, lang: Lang) -> str:
        """The mistake in ``lang``."""
        return self.en if lang is Lang.en else self.ur


class Numeric(BaseModel):
    """The number a ``--typed`` learner types instead of picking an option."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float = Field(description="The correct number, in ``unit``.")
    unit: AnswerUnit = Field(description="Unit of ``value``.")
    tolerance: float = Field(
        default=0.02,
        ge=0.0,
        le=0.25,
        description="Relative tolerance accepted (0.02 = within 2%); 0 = exactly.",
    )
    mistakes: list[NumericMistake] = Field(
        default_factory=list,
        description="Optional: numbers that are known mistakes, diagnosed when typed (a "
        "computed question lists every mistake it knows, the options it did not show too).",
    )


ConceptSlug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN)]


class ConceptName(BaseModel):
    """What a concept tag is called in each language (the review line, ``--stats``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    en: str = Field(min_length=1, description="English name.")
    ur: str = Field(min_length=1, description="Urdu name.")

    def text(self, lang: Lang) -> str:
        """The name in ``lang``."""
        return self.en if lang is Lang.en else self.ur


class Question(BaseModel):
    """One multiple-choice question in both languages; ``correct`` indexes ``options``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=SLUG_PATTERN, description="Unique across all bank files.")
    concept: str = Field(pattern=SLUG_PATTERN, description="What to review when it is missed.")
    topic: Topic = Field(description="What the question is about.")
    difficulty: Difficulty = Field(description="easy, medium or hard.")
    correct: int = Field(ge=0, lt=NUM_OPTIONS, description="0-based index of the right option.")
    en: Text = Field(description="English text.")
    ur: Text = Field(description="Urdu text, options in the same order as English.")
    numeric: Numeric | None = Field(
        default=None, description="Optional: the number ``--typed`` asks for instead."
    )

    @model_validator(mode="after")
    def _feedback_in_both_languages(self) -> Question:
        if (self.en.feedback is None) != (self.ur.feedback is None):
            given = "en" if self.en.feedback is not None else "ur"
            raise ValueError(f"feedback: given in {given} only; give it in both languages")
        for text in (self.en, self.ur):
            if text.feedback is not None and text.feedback[self.correct].strip():
                raise ValueError(
                    f"feedback: entry {self.correct} is the correct option's; leave it empty "
                    "(the explanation says why it is right)"
                )
        return self

    def text(self, lang: Lang) -> Text:
        """The question in ``lang``."""
        return self.en if lang is Lang.en else self.ur

    def mistake(self, option: int, lang: Lang) -> str:
        """What picking ``option`` (file order) means, or "" when the file says nothing."""
        feedback = self.text(lang).feedback
        return feedback[option].strip() if feedback else ""


class BankFile(BaseModel):
    """One ``quiz/*.toml`` file: a list of ``[[questions]]`` and the names of concepts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concepts: dict[ConceptSlug, ConceptName] = Field(
        default_factory=dict, description="Names of concept tags, e.g. gb-vs-gib = {en, ur}."
    )
    questions: list[Question] = Field(min_length=1, description="The file's questions.")

    @model_validator(mode="after")
    def _unique_ids(self) -> BankFile:
        seen: set[str] = set()
        for q in self.questions:
            if q.id in seen:
                raise ValueError(f"duplicate question id {q.id!r}")
            seen.add(q.id)
        return self


def bank_dir() -> Path:
    """The folder of bank files: ``quiz/`` in a checkout, ``memcalc._quiz`` in a wheel."""
    return data_dir("quiz")


def bank_files(folder: Path | None = None) -> list[Path]:
    """The ``*.toml`` files of the bank, sorted by name."""
    return sorted((folder or bank_dir()).glob("*.toml"))


def _read_bank_file(path: Path) -> BankFile:
    data = read_data_file(path)
    try:
        return BankFile(**data)
    except ValidationError as e:
        raise MemcalcError(bank_error_message(path, data, e)) from None


def load_bank_file(path: Path) -> list[Question]:
    """The questions of one bank file; a MemcalcError naming the file and field otherwise."""
    return _read_bank_file(path).questions


@dataclass(frozen=True)
class Bank:
    """Every bank file together: the questions and the names of their concepts."""

    questions: list[Question]
    concepts: dict[str, ConceptName]

    def concept_name(self, concept: str, lang: Lang) -> str:
        """The concept's name in ``lang``; the tag itself when no file names it."""
        name = self.concepts.get(concept)
        return name.text(lang) if name else concept


def load_bank_data(folder: Path | None = None) -> Bank:
    """Every question and concept name of every bank file, in file order. Question ids and
    concept names are unique across files; a concept no file names is shown by its tag (the
    tests require a name for every concept of the shipped bank)."""
    files = bank_files(folder)
    if not files:
        raise MemcalcError(f"{folder or bank_dir()}: no quiz bank files (*.toml)")
    questions: list[Question] = []
    concepts: dict[str, ConceptName] = {}
    where: dict[str, Path] = {}
    named_in: dict[str, Path] = {}
    parsed = [(path, _read_bank_file(path)) for path in files]
    for path, bank_file in parsed:
        for slug, name in bank_file.concepts.items():
            if slug in named_in:
                raise MemcalcError(
                    f"{path}: concepts.{slug}: named twice (also in {named_in[slug]})"
                )
            named_in[slug] = path
            concepts[slug] = name
    for path, bank_file in parsed:
        for i, q in enumerate(bank_file.questions):
            if q.id in where:
                raise MemcalcError(
                    f"{path}: questions[{i}].id: duplicate id {q.id!r} (also in {where[q.id]})"
                )
            where[q.id] = path
            questions.append(q)
    return Bank(questions=questions, concepts=concepts)


def load_bank(folder: Path | None = None) -> list[Question]:
    """Every question of every bank file, in file order; ids must be unique across files."""
    return load_bank_data(folder).questions


def bank_error_message(path: Path, data: dict[str, Any], err: ValidationError) -> str:
    """One line for a bank file's validation errors: the file, then for each error the
    question (index and id) and the field, e.g.
    ``quiz/x.toml: questions[3] (id 'a-b').en.options: ...``."""
    parts = []
    raw = data.get("questions")
    for e in err.errors():
        loc = list(e["loc"])
        field = ".".join(str(x) for x in loc) or "file"
        if len(loc) >= 2 and loc[0] == "questions" and isinstance(loc[1], int):
            qid = ""
            if isinstance(raw, list) and loc[1] < len(raw) and isinstance(raw[loc[1]], dict):
                qid = f" (id {raw[loc[1]].get('id')!r})" if "id" in raw[loc[1]] else ""
            rest = "".join(f".{x}" for x in loc[2:])
            field = f"questions[{loc[1]}]{qid}{rest}"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "enum":
            msg = f"unknown value {e.get('input')!r}; {msg.lower()}"
        parts.append(f"{field}: {msg}")
    return f"{path}: " + "; ".join(parts)
