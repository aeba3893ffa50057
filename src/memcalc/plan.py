"""Search strategies (recompute x offload x ZeRO sharding) for the cheapest one that fits.

"Cheapest" = the least time added to a step: recompute FLOPs at the assumed MFU plus offload
transfer time, counted in full (no overlap assumed), ties broken by the lower peak and then by
the simpler strategy.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from memcalc.estimate import Breakdown, Options, estimate
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.offload import Offload
from memcalc.strategies.recompute import Recompute, sqrt_k

RECOMPUTE_CANDIDATES = (Recompute.none, Recompute.selective, Recompute.every_k, Recompute.full)
"""Recompute strategies tried, simplest first."""

OFFLOAD_CANDIDATES: tuple[tuple[str, ...], ...] = (
    (),
    ("optimizer=cpu",),
    ("activations=cpu",),
    ("optimizer=cpu", "activations=cpu"),
)
"""Offload choices tried with each recompute strategy (``--offload`` syntax)."""


def candidate_options(num_layers: int) -> list[Options]:
    """RECOMPUTE x OFFLOAD, no strategy first."""
    k = sqrt_k(num_layers)
    return [
        Options(
            recompute=r,
            every=k if r is Recompute.every_k else None,
            offload=tuple(Offload.parse(o) for o in offloads),
        )
        for r in RECOMPUTE_CANDIDATES
        for offloads in OFFLOAD_CANDIDATES
    ]


def added_seconds(b: Breakdown) -> float:
    """Time a strategy adds per step: recompute FLOPs plus offload transfers."""
    return b.extra_seconds + b.transfer_seconds


def cheapest_fit(candidates: Iterable[Breakdown]) -> Breakdown | None:
    """The candidate that fits with the least added time (ties: lower peak, then the earlier,
    simpler candidate); None when none fits."""
    fitting = [(added_seconds(b), b.peak_bytes, i, b) for i, b in enumerate(candidates) if b.fits]
    return min(fitting, key=lambda t: t[:3])[3] if fitting else None


@dataclass(frozen=True)
class PlanRow:
    """The cheapest fitting strategy for one data-parallel size and ZeRO stage."""

    gpus: int
    zero: int
    best: Breakdown | None
    """None when nothing fits."""


@dataclass(frozen=True)
class PlanResult:
    """The rows of a plan and what the search cost."""

    rows: list[PlanRow]
    configurations_evaluated: int
    """Configurations whose memory and time were computed."""
    search_seconds: float


def plan(
    spec: ModelSpec, setup: TrainingSetup, gpu: GpuProfile, gpu_counts: Iterable[int]
) -> PlanResult:
    """For each GPU count and ZeRO stage, the cheapest fitting strategy (fewest GPUs first)."""
    start = time.perf_counter()
    rows = []
    evaluated = 0
    options = candidate_options(spec.num_layers)
    for n in gpu_counts:
        for stage in (1, 2, 3) if n > 1 else (0,):  # ZeRO-0 on n GPUs = 1 GPU
            sharded = setup.replace(parallel=setup.parallel.replace(dp=n, zero=stage))
            best = cheapest_fit(estimate(spec, sharded, gpu, o) for o in options)
            evaluated += len(options)
            rows.append(PlanRow(n, stage, best))
    return PlanResult(rows, evaluated, time.perf_counter() - start)
