"""``memcalc trace``'s work: trace a model under FakeTensorMode into the op graph and render
what ``memcalc estimate`` prints for it. The command itself is in ``memcalc/cli/trace.py``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import Enum
from typing import Any

from memcalc.report import Format
from memcalc.spec.training import Attention, GradDType, OptimizerKind, Precision
from memcalc.strategies.recompute import Recompute
from memcalc.units import Unit


class ImplChoice(str, Enum):
    """Which implementation a preset or spec file is built as (see measure/build.py)."""

    ours = "ours"
    """memcalc's reference model (measure/reference_model.py)."""
    hf = "hf"
    """Hugging Face transformers (needs transformers installed)."""


def run_trace(target: str, *, quiet: bool = False, **options: Any) -> str:
    """The estimate of ``target`` as traced, rendered as ``memcalc estimate`` renders it; a
    progress bar on stderr (``measure/progress.py``) unless ``quiet``. ``options``: the
    keywords of ``_run_trace``."""
    from memcalc.measure.progress import Progress, mode_of

    with Progress("memcalc trace", total=TRACE_PHASES, mode=mode_of(quiet)) as progress:
        return _run_trace(target, progress, **options)


TRACE_PHASES = 6
"""Phases the progress bar counts: loading the target, building the model, forward, op graph,
backward, estimating."""


def _run_trace(
    target: str,
    progress: Callable[[str], None],
    *,
    input_shape: str,
    gpu: str,
    precision: Precision,
    grad_dtype: GradDType | None,
    optimizer: OptimizerKind,
    foreach: bool,
    attention: Attention | None,
    impl: ImplChoice | None,
    dropout: float | None,
    layout: dict[str, object],
    recompute: Recompute | None,
    every: int | None,
    budget: str | None,
    offload: list[str],
    mfu: float,
    fmt: Format,
    unit: Unit,
    width: int | None = None,
) -> str:
    from memcalc.estimate import Breakdown, Options, estimate_graph
    from memcalc.measure.build import Impl
    from memcalc.measure.trace import describe, parse_input_shape, resolve_target, trace_module
    from memcalc.profiles import load_profile
    from memcalc.report import render_estimate
    from memcalc.spec.loaders import training_setup
    from memcalc.strategies.selection import chosen_options

    batch, seq = parse_input_shape(input_shape)
    profile = load_profile(gpu)
    setup = training_setup(
        batch=batch,
        seq=seq,
        precision=precision,
        grad_dtype=grad_dtype,
        optimizer=optimizer,
        optimizer_foreach=foreach,
        attention=attention or Attention.sdpa,
        dropout=dropout,
        **layout,
    )
    options = chosen_options(recompute, every, budget, offload, mfu)

    progress("loading the target")
    resolved = resolve_target(target, setup, Impl((impl or ImplChoice.ours).value))
    notes = [
        f"activations traced from {target} at {batch}x{seq} under FakeTensorMode "
        "(CPU kernels, except dropout masks as bool and SDPA with dropout as flash, as on a GPU)"
    ]
    if resolved.max_positions is not None and seq > resolved.max_positions:
        _warn(
            f"--input-shape: sequence {seq} is over {resolved.name}'s max_position_embeddings "
            f"({resolved.max_positions}): it was not trained on positions past them"
        )
    if resolved.kind == "module":
        setup = setup.replace(attention=Attention.sdpa)
        notes.append("attention as the module computes it (the kernel above is not used)")
    for flag, given, kinds in (
        ("--attention", attention is not None, ("spec", "hf-config")),
        ("--dropout", dropout is not None, ("spec", "hf-config")),
        ("--framework", impl is not None, ("spec",)),
    ):
        if given and resolved.kind not in kinds:
            _warn(f"{flag} has no effect on a {resolved.kind} target (the model runs as built)")
    if precision is Precision.fp8_mixed:
        _warn("--precision fp8-mixed: traced in bf16; fp8 copies of linear inputs are not traced")
    trace = trace_module(
        resolved.build,
        setup,
        name=resolved.name,
        vocab_size=resolved.vocab_size,
        progress=progress,
    )
    progress("estimating")
    print(describe(trace), file=sys.stderr)
    for note in trace.notes:
        _warn(note)

    notes.append(
        "no separate LM head: tied to the embedding, counted once"
        if trace.tied
        else "untied embedding and LM head"
    )
    plain = setup.replace(dropout=None)  # already applied to the model

    def run(options: Options) -> Breakdown:
        return estimate_graph(
            trace.name, trace.graph, trace.counts, plain, profile, options, notes=tuple(notes)
        )

    return render_estimate(run, trace.graph.num_layers, setup, options, fmt, unit, width=width)


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)
