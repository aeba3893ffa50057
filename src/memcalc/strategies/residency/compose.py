"""A rank's mechanisms, composed from its layout, placement and framework."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memcalc.frameworks import GradientStore, PipelineRuntime, TensorParallel
from memcalc.frameworks import Workspaces as FrameworkWorkspaces
from memcalc.frameworks.features import FsdpGroups
from memcalc.graph.ops import OpGraph
from memcalc.optimizer import OptimizerBytes
from memcalc.params import ParamCounts
from memcalc.profiles import GpuProfile
from memcalc.spec.megatron import TransformerImpl, cublas_workspace_bytes
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.offload import Offload
from memcalc.strategies.pipeline import Stage
from memcalc.strategies.placement import Placement, place
from memcalc.strategies.recompute import ActivationPlan
from memcalc.strategies.residency.ddp import BucketViewGradients, DdpBuckets, has_ddp_buckets
from memcalc.strategies.residency.fsdp2 import Fsdp2Gradients, Fsdp2Params, NoGather
from memcalc.strategies.residency.fsdp2_groups import SplitRootGradients, SplitRootParams
from memcalc.strategies.residency.gradients import ResidentGradients, ShardedGradients
from memcalc.strategies.residency.megatron_ddp import (
    DistributedOptimizerBuffers,
    MainGradBuffer,
    bucket_size,
    distributed_optimizer_buffers,
)
from memcalc.strategies.residency.megatron_schedule import peak_in_flight
from memcalc.strategies.residency.moments import GradientHolder, GradientTotals, ParamsHolder
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
from memcalc.strategies.residency.workspaces import (
    NO_WORKSPACES,
    Workspaces,
    te_cublas_workspaces,
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
Params = Fsdp2Params | SplitRootParams | NoGather


@dataclass(frozen=True)
class Residency:
    """What one rank holds beyond its activations and resident states, by mechanism."""

    gradients: GradientHolder
    params: ParamsHolder
    """Weights gathered beyond the rank's shards (FSDP2)."""
    pipeline: PipelineRetention
    tensor_parallel: TensorParallelExtras
    ddp: DdpBuckets | None
    """DDP's buckets (data-parallel without ZeRO)."""
    module_buffer_bytes: int = 0
    """The model's own buffers (torchtitan's RoPE caches)."""
    workspaces: Workspaces = NO_WORKSPACES
    """Library GEMM workspaces allocated as tensors (Transformer Engine, PyTorch cuBLAS)."""
    dist_opt: DistributedOptimizerBuffers | None = None
    """Megatron's distributed-optimizer buffers' padding."""
    model_buffers: int = 0
    """Buffers the model code keeps for good (``OpGraph.persistent``)."""

    @property
    def buffer_bytes(self) -> int:
        """Bytes on the GPU for the whole step beside the parameters: DDP's buckets, the
        pipeline's receive buffers, the model's buffers, library workspaces, the distributed
        optimizer's padding."""
        return (
            (self.ddp.buffer_bytes if self.ddp else 0)
            + self.pipeline.buffer_bytes
            + self.module_buffer_bytes
            + self.workspaces.buffer_bytes
            + (self.dist_opt.buffer_bytes if self.dist_opt else 0)
            + self.model_buffers
        )

    @property
    def notes(self) -> tuple[str, ...]:
        parts = (
            self.ddp.note if self.ddp else "",
            self.pipeline.note,
            self.tensor_parallel.note,
            f"model buffers (RoPE caches) {self.module_buffer_bytes} bytes for the whole step"
            if self.module_buffer_bytes
            else "",
            self.workspaces.note,
            self.dist_opt.note if self.dist_opt else "",
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


def held_activations(
    setup: TrainingSetup, stage: Stage, layer_bytes: list[int], outside_bytes: int
) -> tuple[int, int]:
    """Bytes of other micro-batches' activations the stage holds at its first and at a later
    backward, beside the one whose backward runs (``layer_bytes``: what each of its layers
    stores for one micro-batch, ``outside_bytes``: its prologue's and epilogue's). One chunk
    per rank: ``in_flight - 1`` micro-batches of the whole stage. Megatron's interleaved
    schedule: the worst moment of ``megatron_schedule.peak_in_flight`` over the rank's virtual
    stages (the embedding's bytes on the first rank's first chunk, the loss's on the last
    rank's last chunk), less the one micro-batch the timeline walks."""
    par = setup.parallel
    acts = sum(layer_bytes) + outside_bytes
    vpp = len(stage.chunks)
    if vpp <= 1 or setup.framework_def.pipeline is not PipelineRuntime.megatron:
        return (stage.in_flight - 1) * acts, max(stage.in_flight_later - 1, 0) * acts
    chunk_bytes, start = [], 0
    for n in stage.chunks:
        chunk_bytes.append(sum(layer_bytes[start : start + n]))
        start += n
    chunk_bytes[0 if stage.is_first else -1] += outside_bytes
    group = setup.megatron_options.microbatch_group_size_per_vp_stage or par.pp
    peak = peak_in_flight(par.pp, stage.index, vpp, par.microbatches, group, chunk_bytes)
    others = max(peak - acts, 0)
    return others, others


def fsdp2_groups(
    graph: OpGraph,
    setup: TrainingSetup,
    counts: ParamCounts,
    sharding: Sharding,
    totals: GradientTotals,
) -> tuple[Params, ResidentGradients]:
    """FSDP2's gathered weights and gradients under the framework's grouping: the root group
    of everything outside the blocks (``fully_shard`` per block, then the model), or
    torchtitan's embedding and ``[norm, lm_head]`` groups (``fsdp2_groups.py``); weights are
    gathered in the recipe's ``param_dtype``."""
    par, fw = setup.parallel, setup.framework_def
    block_numel = tuple(b.param_numel for b in graph.kinds)
    gathered = setup.precision.gathered_dtype.itemsize
    g = setup.gradient_dtype.itemsize
    # unsharded gradients: in param_dtype under a MixedPrecisionPolicy, else the gradients'
    unsharded = gathered if setup.precision.is_fsdp_policy else g
    head = sum(w.numel for op in graph.epilogue for w in op.weights)
    if fw.fsdp_groups is FsdpGroups.torchtitan and head:
        embedding = counts.total - graph.layout.total(block_numel) - head
        return (
            SplitRootParams(embedding, head, block_numel, graph.layout, gathered, par.fsdp_reshard),
            SplitRootGradients(totals, sharding, g, unsharded, fw.grads_kept),
        )
    params = Fsdp2Params(
        counts.total - graph.layout.total(block_numel),
        block_numel,
        graph.layout,
        gathered,
        par.fsdp_reshard,
    )
    return params, Fsdp2Gradients(totals, sharding, g, unsharded)


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
    compute_capability: float | None = None,
) -> Residency:
    """The rank's Residency: tensor parallelism and the pipeline as the framework runs them,
    then data parallelism -- DDP's buckets without ZeRO, ZeRO-2's sharded gradients, FSDP2's
    groups at ZeRO-3, or the framework's own gradient buffer -- and the gradients capped on
    the GPU when the parameters live on the host; the framework's workspaces on a GPU of
    ``compute_capability``."""
    par = setup.parallel
    fw = setup.framework_def
    buffered = fw.gradients is GradientStore.main_grad_buffer
    ddp = None
    if has_ddp_buckets(setup, sharding.stage):
        ddp = DdpBuckets(counts.grad_bytes(setup.gradient_dtype.itemsize), par.bucket_view)
    gradients: ResidentGradients
    params: Params = NoGather()
    if sharding.shards_parameters or (fw.always_fsdp and sharding.stage >= 3):
        params, gradients = fsdp2_groups(graph, setup, counts, sharding, totals)
    elif sharding.shards_gradients:
        gradients = ShardedGradients(totals, sharding)
    elif buffered:
        gradients = MainGradBuffer(totals)
    elif ddp is not None and ddp.bucket_view:
        gradients = BucketViewGradients(totals)
    else:
        gradients = ResidentGradients(totals)
    held: Gradients = gradients if grads_resident else OffloadedGradients(gradients, grads_cap)
    return Residency(
        held,
        params,
        pipeline,
        tensor_parallel,
        ddp,
        graph.buffer_bytes,
        framework_workspaces(setup, graph, compute_capability),
        megatron_buffers(graph, setup, sharding) if buffered else None,
        sum(t.nbytes for t in graph.persistent),
    )


