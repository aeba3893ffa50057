"""Branch and bound over GPU kind x layout x ZeRO stage x recompute x offload.

Every configuration of the space (``space.py`` x ``strategies.py``) is decided one of three
ways, and counted:
- rejected: its memory lower bound (``bounds.py``) is over the usable GPU memory, so it cannot
  fit;
- skipped: its time lower bound shows it cannot beat a configuration already estimated in
  full that answers the same question (the fastest with the same layout, the fastest at the
  same GPU count, the ``top`` fastest layouts);
- estimated: ``estimate`` ran on it (the memory, time and fit reported are that estimate's).

Nothing that fits is dropped unless a configuration estimated in full is at least as fast.
Ranking is by step time per token (with a fixed global batch, by step time); ties go to the
lower peak.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from memcalc.errors import MemcalcError
from memcalc.estimate import Breakdown, Options, estimate
from memcalc.plan.bounds import Bounds, StageFacts, layout_setup
from memcalc.plan.constraints import IMPRACTICAL_FACTOR, NO_CONSTRAINTS, Constraints
from memcalc.plan.space import Candidate, layouts
from memcalc.plan.strategies import OFFLOADS, complexity
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import Attention, OptimizerKind, TrainingSetup
from memcalc.strategies.offload import Offload, OffloadWhat, OffloadWhere
from memcalc.strategies.recompute import Recompute

Progress = Callable[[float], None]
"""Called with the fraction of the search done (0..1)."""

BUDGET_RETRIES = 3
"""Times a budget plan is re-solved with a smaller budget when its estimate overflows by a
transient the bound does not see."""


@dataclass(frozen=True)
class PlanRequest:
    """What ``memcalc plan`` is asked."""

    spec: ModelSpec
    setup: TrainingSetup
    """Fixed choices (precision, optimizer, attention, LoRA, micro-batch without a global
    batch); the layout is searched."""
    gpus: tuple[GpuProfile, ...]
    max_gpus: int = 64
    global_batch: int | None = None
    """Sequences per optimizer step over all replicas; None: the setup's micro-batch and
    accumulation on every replica."""
    options: Options = Options()
    """MFU and headroom (the strategy fields are searched)."""
    top: int = 10
    """Rows of the ranked table."""
    constraints: Constraints = NO_CONSTRAINTS
    """Fixed degrees, allowed strategies, step-time and throughput limits."""


class Config(NamedTuple):
    """One configuration of the search, with its bounds."""

    seconds_per_token_bound: float
    memory_bound: int
    layout: Candidate
    zero: int
    offload: int
    """Index into ``strategies.OFFLOADS``."""
    recompute: Recompute


@dataclass(frozen=True)
class Row:
    """A configuration estimated in full."""

    layout: Candidate
    breakdown: Breakdown

    @property
    def gpus(self) -> int:
        return self.layout.world_size

    @property
    def step_seconds(self) -> float:
        assert self.breakdown.time is not None
        return self.breakdown.time.total_seconds

    @property
    def tokens_per_step(self) -> int:
        return self.layout.sequences * self.breakdown.setup.seq

    @property
    def seconds_per_token(self) -> float:
        return self.step_seconds / self.tokens_per_step

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.tokens_per_step / self.step_seconds / self.gpus

    @property
    def rank(self) -> tuple[float, int, int]:
        """Faster first; on a tie the simpler strategy, then the lower peak."""
        return (
            self.seconds_per_token,
            complexity(self.breakdown.options),
            self.breakdown.peak_bytes,
        )


@dataclass
class Tally:
    """How the configurations were decided."""

    configurations: int = 0
    rejected: int = 0
    estimated: int = 0

    @property
    def skipped(self) -> int:
        return self.configurations - self.rejected - self.estimated


@dataclass
class KindResult:
    """The answer for one GPU kind."""

    gpu: GpuProfile
    fewest: Row | None
    """The fastest configuration at the fewest GPUs that fit (None: nothing fits)."""
    rows: list[Row]
    """The ``top`` fastest layouts, fastest first."""
    closest: list[Breakdown] = field(default_factory=list)
    """Per world size below the fewest that fit: the configuration with the least memory."""
    world_sizes: list[int] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    impractical: Row | None = None
    """The fastest configuration at fewer GPUs than ``fewest`` that fits but is impractical
    (its tokens/s per GPU under 1/IMPRACTICAL_FACTOR of ``best_rate``); None: none."""
    best_rate: float = 0.0
    """The best tokens/s per GPU of any configuration estimated in full."""


def search_kind(
    request: PlanRequest, gpu: GpuProfile, progress: Progress | None = None
) -> KindResult:
    """Search one GPU kind."""
    return _Search(request, gpu, progress).run()


def any_fit(request: PlanRequest, gpu: GpuProfile) -> Row | None:
    """A configuration of ``gpu`` that fits within ``request.max_gpus``, or None."""
    return _Search(request, gpu, None).any_fit()


class _Search:
    def __init__(self, request: PlanRequest, gpu: GpuProfile, progress: Progress | None) -> None:
        self.request, self.gpu, self.progress = request, gpu, progress
        self.bounds = Bounds(request.spec, request.setup, gpu, request.options)
        self.usable = self.bounds.usable
        self.tally = Tally()
        self.done: dict[tuple[object, ...], Row | None] = {}
        self.setups: dict[tuple[Candidate, int], TrainingSetup] = {}
        """``layout_setup`` per (layout, ZeRO stage): the configurations of one layout and
        stage share it."""
        self.closest: dict[int, Config] = {}
        self.constraints = request.constraints
        self.offloads = [
            i
            for i, o in enumerate(OFFLOADS)
            if self._offload_applies(o) and self.constraints.offload_allowed(o)
        ]

    def _offload_applies(self, choice: tuple[Offload, ...]) -> bool:
        """NVMe only where the profile has it; optimizer offload only when the optimizer
        holds states (not plain SGD in one precision)."""
        setup = self.request.setup
        states = setup.optimizer is not OptimizerKind.sgd or setup.precision.is_mixed
        nvme = self.gpu.nvme_bytes_per_s > 0 and self.gpu.nvme_bytes_per_gpu > 0
        return all(
            (o.where is not OffloadWhere.nvme or nvme)
            and (o.what is not OffloadWhat.optimizer or states)
            for o in choice
        )

    # -- enumeration -----------------------------------------------------------------------

    def run(self) -> KindResult:
        shapes, passing = self._enumerate()
        passing.sort(key=lambda c: (c.seconds_per_token_bound, c.memory_bound))
        rows = self._fastest(passing)
        fewest, impractical = self._practical_fewest(passing)
        rows = [r for r in rows if self._practical(r)]
        if self.progress:
            self.progress(1.0)
        first = impractical or fewest
        limit = first.gpus if first is not None else math.inf
        closest = [
            row.breakdown
            for n, c in sorted(self.closest.items())
            if n < limit and (row := self._evaluate(c, count=False)) is not None
        ]
        return KindResult(
            gpu=self.gpu,
            fewest=fewest,
            rows=rows,
            closest=closest,
            world_sizes=sorted({s.world_size for s in shapes}),
            tally=self.tally,
            impractical=impractical,
            best_rate=self._best_rate(),
        )

    def _best_rate(self) -> float:
        """The best tokens/s per GPU of the rows estimated so far that answer the request."""
        return max(
            (r.tokens_per_second_per_gpu for r in self.done.values() if r and self._answers(r)),
            default=0.0,
        )

    def _practical(self, row: Row) -> bool:
        if self.constraints.show_impractical:
            return True
        return row.tokens_per_second_per_gpu * IMPRACTICAL_FACTOR >= self._best_rate()

    def _answers(self, row: Row) -> bool:
        """The row fits and meets the request's step-time and throughput limits."""
        return row.breakdown.fits and self.constraints.fast_enough(
            row.step_seconds, row.tokens_per_step, row.gpus
        )

    def _practical_fewest(self, passing: list[Config]) -> tuple[Row | None, Row | None]:
        """The fastest answer at the fewest GPUs whose rate is practical, and the impractical
        one at fewer GPUs it passed over (None: none). The best rate only grows as more rows
        are estimated, so an answer is re-checked until it stays practical."""
        skipped: Row | None = None
        above = 0
        while True:
            floor = (
                0.0
                if self.constraints.show_impractical or skipped is None
                else (self._best_rate() / IMPRACTICAL_FACTOR)
            )
            row = self._fewest(passing, above, floor)
            if row is None or self._practical(row):
                return row, skipped
            skipped = skipped or row
            above = row.gpus

    def any_fit(self) -> Row | None:
        """Some fitting configuration (the least memory bound first), or None: nothing fits."""
        _, passing = self._enumerate()
        passing.sort(key=lambda c: (c.memory_bound, c.seconds_per_token_bound))
        for c in passing:
            row = self._evaluate(c)
            if row is not None and self._answers(row):
                return row
        return None

    def _enumerate(self) -> tuple[list[Candidate], list[Config]]:
        """Every layout, and the configurations that pass the memory bound."""
        req, spec = self.request, self.request.spec
        shapes = [
            layout
            for layout in layouts(
                spec,
                max_gpus=req.max_gpus,
                gpus_per_node=self.gpu.gpus_per_node,
                seq=req.setup.seq,
                global_batch=req.global_batch,
                batch=req.setup.batch,
                microbatches=req.setup.parallel.microbatches,
                # context parallelism needs a fused kernel (ring attention over SDPA / flash)
                context_parallel=req.setup.attention is not Attention.eager,
            )
            if self.constraints.layout_allowed(layout.parallel)
        ]
        passing: list[Config] = []
        for i, layout in enumerate(shapes):
            facts = self.bounds.facts(layout)
            if facts is not None:
                passing.extend(self._configs(layout, facts))
            if self.progress and i % 64 == 0:
                self.progress(0.5 * i / max(1, len(shapes)))
        return shapes, passing

    def _configs(self, layout: Candidate, facts: StageFacts) -> list[Config]:
        """The layout's configurations that pass the memory bound (the rest are counted)."""
        tokens = layout.sequences * self.request.setup.seq
        zeros = self.constraints.zeros(layout.parallel.dp)
        passing, total, least = self.bounds.configurations(
            facts, layout, zeros, self.offloads, self.constraints.recompute
        )
        self.tally.configurations += total
        self.tally.rejected += total - len(passing)
        n = layout.world_size
        if n not in self.closest or least[3] < self.closest[n].memory_bound:
            self.closest[n] = Config(least[4] / tokens, least[3], layout, *least[:3])
        # a lower bound on the step time that already breaks a limit cannot pass in full
        fast = self.constraints.fast_enough
        return [
            Config(secs / tokens, mem, layout, zero, choice, r)
            for zero, choice, r, mem, secs in passing
            if fast(secs, tokens, n)
        ]

    # -- the questions ---------------------------------------------------------------------

    def _fewest(self, passing: list[Config], above: int = 0, min_rate: float = 0.0) -> Row | None:
        """The fastest answering configuration at the smallest world size (over ``above``)
        where one fits; configurations whose time bound already puts them under ``min_rate``
        tokens/s per GPU are not estimated (the bound is sorted: none after them can reach
        it)."""
        by_size: dict[int, list[Config]] = {}
        for c in passing:
            if c.layout.world_size > above:
                by_size.setdefault(c.layout.world_size, []).append(c)
        for n in sorted(by_size):
            best: Row | None = None
            for c in by_size[n]:
                if best is not None and c.seconds_per_token_bound >= best.seconds_per_token:
                    break
                if min_rate and c.seconds_per_token_bound * n * min_rate > 1:
                    break
                row = self._evaluate(c)
                if (
                    row is not None
                    and self._answers(row)
                    and (best is None or row.rank < best.rank)
                ):
                    best = row
            if best is not None:
                return best
        return None

    def _fastest(self, passing: list[Config]) -> list[Row]:
        """The ``top`` fastest layouts (each with its fastest fitting strategy)."""
        top = self.request.top
        best: dict[tuple[object, ...], Row] = {}
        for c in passing:
            if len(best) >= top:
                kth = sorted(r.seconds_per_token for r in best.values())[top - 1]
                if c.seconds_per_token_bound > kth:
                    break
            key = _layout_key(c.layout)
            if key in best and c.seconds_per_token_bound >= best[key].seconds_per_token:
                continue
            row = self._evaluate(c)
            if row is not None and self._answers(row):
                if key not in best or row.rank < best[key].rank:
                    best[key] = row
        return sorted(best.values(), key=lambda r: r.rank)[:top]

    # -- full estimates --------------------------------------------------------------------

    def _evaluate(self, c: Config, *, count: bool = True) -> Row | None:
        """The configuration estimated in full (remembered); None when it cannot run."""
        key = (c.layout, c.zero, c.offload, c.recompute)
        if key in self.done:
            return self.done[key]
        if count:
            self.tally.estimated += 1
        setup = self.setups.get((c.layout, c.zero))
        if setup is None:
            setup = self.setups[(c.layout, c.zero)] = layout_setup(
                self.request.setup, c.layout, c.zero, self.request.spec
            )
        base = self.bounds.fixed[Recompute.none]
        try:
            if c.recompute is Recompute.budget:
                row = self._budget(c, setup, base)
            else:
                options = self.bounds.fixed[c.recompute]
                options = Options(
                    recompute=options.recompute,
                    every=options.every,
                    offload=OFFLOADS[c.offload],
                    mfu=base.mfu,
                    headroom=base.headroom,
                    runtime=base.runtime,
                    alloc_conf=base.alloc_conf,
                )
                row = Row(c.layout, estimate(self.request.spec, setup, self.gpu, options))
        except MemcalcError:
            row = None
        self.done[key] = row
        return row

    def _budget(self, c: Config, setup: TrainingSetup, base: Options) -> Row | None:
        """The budget-optimal plan for the memory the configuration leaves: the budget starts
        at what the bound leaves per in-flight micro-batch and shrinks by any overflow."""
        facts = self.bounds.facts(c.layout)
        assert facts is not None
        spare = self.usable - c.memory_bound
        budget = facts.min_stored_bytes + spare // max(1, facts.in_flight)
        none = facts.plans[Recompute.none].stored_bytes
        if budget >= none:
            return None  # no recompute already fits the bound: the budget plan is "none"
        row = None
        for _ in range(BUDGET_RETRIES):
            options = Options(
                recompute=Recompute.budget,
                budget_bytes=budget,
                offload=OFFLOADS[c.offload],
                mfu=base.mfu,
                headroom=base.headroom,
                runtime=base.runtime,
                alloc_conf=base.alloc_conf,
            )
            row = Row(c.layout, estimate(self.request.spec, setup, self.gpu, options))
            over = row.breakdown.over_gpu_bytes
            if not over:
                break
            budget -= -(-over // max(1, facts.in_flight))
        return row


def _layout_key(layout: Candidate) -> tuple[object, ...]:
    """Rows differ by parallel layout; micro-batch variants of one layout share a row."""
    p = layout.parallel
    return (p.dp, p.tp, p.pp, p.cp, p.ep, p.vpp)


@dataclass(frozen=True)
class PlanResult:
    """The answer for every GPU kind, and what the search cost."""

    request: PlanRequest
    kinds: list[KindResult]
    search_seconds: float

    @property
    def fastest(self) -> Row | None:
        rows = [r for k in self.kinds for r in k.rows]
        return min(rows, key=lambda r: r.rank) if rows else None

    @property
    def rows(self) -> list[Row]:
        """The ranked table: every kind's fastest layouts and its fewest-GPU row."""
        rows = {id(r): r for k in self.kinds for r in (*k.rows[: self.request.top], k.fewest) if r}
        return sorted(rows.values(), key=lambda r: r.rank)[: self.request.top + len(self.kinds)]

    @property
    def configurations_evaluated(self) -> int:
        return sum(k.tally.configurations for k in self.kinds)


def plan(request: PlanRequest, progress: Progress | None = None) -> PlanResult:
    """Search every GPU kind of ``request``."""
    start = time.perf_counter()
    kinds = []
    for i, gpu in enumerate(request.gpus):
        share = (lambda f, i=i: progress((i + f) / len(request.gpus))) if progress else None
        kinds.append(search_kind(request, gpu, share))
    return PlanResult(request, kinds, time.perf_counter() - start)
