"""A rank's mechanisms, composed from its layout, placement and framework."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memcalc.frameworks import PipelineRuntime, TensorParallel
from memcalc.graph.ops import OpGraph
from memcalc.params import ParamCounts
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.pipeline import Stage
from memcalc.strategies.residency.ddp import BucketViewGradients, DdpBuckets
from memcalc.strategies.residency.fsdp2 import Fsdp2Gradients, Fsdp2Params, NoGather
from memcalc.strategies.residency.gradients import ResidentGradients, ShardedGradients
from memcalc.strategies.residency.moments import GradientTotals
from memcalc.strategies.residency.offload import OffloadedGradients
from memcalc.strategies.residency.pipelining import (
    PipelineRetention,
    megatron_pipeline,
    torch_pipelining,
)
from memcalc.strategies.residency.tensor_parallel import (
    NO_EXTRAS,
    TensorParallelExtras,
    dtensor_tensor_parallel,
    megatron_tensor_parallel,
)
from memcalc.strategies.sharding import Sharding

PIPELINES: dict[PipelineRuntime, Callable[[OpGraph, int, Stage], PipelineRetention]] = {
    PipelineRuntime.megatron: megatron_pipeline,
    PipelineRuntime.torch: torch_pipelining,
}
TENSOR_PARALLEL: dict[TensorParallel, Callable[..., TensorParallelExtras]] = {
    TensorParallel.megatron: megatron_tensor_parallel,
    TensorParallel.dtensor: dtensor_tensor_parallel,
}

Gradients = ResidentGradients | OffloadedGradients
Params = Fsdp2Params | NoGather


@dataclass(frozen=True)
class Residency:
    """What one rank holds beyond its activations and resident states, by mechanism."""

    gradients: Gradients
    params: Params
    """Weights gathered beyond the rank's shards (FSDP2)."""
    pipeline: PipelineRetention
    tensor_parallel: TensorParallelExtras
    ddp: DdpBuckets | None
    """DDP's buckets (data-parallel without ZeRO)."""

    @property
    def buffer_bytes(self) -> int:
        """Bytes on the GPU for the whole step beside the parameters: DDP's buckets and the
        pipeline's receive buffers."""
        return (self.ddp.buffer_bytes if self.ddp else 0) + self.pipeline.buffer_bytes

    @property
    def notes(self) -> tuple[str, ...]:
        parts = (
            self.ddp.note if self.ddp else "",
            self.pipeline.note,
            self.tensor_parallel.note,
        )
        return tuple(p for p in parts if p)


def tensor_parallel_extras(
    setup: TrainingSetup, graph: OpGraph, embedding: tuple[int, int] | None
) -> TensorParallelExtras:
    """The framework's tensor-parallel extras on one rank (none without tensor parallelism):
    ``embedding`` is the (V, h) table whose rows the rank holds, if any."""
    par = setup.parallel
    if par.tp == 1:
        return NO_EXTRAS
    logits_vocab = graph.logits.numel // setup.tokens if graph.logits else 0
    rules = TENSOR_PARALLEL[setup.framework_def.tensor_parallel]
    return rules(setup.tokens, par.tp, logits_vocab, embedding)


def pipeline_retention(graph: OpGraph, setup: TrainingSetup, stage: Stage) -> PipelineRetention:
    """The framework's pipeline runtime on ``stage`` (nothing without a pipeline)."""
    par = setup.parallel
    if par.pp == 1:
        return PipelineRetention()
    runtime = PIPELINES[setup.framework_def.pipeline]
    return runtime(graph, par.microbatches, stage)


def compose(
    graph: OpGraph,
    setup: TrainingSetup,
    counts: ParamCounts,
    sharding: Sharding,
    totals: GradientTotals,
    *,
    pipeline: PipelineRetention,
    tensor_parallel: TensorParallelExtras,
    grads_resident: bool,
    grads_cap: int,
) -> Residency:
    """The rank's Residency: tensor parallelism and the pipeline as the framework runs them,
    then data parallelism -- DDP's buckets without ZeRO, ZeRO-2's sharded gradients, FSDP2's
    groups at ZeRO-3 -- and the gradients capped on the GPU when the parameters live on the
    host."""
    par = setup.parallel
    ddp = None
    if par.dp > 1 and par.zero == 0 and not setup.precision.is_mixed:
        ddp = DdpBuckets(counts.grad_bytes(setup.gradient_dtype.itemsize), par.bucket_view)
    gradients: ResidentGradients
    params: Params = NoGather()
    if sharding.shards_parameters:
        gradients = Fsdp2Gradients(totals, sharding)
        block_numel = tuple(b.param_numel for b in graph.kinds)
        params = Fsdp2Params(
            counts.total - graph.layout.total(block_numel),
            block_numel,
            graph.layout,
            setup.weight_dtype.itemsize,
            par.fsdp_reshard,
        )
    elif sharding.shards_gradients:
        gradients = ShardedGradients(totals, sharding)
    elif ddp is not None and ddp.bucket_view:
        gradients = BucketViewGradients(totals)
    else:
        gradients = ResidentGradients(totals)
    held: Gradients = gradients if grads_resident else OffloadedGradients(gradients, grads_cap)
    return Residency(held, params, pipeline, tensor_parallel, ddp)
