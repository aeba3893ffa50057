"""The recompute x offload strategies the planner (and the tutor) tries, and how they rank.

A strategy's cost is the time it adds to a step in the one step-time model (``steptime.py``):
recompute, pipeline bubble, exposed communication and offload transfers, the CPU optimizer
step -- the number ``estimate`` prints as "added time".
"""

from __future__ import annotations

from collections.abc import Iterable

from memcalc.estimate import Breakdown, Options
from memcalc.strategies.offload import Offload
from memcalc.strategies.recompute import Recompute, sqrt_k

RECOMPUTE_CANDIDATES = (Recompute.none, Recompute.selective, Recompute.every_k, Recompute.full)
"""Recompute strategies tried with a fixed plan, simplest first (the planner adds the
budget-optimal one, solved for the memory each configuration leaves)."""

SEARCHED_OFFLOADS: tuple[tuple[str, ...], ...] = (
    (),
    ("optimizer=cpu",),
    ("optimizer=nvme",),
    ("activations=cpu",),
    ("optimizer=cpu", "activations=cpu"),
    ("params=cpu",),
    ("params=cpu", "optimizer=nvme"),
    ("params=cpu", "activations=cpu"),
)
"""Offload choices the planner searches (``--offload`` syntax); params=cpu brings
optimizer=cpu unless optimizer=nvme is chosen (ZeRO-Infinity)."""

OFFLOADS: tuple[tuple[Offload, ...], ...] = tuple(
    tuple(Offload.parse(o) for o in choice) for choice in SEARCHED_OFFLOADS
)

OFFLOAD_CANDIDATES: tuple[tuple[str, ...], ...] = (
    (),
    ("optimizer=cpu",),
    ("activations=cpu",),
    ("optimizer=cpu", "activations=cpu"),
)
"""The offloads the tutor's one-GPU questions compare (the everyday ones)."""


def candidate_options(num_layers: int) -> list[Options]:
    """RECOMPUTE_CANDIDATES x OFFLOAD_CANDIDATES, no strategy first (the tutor's set)."""
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


def complexity(options: Options) -> int:
    """Moving parts of a strategy: a recompute plan and each offload count one."""
    return (options.recompute is not Recompute.none) + len(options.offload)


def added_seconds(b: Breakdown) -> float:
    """Time a strategy adds to the bare compute of a step (``StepTime.added_seconds``)."""
    assert b.time is not None
    return b.time.added_seconds


def cheapest_fit(candidates: Iterable[Breakdown]) -> Breakdown | None:
    """The candidate that fits with the least added time (ties: the simpler, then the lower
    peak, then the earlier); None when none fits."""
    fitting = [
        (added_seconds(b), complexity(b.options), b.peak_bytes, i, b)
        for i, b in enumerate(candidates)
        if b.fits
    ]
    return min(fitting, key=lambda t: t[:4])[4] if fitting else None
