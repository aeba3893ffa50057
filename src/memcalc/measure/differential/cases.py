"""One drawn configuration (``Case``): the flags a user types, and the command line that
reproduces it with ``memcalc measure``."""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

TINY_DIR = "tests/data/hf/tiny"
"""Each family's tiny HF config.json (64-wide, 2 layers, vocabulary 256)."""


@dataclass(frozen=True)
class LoraDraw:
    """The fine-tuning flags of a LoRA / QLoRA case (``--lora-*``, ``--quantize``, ...)."""

    rank: int
    alpha: float
    targets_kind: str
    """default, all-linear, mlp, attention or explicit: how ``targets`` was chosen."""
    targets: tuple[str, ...]
    """What --lora-targets gets (empty: the flag is left out, PEFT's default)."""
    dropout: float
    quantize: str
    kbit_prep: bool | None
    input_grads: bool | None
    modules_to_save: tuple[str, ...]
    train_embeddings: bool


@dataclass(frozen=True)
class Case:
    """One configuration: model, step, strategy, and (LoRA) the fine-tuning flags."""

    index: int
    family: str
    batch: int
    seq: int
    precision: str
    attention: str
    optimizer: str
    recompute: str
    every: int | None
    dropout: float | None
    lora: LoraDraw | None = None
    model: str = field(default="")

    def __post_init__(self) -> None:
        if not self.model:
            object.__setattr__(self, "model", f"{TINY_DIR}/{self.family}.json")

    @property
    def kind(self) -> str:
        return "full" if self.lora is None else "lora"

    def argv(self) -> list[str]:
        """``memcalc measure`` arguments that run this case."""
        args = ["--model", self.model, "--framework", "hf", "--device", "cpu"]
        args += ["--batch", str(self.batch), "--seq", str(self.seq)]
        args += ["--precision", self.precision, "--attention", self.attention]
        args += ["--optimizer", self.optimizer, "--recompute", self.recompute]
        if self.every is not None:
            args += ["--every", str(self.every)]
        if self.dropout is not None:
            args += ["--dropout", str(self.dropout)]
        if self.lora is not None:
            args += _lora_argv(self.lora)
        return args

    def command(self) -> str:
        """The reproducing command line (run from the repository root)."""
        return "memcalc measure " + shlex.join(self.argv())

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind, "command": self.command()}


def _lora_argv(lora: LoraDraw) -> list[str]:
    args = ["--lora-rank", str(lora.rank), "--lora-alpha", str(lora.alpha)]
    if lora.targets:
        args += ["--lora-targets", ",".join(lora.targets)]
    if lora.dropout:
        args += ["--lora-dropout", str(lora.dropout)]
    if lora.quantize != "none":
        args += ["--quantize", lora.quantize]
    for flag, value in (("kbit-prep", lora.kbit_prep), ("input-grads", lora.input_grads)):
        if value is not None:
            args.append(f"--{flag}" if value else f"--no-{flag}")
    if lora.modules_to_save:
        args += ["--modules-to-save", ",".join(lora.modules_to_save)]
    if lora.train_embeddings:
        args.append("--train-embeddings")
    return args


def case_from_record(data: dict[str, Any]) -> Case:
    """The Case a ``record()`` describes (for re-running a case from a JSON report)."""
    fields = {k: v for k, v in data.items() if k not in ("kind", "command")}
    lora = fields.pop("lora")
    if lora is not None:
        lora = LoraDraw(
            **{
                **lora,
                "targets": tuple(lora["targets"]),
                "modules_to_save": tuple(lora["modules_to_save"]),
            }
        )
    return Case(**fields, lora=lora)
