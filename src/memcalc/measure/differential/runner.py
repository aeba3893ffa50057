"""Run one drawn case: the estimate and the real step, by the code ``memcalc measure`` runs
(flag checks, ``training_setup``, ``estimate_for`` on the CPU's kernels, ``runner.measure``
on the HF model, ``compare``), plus PEFT's own answer (``peft_probe``) and, for full
fine-tuning, optionally ``memcalc trace``'s estimate of the same step.

Each stage that refuses is recorded with its one-line reason, so a summary can tell a
configuration memcalc refuses from one PEFT refuses from one ``measure`` cannot run."""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.measure.differential.cases import Case
from memcalc.measure.differential.peft_probe import ask_peft

COMPONENTS = ("parameters", "gradients", "optimizer states", "stored activations", "peak")
STATES = COMPONENTS[:3]
GPU = "h100-sxm-80gb"
"""The profile the estimate is asked for (the CPU comparison does not depend on it)."""


@dataclass
class Outcome:
    """What happened to one case. ``status``: run, not-measured (``measure``'s own flag
    checks refuse: fp8, budget, ...), memcalc-refused (the estimate raised), peft-refused
    (PEFT refused inside the measured run), measure-refused (the measured run refused for
    another reason), or error (an exception that is not a one-line refusal)."""

    case: Case
    status: str = "run"
    reason: str = ""
    estimate: dict[str, int] = field(default_factory=dict)
    measured: dict[str, int] = field(default_factory=dict)
    checked: dict[str, bool] = field(default_factory=dict)
    trace: dict[str, int] = field(default_factory=dict)
    trace_reason: str = ""
    memcalc_trainable: int | None = None
    peft: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def record(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "case"}
        return {"case": self.case.record(), **out}


def run_case(case: Case, *, trace: bool = False) -> Outcome:
    """The outcome of ``case`` (never raises but for KeyboardInterrupt)."""
    start = time.perf_counter()
    out = Outcome(case)
    try:
        _run(case, out, trace)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # recorded, not raised: one bad case must not end a long run
        out.status = "error"
        out.reason = f"{type(e).__name__}: {_one_line(e)} [{_where(e)}]"
    out.seconds = round(time.perf_counter() - start, 3)
    return out


def _run(case: Case, out: Outcome, trace: bool) -> None:
    from memcalc.measure.build import Impl
    from memcalc.measure.compare import compare, estimate_for
    from memcalc.measure.runner import measure
    from memcalc.params import setup_param_counts
    from memcalc.profiles import load_profile

    if case.lora is not None:
        answer = ask_peft(case)
        out.peft = answer.__dict__
    try:
        spec, setup, options = _inputs(case)
    except MemcalcError as e:
        out.status, out.reason = _refusal_kind(str(e)), _one_line(e)
        return
    try:
        if case.lora is not None:
            out.memcalc_trainable = setup_param_counts(spec, setup).trainable
        b = estimate_for(spec, setup, load_profile(GPU), options, "cpu")
    except MemcalcError as e:
        out.status, out.reason = "memcalc-refused", _one_line(e)
        return
    try:
        m = measure(
            spec,
            setup,
            impl=Impl.hf,
            recompute=options.recompute,
            every=options.every,
            device="cpu",
        )
    except MemcalcError as e:
        text = _one_line(e)
        out.status = "peft-refused" if "PEFT refuses" in text else "measure-refused"
        out.reason = text
        return
    for row in compare(b, m):
        name = "peak" if row.component == "peak of the step" else row.component
        if name in COMPONENTS:
            out.estimate[name] = row.estimate_bytes
            out.measured[name] = row.measured_bytes
            out.checked[name] = row.checked
    if trace and case.lora is None:
        _trace(case, setup, options, out)


def _inputs(case: Case) -> tuple[Any, Any, Any]:
    """(spec, setup, options) as ``memcalc measure`` makes them from the case's flags."""
    from memcalc.estimate import Options
    from memcalc.measure.preflight import check_flags
    from memcalc.spec.finetune import Quantize
    from memcalc.spec.loaders import load_model, training_setup
    from memcalc.spec.training import Attention, OptimizerKind, Precision
    from memcalc.strategies.recompute import Recompute

    spec = load_model(case.model)
    recompute = Recompute(case.recompute)
    check_flags(
        precision=Precision(case.precision),
        recompute=recompute,
        every=case.every,
        tolerance=0.03,
        seed=0,
        num_layers=spec.num_layers,
        dropout=case.dropout,
    )
    fields: dict[str, Any] = {}
    if case.lora is not None:
        lora = case.lora
        fields = {
            "quantize": Quantize(lora.quantize),
            "kbit_prep": lora.kbit_prep,
            "input_grads": lora.input_grads,
            "lora": {
                "rank": lora.rank,
                "alpha": lora.alpha,
                "targets": lora.targets,
                "dropout": lora.dropout,
                "train_embeddings": lora.train_embeddings,
                "modules_to_save": lora.modules_to_save,
            },
        }
    setup = training_setup(
        batch=case.batch,
        seq=case.seq,
        precision=Precision(case.precision),
        optimizer=OptimizerKind(case.optimizer),
        attention=Attention(case.attention),
        dropout=case.dropout,
        **fields,
    )
    return spec, setup, Options(recompute=recompute, every=case.every)


def _refusal_kind(text: str) -> str:
    """measure's own flag checks (precision, recompute it cannot run) or a bad setup."""
    return "not-measured" if "not measured" in text else "memcalc-refused"


def _trace(case: Case, setup: Any, options: Any, out: Outcome) -> None:
    """``memcalc trace``'s estimate of the same step (its op graph traced under FakeTensorMode
    from the HF model), as ``measure/trace_command.py`` computes it."""
    from memcalc.estimate import estimate_graph
    from memcalc.measure.build import Impl
    from memcalc.measure.trace import resolve_target, trace_module
    from memcalc.profiles import load_profile

    try:
        resolved = resolve_target(case.model, setup, Impl.hf)
        traced = trace_module(
            resolved.build, setup, name=resolved.name, vocab_size=resolved.vocab_size
        )
        b = estimate_graph(
            traced.name,
            traced.graph,
            traced.counts,
            setup.replace(dropout=None),
            load_profile(GPU),
            options,
            device="cpu",  # as measure's own estimate: CPU kernels (Adam's step on the device)
        )
    except Exception as e:
        out.trace_reason = f"{type(e).__name__}: {_one_line(e)}"
        return
    out.trace = {
        "parameters": b.parameter_bytes,
        "gradients": b.gradient_bytes,
        "optimizer states": b.optimizer_bytes,
        "stored activations": b.activation_bytes,
        "peak": b.peak.total_bytes,
    }


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _where(e: BaseException) -> str:
    """file:line of the innermost frame, to group errors by where they are raised."""
    tb = traceback.extract_tb(e.__traceback__)
    if not tb:
        return "?"
    frame = tb[-1]
    return f"{frame.filename.split('site-packages/')[-1].split('/src/')[-1]}:{frame.lineno}"
