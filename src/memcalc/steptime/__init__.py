"""The time of one training step on one rank: one model, shared by ``estimate`` and ``plan``.

- ``kernels``: one kernel's seconds on one GPU (a GEMM by its shape, fused attention by its
  masked FLOPs, elementwise ops by their HBM bytes);
- ``compute``: one micro-batch's kernels, op by op from the op graph;
- ``runtime``: what the framework runs (fused or eager kernels, the attention kernel, which
  collectives it overlaps);
- ``schedule``: the step from micro-batches, the pipeline bubble, the collectives
  (``strategies/comms.py``) and offload transfers each compute window hides, the optimizer.

``step_of`` is the whole model for one rank's stage; ``plan``'s bounds call ``step_time`` on
the same parts.
"""

from __future__ import annotations

from memcalc.graph.ops import OpGraph
from memcalc.profiles import GpuProfile
from memcalc.steptime.compute import MicroBatch, micro_batch, rank_forward_flops
from memcalc.steptime.kernels import memory_seconds
from memcalc.steptime.schedule import Kernels, StepTime, communication_seconds, step_time
from memcalc.strategies.comms import Transfer
from memcalc.strategies.placement import Placement
from memcalc.strategies.recompute import ActivationPlan
from memcalc.strategies.runtime import RUNTIMES, AttentionKernel, Runtime, runtime_of

__all__ = [
    "RUNTIMES",
    "AttentionKernel",
    "Kernels",
    "MicroBatch",
    "Runtime",
    "StepTime",
    "communication_seconds",
    "kernels_of",
    "micro_batch",
    "optimizer_step_seconds",
    "rank_forward_flops",
    "runtime_of",
    "step_of",
    "step_time",
]


def kernels_of(mb: MicroBatch, plan: ActivationPlan | None = None) -> Kernels:
    """The schedule's view of one micro-batch's kernels (with ``plan``'s recompute)."""
    t = mb.total
    return Kernels(
        forward=t.forward,
        backward=t.backward,
        recompute=mb.recompute_seconds(plan) if plan is not None else 0.0,
        matmul=t.matmul[0] + t.matmul[1],
        attention=t.attention[0] + t.attention[1],
        memory=t.memory[0] + t.memory[1],
    )


def optimizer_step_seconds(placed: Placement, gpu: GpuProfile) -> float:
    """A GPU optimizer step: it reads and writes its states (and master weights), reads the
    gradients and writes the weights -- HBM-bound (Adam's update is a few FLOPs per byte).
    0 when the step runs on the CPU."""
    if placed.cpu_step_seconds:
        return 0.0
    moved = 2 * placed.gpu_optimizer_bytes + placed.gpu_gradient_bytes
    return memory_seconds(moved + placed.gpu_parameter_bytes, gpu)


def step_of(
    graph: OpGraph,
    plan: ActivationPlan,
    gpu: GpuProfile,
    runtime: Runtime,
    *,
    microbatches: int,
    pp: int,
    vpp: int,
    cp: int,
    transfers: tuple[Transfer, ...],
    placed: Placement,
    flat_flops_per_s: float | None = None,
) -> StepTime:
    """The StepTime of one rank of one pipeline stage (``graph``), with ``plan``'s recompute,
    its collectives and its model states' placement; ``flat_flops_per_s``: the
    single-utilisation compute model (``--mfu``) at that rate."""
    mb = micro_batch(graph, gpu, runtime, cp=cp, flat_flops_per_s=flat_flops_per_s)
    return step_time(
        kernels_of(mb, plan),
        microbatches=microbatches,
        pp=pp,
        vpp=vpp,
        transfers=transfers,
        host=placed.traffic,
        host_link_bytes_per_s=gpu.host_link_bytes_per_s,
        cpu_optimizer_seconds=placed.cpu_step_seconds,
        optimizer_seconds=optimizer_step_seconds(placed, gpu),
    )