def framework_workspaces(
    setup: TrainingSetup, graph: OpGraph, compute_capability: float | None
) -> Workspaces:
    """The GEMM workspaces the framework's libraries keep (``workspaces.py``)."""
    if setup.framework_def.workspaces is not FrameworkWorkspaces.te_cublas:
        return NO_WORKSPACES
    opts = setup.megatron_options
    config = opts.cublas_workspace_config
    grouped = opts.moe_grouped_gemm and any(
        op.name.startswith("mlp.experts") for b in graph.kinds for op in b.ops
    )
    torch_bytes = cublas_workspace_bytes(config) if config is not None else None
    te = opts.transformer_impl is TransformerImpl.transformer_engine
    return te_cublas_workspaces(compute_capability, torch_bytes, grouped, te_gemms=te)


def megatron_buffers(
    graph: OpGraph, setup: TrainingSetup, sharding: Sharding
) -> DistributedOptimizerBuffers | None:
    """The distributed optimizer's padding on this rank (None without it: the
    non-distributed layout has none). With a pipeline the word embedding and the output
    layer's weight are taken as shared embeddings (a bucket of their own: at most
    ``lcm(dp, 128)`` elements of padding more), tied or not."""
    if sharding.stage != 1 or sharding.gpus == 1:
        return None
    opts = setup.megatron_options
    size = bucket_size(opts.overlap_grad_reduce, opts.ddp_bucket_size, sharding.gpus)
    tied_copy = setup.parallel.pp > 1
    params: list[tuple[int, bool]] = []
    for op in graph.prologue:
        params += [(w.numel, tied_copy and op.name.endswith("word_embeddings")) for w in op.weights]
    for i in range(graph.num_layers):
        params += [(w.numel, False) for op in graph.block(i).ops for w in op.weights]
    for op in graph.epilogue:
        params += [(w.numel, tied_copy and op.name == "output_layer") for w in op.weights]
    return distributed_optimizer_buffers(
        params,
        sharding.gpus,
        size,
        setup.weight_dtype.itemsize,
        setup.gradient_dtype.itemsize,
    )


