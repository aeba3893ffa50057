"""What ``memcalc plan`` (and ``memcalc.plan``) is asked, read from its flag values."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.inputs import catalog, read_inputs, with_configs
from memcalc.plan.constraints import parse_constraints
from memcalc.plan.maximize import Maximize, Maximized, maximize
from memcalc.plan.search import PlanRequest, PlanResult, plan
from memcalc.profiles import DEFAULT_GPU, GpuProfile
from memcalc.spec.model import ModelSpec
from memcalc.strategies.options import Options
from memcalc.units import parse_count

CONSTRAINT_NAMES = tuple(f.name for f in catalog.PLAN_CONSTRAINTS)
"""The flags ``parse_constraints`` reads."""
PLAN_INPUTS = tuple(f for f in catalog.PLAN if f.name not in CONSTRAINT_NAMES)
"""The flags a ``--config`` file may set."""

MAX_GPUS = 65536
"""The most GPUs ``--max-gpus`` may ask for (the search grows with it)."""


def plan_request(
    values: Mapping[str, Any],
    given: frozenset[str],
    spec: ModelSpec | None = None,
    gpus: tuple[str | GpuProfile, ...] = (),
) -> tuple[PlanRequest, Maximize | None, tuple[str, ...]]:
    """The request the flag values make (of ``spec`` and on ``gpus`` when given, else of
    ``--model`` on ``--gpu``), validated; the lines to print on stderr."""
    # a --config file's layout is no limit on the search (its tp, zero, ... stay unused)
    values, given, from_files = with_configs(values, given, PLAN_INPUTS, "plan")
    # --tp, --zero, ... of plan are sets to search, not the setup's layout
    setup_values = {k: v for k, v in values.items() if k not in CONSTRAINT_NAMES}
    inputs = read_inputs(setup_values, given, gpus or tuple(values["gpus"] or (DEFAULT_GPU,)), spec)
    max_gpus = _bounded("--max-gpus", values["max_gpus"], 1, MAX_GPUS)
    top = _bounded("--top", values["top"], 1, 1000)
    _bounded("--microbatches", values["microbatches"], 1, 10**6)
    global_batch = _global_batch(values, inputs.setup.seq)
    what = Maximize(values["maximize"].lower()) if values["maximize"] else None
    if what is Maximize.batch and global_batch is not None:
        raise MemcalcError(
            "--maximize batch: the micro-batch is searched under --global-batch; drop one of them"
        )
    request = PlanRequest(
        inputs.spec,
        inputs.setup,
        inputs.profiles,
        max_gpus=max_gpus,
        global_batch=global_batch,
        options=Options(mfu=values["mfu"], headroom=inputs.headroom, alloc_conf=inputs.alloc_conf),
        top=top,
        constraints=parse_constraints(**{k: values[k] for k in CONSTRAINT_NAMES}),
    )
    return request, what, from_files + inputs.said


def run_plan(
    request: PlanRequest,
    what: Maximize | None,
    progress: Callable[[float], None] | None = None,
) -> tuple[PlanResult, list[Maximized]]:
    """The search, and ``--maximize`` on every GPU kind (those where anything fits)."""
    result = plan(request, progress)
    found = []
    if what is not None:
        for gpu in request.gpus:
            m = maximize(request, what, gpu, progress)
            if m is not None:
                found.append(m)
    return result, found


def _bounded(flag: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise MemcalcError(f"{flag}: must be between {low} and {high:,}, got {value}")
    return value


def _global_batch(values: Mapping[str, Any], seq: int) -> int | None:
    batch: int | None = values["global_batch"]
    tokens: str | None = values["global_tokens"]
    if batch is not None and tokens is not None:
        raise MemcalcError("--global-tokens: give --global-batch or --global-tokens, not both")
    if tokens is not None:
        count = parse_count(tokens, "--global-tokens")
        if count % seq:
            raise MemcalcError(
                f"--global-tokens: {count:,} is not a multiple of --seq ({seq}); "
                f"nearest: {max(1, round(count / seq)) * seq:,}"
            )
        batch = count // seq
    if batch is not None:
        _bounded("--global-batch", batch, 1, 10**6)
    return batch
