"""``plan --maximize batch|seq``: the largest micro-batch (or sequence length) that fits on
some configuration within ``--max-gpus``, by doubling then bisection (memory only grows with
either), and the fewest-GPU, fastest configuration that runs it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from memcalc.plan.search import PlanRequest, Progress, Row, any_fit, search_kind
from memcalc.profiles import GpuProfile
from memcalc.spec.training import MAX_TOKENS

SEQ_STEP = 128
"""Sequence lengths tried are multiples of this (every cp in the search divides them)."""


class Maximize(str, Enum):
    """What ``--maximize`` grows."""

    batch = "batch"
    """The micro-batch size (sequences per GPU per micro-batch)."""
    seq = "seq"
    """The sequence length, in multiples of 128 tokens."""


@dataclass(frozen=True)
class Maximized:
    """The largest value that fits on one GPU kind, and how."""

    what: Maximize
    value: int
    row: Row
    gpu: GpuProfile


def _with(request: PlanRequest, what: Maximize, steps: int) -> PlanRequest:
    value = steps if what is Maximize.batch else steps * SEQ_STEP
    field = "batch" if what is Maximize.batch else "seq"
    return replace(request, setup=request.setup.replace(**{field: value}))


def _limit(request: PlanRequest, what: Maximize) -> int:
    """The most steps the setup allows (batch x seq within MAX_TOKENS)."""
    s = request.setup
    return MAX_TOKENS // s.seq if what is Maximize.batch else MAX_TOKENS // (s.batch * SEQ_STEP)


def maximize(
    request: PlanRequest, what: Maximize, gpu: GpuProfile, progress: Progress | None = None
) -> Maximized | None:
    """The largest ``what`` that fits on ``gpu`` (None: not even the smallest fits)."""
    limit = _limit(request, what)
    if limit < 1 or any_fit(_with(request, what, 1), gpu) is None:
        return None
    lo, hi = 1, 2
    while hi <= limit and any_fit(_with(request, what, hi), gpu) is not None:
        lo, hi = hi, hi * 2
        if progress:
            progress(min(0.5, hi.bit_length() / 40))
    hi = min(hi, limit + 1)
    while hi - lo > 1:  # lo fits, hi does not (or is past the limit)
        mid = (lo + hi) // 2
        if any_fit(_with(request, what, mid), gpu) is not None:
            lo = mid
        else:
            hi = mid
    best = _with(request, what, lo)
    result = search_kind(replace(best, top=1), gpu, progress)
    if result.fewest is None:
        return None
    value = lo if what is Maximize.batch else lo * SEQ_STEP
    return Maximized(what, value, result.fewest, gpu)