@dataclass(frozen=True)
class RankInputs:
    """What a sharding engine needs to place one rank's states and say what it holds."""

    graph: OpGraph
    setup: TrainingSetup
    counts: ParamCounts
    optimizer: OptimizerBytes
    sharding: Sharding
    offloads: tuple[Offload, ...]
    gpu: GpuProfile
    stage: Stage
    extras: TensorParallelExtras
    """The framework's tensor-parallel extras (``tensor_parallel_extras``)."""
    totals: GradientTotals
    stored_activation_bytes: int
    kept_activation_bytes: int
    """Stored activations left on the GPU (all of them unless activations=cpu)."""
    device: str = "cuda"
    """The kernels' device: ``cpu`` for a comparison with a CPU run."""
    dp_rank: int | None = None
    """The data-parallel rank to describe (None: the most loaded)."""
    plan: ActivationPlan | None = None
    """The recompute plan (which layers' backward replays their forward)."""

    @property
    def extra_grad_bytes(self) -> int:
        return self.extras.embedding_grad_numel * self.setup.gradient_dtype.itemsize


def torch_rank(inp: RankInputs) -> tuple[Placement, Residency]:
    """PyTorch's own engine: ``placement.place`` for the states, ``compose`` for the rest
    (every data-parallel rank alike)."""
    setup = inp.setup
    placed = place(
        inp.counts,
        setup,
        inp.optimizer,
        inp.sharding,
        inp.offloads,
        inp.gpu,
        stored_activation_bytes=inp.stored_activation_bytes,
        kept_activation_bytes=inp.kept_activation_bytes,
        in_flight=inp.stage.in_flight,
        microbatches=setup.parallel.microbatches,
        extra_grad_bytes=inp.extra_grad_bytes,
    )
    rank = compose(
        inp.graph,
        setup,
        inp.counts,
        inp.sharding,
        inp.totals,
        pipeline=pipeline_retention(inp.graph, setup, inp.stage),
        tensor_parallel=inp.extras,
        grads_resident=placed.grads_resident,
        grads_cap=placed.gpu_gradient_bytes,
        compute_capability=inp.gpu.compute_capability,
    )
    return placed, rank
