"""Reference measurements (``shared/reference`` protocol, copied to ``tests/data``): a case's
inputs as memcalc inputs, and the estimate to compare with its measured bytes."""

from __future__ import annotations

from typing import Any

from memcalc.estimate import Breakdown, Options, estimate
from memcalc.graph.lower import lower
from memcalc.graph.ops import OpGraph
from memcalc.profiles import GpuProfile
from memcalc.spec.families import spec_from_hf_config
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute


def estimate_reference_case(case: dict[str, Any], gpu: GpuProfile) -> tuple[OpGraph, Breakdown]:
    """The op graph and Breakdown for one measured case. The cases ran on CPU, so the graph is
    lowered for CPU kernels (LayerNorm statistics in the input dtype)."""
    i = case["inputs"]
    spec = spec_from_hf_config(i["hf_config"])
    setup = TrainingSetup(
        batch=i["batch"],
        seq=i["seq"],
        precision=i["dtype"],
        attention=i["attention"],
        optimizer=i["optimizer"],
        optimizer_foreach=i["optimizer_foreach"],
    )
    graph = lower(spec, setup, device="cpu")
    options = Options(recompute=Recompute(i["recompute"]))
    return graph, estimate(spec, setup, gpu, options, graph=graph, device="cpu")
