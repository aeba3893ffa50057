"""Estimate vs measurement: one row per component, with the relative error."""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.estimate import Breakdown, Options, estimate
from memcalc.frameworks import FrameworkName, ModelCode
from memcalc.graph.lower import lower
from memcalc.measure.runner import Measurement
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec
from memcalc.spec.parallel import Parallelism
from memcalc.spec.training import TrainingSetup

DEFAULT_TOLERANCE = 0.03
"""Relative error above which ``memcalc measure`` exits 1. Parameters, gradients and optimizer
states are exact on the test grid and stored activations within 1%; the step peak comes from a
timeline model of backward working memory, within about 3-5% at small sizes."""


@dataclass(frozen=True)
class Row:
    """One component: estimate, measurement, relative error, and whether it is checked."""

    component: str
    estimate_bytes: int | None
    measured_bytes: int | None
    checked: bool = True

    @property
    def error(self) -> float | None:
        if self.estimate_bytes is None or self.measured_bytes is None:
            return None
        if self.measured_bytes == 0:
            return 0.0 if self.estimate_bytes == 0 else None
        return (self.estimate_bytes - self.measured_bytes) / self.measured_bytes

    def within(self, tolerance: float) -> bool:
        err = self.error
        return not self.checked or err is None or abs(err) <= tolerance


def estimate_for(
    spec: ModelSpec,
    setup: TrainingSetup,
    gpu: GpuProfile,
    options: Options,
    device: str,
    dp_rank: int | None = None,
) -> Breakdown:
    """The estimate to compare with a measurement on ``device`` (CPU kernels lowered as CPU),
    of data-parallel rank ``dp_rank`` where the engine's ranks differ (None: the busiest)."""
    if setup.dropout is not None:
        spec, setup = spec.with_dropout(setup.dropout), setup.replace(dropout=None)
    from memcalc.strategies.recompute import Recompute

    setup = setup.with_kbit_input_grads(options.recompute is not Recompute.none)
    code = setup.framework_def.model_code
    if setup.parallel.world_size > 1 and code is not ModelCode.torchtitan:
        setup = setup.replace(framework=FrameworkName.hf)  # torch's DTensor and pipelining
    kind = "cpu" if device.startswith("cpu") else "cuda"
    graph = lower(spec, setup, device=kind)
    return estimate(spec, setup, gpu, options, graph=graph, device=kind, dp_rank=dp_rank)


def compare(b: Breakdown, m: Measurement) -> list[Row]:
    """Rows for every component both sides know."""
    rows = [
        Row("parameters", b.parameter_bytes, m.parameter_bytes),
        Row("gradients", b.gradient_bytes, m.gradient_bytes),
        Row("optimizer states", b.optimizer_bytes, m.optimizer_bytes),
        Row(
            "stored activations",
            b.activation_bytes,
            m.activation_bytes,
            checked=m.activations_checked,
        ),
        Row(
            "peak of the step",
            b.peak.total_bytes,
            m.peak_bytes,
            checked=not (m.device == "cpu" and m.host_bytes),
        ),
    ]
    if b.host_bytes or m.host_bytes:
        rows.append(Row("host (optimizer offload)", b.host_bytes, m.host_bytes, checked=False))
    if m.reserved_bytes is not None:
        r = b.reserved
        rows.append(
            Row(
                "reserved (max_memory_reserved)",
                r.reserved_peak_bytes if r.modelled else None,
                m.reserved_bytes,
                checked=False,
            )
        )
        rows.append(
            Row(
                "allocator retries",
                r.alloc_retries if r.modelled else None,
                m.alloc_retries,
                checked=False,
            )
        )
    if m.context_bytes is not None:
        rows.append(
            Row("outside the allocator (context)", b.overhead_bytes, m.context_bytes, checked=False)
        )
    return rows


@dataclass(frozen=True)
class RankRows:
    """One rank's comparison: its estimate (its pipeline stage's) against its measurement."""

    rank: int
    stage: str
    """The rank's pipeline stage ("" without pipeline parallelism)."""
    rows: list[Row]
    notes: tuple[str, ...]


def rank_estimates(b: Breakdown, par: Parallelism) -> list[Breakdown]:
    """Every rank's estimate, in rank order: ranks are numbered tp first, then cp, dp, pp
    (``spec/parallel.py``), so rank r is on stage r // (dp tp cp); the ranks of one stage hold
    the same shares (ZeRO / FSDP shards rounded up: the most loaded)."""
    inner = par.world_size // par.pp
    stages = b.stages or (b,)
    return [stages[r // inner] if b.stages else b for r in range(par.world_size)]


def estimates_by_rank(
    b: Breakdown,
    spec: ModelSpec,
    setup: TrainingSetup,
    gpu: GpuProfile,
    options: Options,
    device: str,
) -> list[Breakdown]:
    """Every rank's estimate: ``rank_estimates`` of ``b``, or where the engine's
    data-parallel ranks hold different bytes (DeepSpeed ZeRO-1/2's partitions) each rank's
    own (the layout is data-parallel only there)."""
    par = setup.parallel
    if not setup.sharding_engine.ranks_differ:
        return rank_estimates(b, par)
    return [estimate_for(spec, setup, gpu, options, device, r) for r in range(par.world_size)]


def compare_ranks(
    b: Breakdown,
    measurements: list[Measurement],
    par: Parallelism,
    estimates: list[Breakdown] | None = None,
) -> list[RankRows]:
    """Rows for every rank (``estimates``: each rank's; default ``rank_estimates(b)``)."""
    chosen = estimates if estimates is not None else rank_estimates(b, par)
    return [
        RankRows(r, e.stage, compare(e, m), m.notes)
        for r, (e, m) in enumerate(zip(chosen, measurements, strict=True))
    ]
