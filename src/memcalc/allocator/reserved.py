"""Reserved memory of one estimated step, and whether the device holds it.

``fits`` on a modelled step: the caching allocator, replayed over the step with the device's
memory less the kept-free reserve and the runtime overhead (CUDA context, kernels, library
workspaces: the GPU profile's ``runtime_overhead_bytes``) as what cudaMalloc can obtain,
finishes the measured step -- perhaps after releasing its cache and retrying
(``num_alloc_retries``), as torch does near a full device.
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.alloc_conf import AllocConf
from memcalc.allocator.events import step_trace, unmodelled
from memcalc.allocator.replay import Replay, replay
from memcalc.graph.ops import OpGraph
from memcalc.params import ParamCounts
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import ActivationPlan


@dataclass(frozen=True)
class Reserved:
    """The allocator model's verdict on one step (``replay`` None: not modelled, ``why``)."""

    conf: AllocConf
    why: str = ""
    """Why the step is not replayed ("" when it is)."""
    demand: Replay | None = None
    """The replay with unlimited device memory: what the step reserves when nothing fails."""
    bounded: Replay | None = None
    """The replay limited to ``capacity`` (only run when ``demand`` does not fit in it)."""
    capacity_bytes: int = 0

    @property
    def modelled(self) -> bool:
        return self.demand is not None

    @property
    def out_of_memory(self) -> bool:
        return self.bounded is not None and self.bounded.out_of_memory

    @property
    def reserved_peak_bytes(self) -> int:
        """What ``torch.cuda.max_memory_reserved()`` reports for the measured step on this
        device (the limited replay when it was needed and finished, else the demand)."""
        assert self.demand is not None
        if self.bounded is not None and not self.bounded.out_of_memory:
            return self.bounded.reserved_peak_bytes
        return self.demand.reserved_peak_bytes

    @property
    def fragmentation_bytes(self) -> int:
        """Reserved minus allocated at the step's allocated peak."""
        assert self.demand is not None
        use = self.bounded if self.bounded is not None and not self.out_of_memory else self.demand
        return use.fragmentation_bytes

    @property
    def alloc_retries(self) -> int:
        """Cache flushes the measured step needs on this device (0 when it reserves freely)."""
        return self.bounded.alloc_retries if self.bounded is not None else 0


def reserved_for(
    graph: OpGraph,
    plan: ActivationPlan,
    setup: TrainingSetup,
    counts: ParamCounts,
    conf: AllocConf,
    *,
    device_memory: int,
    capacity: int,
    offloaded: bool,
    device: str = "cuda",
) -> Reserved:
    """Replay the step; with more demand than ``capacity``, again with that limit (does the
    release-and-retry path save it?)."""
    why = unmodelled(setup, offloaded=offloaded, device=device)
    if why is not None:
        return Reserved(conf, why)
    st = step_trace(graph, plan, setup, counts)
    demand = replay(st, conf, device_memory=device_memory)
    bounded = None
    if demand.reserved_peak_bytes > capacity:
        bounded = replay(st, conf, device_memory=device_memory, capacity=max(0, capacity))
    return Reserved(conf, "", demand, bounded, capacity)
