"""Estimate vs measurement: one row per component, with the relative error."""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.estimate import Breakdown, Options, estimate
from memcalc.graph.lower import lower
from memcalc.measure.runner import Measurement
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec
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
    spec: ModelSpec, setup: TrainingSetup, gpu: GpuProfile, options: Options, device: str
) -> Breakdown:
    """The estimate to compare with a measurement on ``device`` (CPU kernels lowered as CPU)."""
    if setup.dropout is not None:
        spec, setup = spec.with_dropout(setup.dropout), setup.replace(dropout=None)
    kind = "cpu" if device.startswith("cpu") else "cuda"
    graph = lower(spec, setup, device=kind)
    return estimate(spec, setup, gpu, options, graph=graph, device=kind)


def compare(b: Breakdown, m: Measurement) -> list[Row]:
    """Rows for every component both sides know."""
    rows = [
        Row("parameters", b.parameter_bytes, m.parameter_bytes),
        Row("gradients", b.gradient_bytes, m.gradient_bytes),
        Row("optimizer states", b.optimizer_bytes, m.optimizer_bytes),
        Row("stored activations", b.activation_bytes, m.activation_bytes),
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
        rows.append(Row("reserved (incl. overhead)", b.peak_bytes, m.reserved_bytes, checked=False))
        rows.append(Row("allocator retries", None, m.alloc_retries, checked=False))
    return rows
