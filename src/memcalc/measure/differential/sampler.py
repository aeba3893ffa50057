"""A seeded sampler of fine-tuning configurations: every flag the estimate accepts for LoRA /
QLoRA and for full fine-tuning, each value drawn uniformly (``random.Random(seed)``: the same
seed draws the same cases on every machine and Python version that keeps ``random``'s
documented generator).

The value lists are read from memcalc's own enums where there is one (precision, optimizer,
attention, recompute, quantize), so a value added to an enum is drawn from the next run on.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from memcalc.measure.differential.cases import TINY_DIR, Case, LoraDraw
from memcalc.measure.differential.linears import Linears, linears_of
from memcalc.spec.finetune import Quantize
from memcalc.spec.model import Family
from memcalc.spec.training import Attention, OptimizerKind, Precision
from memcalc.strategies.recompute import Recompute

FAMILIES = tuple(f.value for f in Family)
"""Every family memcalc supports; each has ``tests/data/hf/tiny/<family>.json``."""
PRECISIONS = tuple(p.value for p in Precision)
OPTIMIZERS = tuple(o.value for o in OptimizerKind)
ATTENTIONS = tuple(a.value for a in Attention)
RECOMPUTES = tuple(r.value for r in Recompute)
NOT_MEASURED = {
    "precision": {
        "fp8-mixed": "no fp8 matmuls on a CPU (measure/preflight.py MEASURED_PRECISIONS)",
        "fsdp-bf16": "FSDP2's policy needs --nproc 2 or more (the estimate refuses one rank)",
    },
    "optimizer": {
        "adamw-8bit": "measure/runner.py _optimizer runs adamw, adam, sgd, sgd-momentum",
        "adafactor": "measure/runner.py _optimizer runs adamw, adam, sgd, sgd-momentum",
        "lion": "measure/runner.py _optimizer runs adamw, adam, sgd, sgd-momentum",
    },
    "recompute": {"budget": "measure/strategies.py apply_strategy refuses it"},
}
"""Values the estimate accepts that one CPU ``measure`` cannot run: drawn only with
``every_value=True`` (then each is a one-line refusal, which the summary counts)."""
QUANTIZE = tuple(q.value for q in Quantize)
BATCHES = (1, 2, 3)
SEQS = (8, 16, 24, 32)
"""Small enough that a case takes about a second on one core (the tiny configs allow 64)."""
MODEL_DROPOUT = (None, 0.0, 0.1)
"""--dropout: left out (the config's own), 0, or 0.1 on every dropout the family has."""
RANKS = (1, 4, 8, 16, 64)
ALPHAS = (8.0, 16.0, 32.0)
LORA_DROPOUT = (0.0, 0.05, 0.1)
TARGET_KINDS = ("default", "all-linear", "mlp", "attention", "explicit")
TRISTATE = (None, True, False)
"""--kbit-prep / --input-grads: left out, --X, --no-X."""
SAVE_KINDS = ("none", "head", "embedding")
"""--modules-to-save: left out, the output head's module name, the input embedding's."""


def tiny_config(family: str) -> str:
    path = f"{TINY_DIR}/{family}.json"
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no tiny config for family {family}")
    return path


def draw_cases(n_lora: int, n_full: int, seed: int, *, every_value: bool = False) -> list[Case]:
    """``n_lora`` LoRA / QLoRA cases then ``n_full`` full fine-tuning cases, from ``seed``;
    over the values a CPU measure runs unless ``every_value``."""
    rng = random.Random(seed)
    values = {
        name: _measured(name, every_value) for name in ("precision", "optimizer", "recompute")
    }
    cases = [_draw(rng, i, values, lora=True) for i in range(n_lora)]
    cases += [_draw(rng, n_lora + i, values, lora=False) for i in range(n_full)]
    return cases


def _measured(name: str, every_value: bool) -> tuple[str, ...]:
    every = {"precision": PRECISIONS, "optimizer": OPTIMIZERS, "recompute": RECOMPUTES}[name]
    if every_value:
        return every
    return tuple(v for v in every if v not in NOT_MEASURED[name])


def _draw(
    rng: random.Random, index: int, values: dict[str, tuple[str, ...]], *, lora: bool
) -> Case:
    family = rng.choice(FAMILIES)
    recompute = rng.choice(values["recompute"])
    takes_k = recompute in (Recompute.every_k.value, Recompute.block.value)
    every = rng.choice((None, 1, 2)) if takes_k else None
    return Case(
        index=index,
        family=family,
        batch=rng.choice(BATCHES),
        seq=rng.choice(SEQS),
        precision=rng.choice(values["precision"]),
        attention=rng.choice(ATTENTIONS),
        optimizer=rng.choice(values["optimizer"]),
        recompute=recompute,
        every=every,
        dropout=rng.choice(MODEL_DROPOUT),
        lora=_draw_lora(rng, linears_of(tiny_config(family))) if lora else None,
    )


def _draw_lora(rng: random.Random, linears: Linears) -> LoraDraw:
    kind = rng.choice(
        [k for k in TARGET_KINDS if k not in ("mlp", "attention") or _targets(k, linears)]
    )
    save = rng.choice(SAVE_KINDS)
    return LoraDraw(
        rank=rng.choice(RANKS),
        alpha=rng.choice(ALPHAS),
        targets_kind=kind,
        targets=_targets(kind, linears, rng),
        dropout=rng.choice(LORA_DROPOUT),
        quantize=rng.choice(QUANTIZE),
        kbit_prep=rng.choice(TRISTATE),
        input_grads=rng.choice(TRISTATE),
        modules_to_save={"none": (), "head": (linears.head,), "embedding": (linears.embedding,)}[
            save
        ],
        train_embeddings=rng.choice((False, True)),
    )


def _targets(kind: str, linears: Linears, rng: random.Random | None = None) -> tuple[str, ...]:
    """--lora-targets for ``kind`` (explicit: up to 3 names drawn with ``rng``; empty: PEFT's
    default, or a side the model has no linear on -- Mixtral's experts are not nn.Linear)."""
    if kind == "default":
        return ()
    if kind == "all-linear":
        return ("all-linear",)
    if kind == "mlp":
        return linears.mlp
    if kind == "attention":
        return linears.attention
    names = linears.every
    assert rng is not None
    return tuple(sorted(rng.sample(names, rng.randint(1, min(3, len(names))))))


def flag_values(cases: Sequence[Case]) -> dict[str, set[Any]]:
    """Which value of each flag the cases drew (the sampler's coverage)."""
    seen: dict[str, set[Any]] = {}
    for case in cases:
        for name, value in _flags(case):
            seen.setdefault(name, set()).add(value)
    return seen


def _flags(case: Case) -> Iterator[tuple[str, Any]]:
    for name in ("family", "batch", "seq", "precision", "attention", "optimizer", "recompute"):
        yield name, getattr(case, name)
    yield "dropout", case.dropout
    if case.lora is None:
        return
    lora = case.lora
    yield "rank", lora.rank
    yield "alpha", lora.alpha
    yield "targets_kind", lora.targets_kind
    yield "lora_dropout", lora.dropout
    yield "quantize", lora.quantize
    yield "kbit_prep", lora.kbit_prep
    yield "input_grads", lora.input_grads
    yield "modules_to_save", bool(lora.modules_to_save)
    yield "train_embeddings", lora.train_embeddings
