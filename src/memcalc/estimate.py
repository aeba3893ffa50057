"""Op graph x strategy x setup x GPU profile -> Breakdown: the memory of one training step.

The four components (parameters, gradients, optimizer states, activations) are what lives
between phases; the peak comes from a step timeline (``timeline.py``), not a sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from memcalc.graph.lower import lower
from memcalc.graph.ops import Component, OpGraph
from memcalc.optimizer import OptimizerBytes, optimizer_bytes
from memcalc.params import ParamCounts, graph_param_counts
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec
from memcalc.spec.parallel import Parallelism
from memcalc.spec.training import TrainingSetup
from memcalc.steptime import StepTime, step_time
from memcalc.strategies.comms import Links, StepShape, Transfer, step_transfers
from memcalc.strategies.offload import DEFAULT_NVME_BYTES_PER_S, Offload, OffloadWhat, Traffic
from memcalc.strategies.pipeline import Stage, in_flight, pipeline_stages
from memcalc.strategies.recompute import ActivationPlan, Recompute, plan_for
from memcalc.strategies.sharding import Sharding
from memcalc.timeline import Moment, Timeline, step_timeline

DEFAULT_MFU = 0.4
"""Assumed model-FLOPs utilisation for turning FLOPs into seconds (typical well-tuned
dense-transformer training reaches 0.35-0.55 of dense peak)."""


@dataclass(frozen=True)
class Options:
    """Strategy choices for one estimate."""

    recompute: Recompute = Recompute.none
    every: int | None = None
    budget_bytes: int | None = None
    offload: tuple[Offload, ...] = ()
    mfu: float = DEFAULT_MFU
    nvme_bytes_per_s: float = DEFAULT_NVME_BYTES_PER_S

    @property
    def label(self) -> str:
        recompute = (
            f"every-{self.every}"
            if self.recompute is Recompute.every_k and self.every
            else self.recompute.value
        )
        if not self.offload:
            return recompute
        offload = "offload " + ", ".join(o.label for o in self.offload)
        return offload if self.recompute is Recompute.none else f"{recompute} + {offload}"


@dataclass(frozen=True)
class Breakdown:
    """Memory of one training step on one GPU, in bytes, with costs. Totals are computed."""

    model_name: str
    setup: TrainingSetup
    gpu: GpuProfile
    options: Options
    strategy: str
    params: ParamCounts
    parameter_bytes: int
    """Weights on the GPU between steps."""
    gradient_bytes: int
    """Gradients on the GPU at the end of backward."""
    optimizer_bytes: int
    """Optimizer states + master weights + step tensors on the GPU."""
    activation_bytes: int
    """Activations held on the GPU from forward to backward."""
    activation_by_component: dict[str, int]
    overhead_bytes: int
    """Runtime overhead outside tensors (CUDA context, workspaces): a profile assumption."""
    peak: Moment
    """The moment of the step with the most bytes on the GPU."""
    timeline: Timeline
    host_bytes: int
    nvme_bytes: int
    moved_bytes_per_step: int
    transfer_seconds: float
    forward_flops: int
    extra_forward_flops: int
    step_seconds: float
    """Compute time of one step at ``options.mfu`` of the profile's dense peak."""
    activation_plan: ActivationPlan
    optimizer_detail: OptimizerBytes
    assumptions: tuple[str, ...] = field(default=())
    buffer_bytes: int = 0
    """Communication buffers on the GPU throughout (DDP's gradient buckets)."""
    stage: str = ""
    """The pipeline stage this breakdown is of ("" without pipeline parallelism)."""
    stages: tuple[Breakdown, ...] = ()
    """Every pipeline stage's breakdown (this one is the most loaded)."""
    transfers: tuple[Transfer, ...] = ()
    """The step's collectives on this rank."""
    time: StepTime | None = None
    """The step's time, by part (the model ``plan`` ranks by)."""

    @property
    def peak_bytes(self) -> int:
        """Total GPU bytes at the peak, overhead included."""
        return self.peak.total_bytes + self.overhead_bytes

    @property
    def transient_bytes(self) -> int:
        """Bytes at the peak that exist only around that moment."""
        return self.peak.transient_bytes

    @property
    def steady_bytes(self) -> int:
        """Parameters + gradients + optimizer + stored activations (a sum, not the peak)."""
        return (
            self.parameter_bytes
            + self.gradient_bytes
            + self.optimizer_bytes
            + self.activation_bytes
        )

    @property
    def step_flops(self) -> int:
        """Forward + backward (2x forward, Kaplan et al. 2020) + recompute."""
        return 3 * self.forward_flops + self.extra_forward_flops

    @property
    def extra_flops_fraction(self) -> float:
        return self.extra_forward_flops / (3 * self.forward_flops)

    @property
    def extra_seconds(self) -> float:
        return self.step_seconds * self.extra_forward_flops / self.step_flops

    @property
    def transfer_hidden(self) -> bool:
        """True when transfers take less time than the step's compute (so prefetch/overlap
        can hide them)."""
        return self.transfer_seconds <= self.step_seconds

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.gpu.memory_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.gpu.memory_bytes - self.peak_bytes


def estimate(
    spec: ModelSpec,
    setup: TrainingSetup,
    gpu: GpuProfile,
    options: Options = Options(),
    *,
    graph: OpGraph | None = None,
    device: str = "cuda",
) -> Breakdown:
    """The Breakdown of one training step of a ModelSpec (lowered to its op graph), for the
    most loaded GPU rank; with pipeline parallelism ``stages`` holds every stage's.

    GPT-2 small, fp32 AdamW, no recompute: 4 + 4 + 8 bytes per parameter.

    >>> from memcalc.spec.presets import preset
    >>> from memcalc.profiles import load_profile
    >>> b = estimate(preset("gpt2"), TrainingSetup(precision="fp32"), load_profile("a100-sxm-80gb"))
    >>> (b.parameter_bytes, b.gradient_bytes) == (4 * 124439808, 4 * 124439808)
    True
    """
    if setup.dropout is not None:
        spec = spec.with_dropout(setup.dropout)
        setup = setup.replace(dropout=None)
    graph = graph or lower(spec, setup)
    tied = "tied embedding counted once" if spec.tie_embeddings else "untied embedding and LM head"
    vocab = graph.logits.numel // setup.tokens if graph.logits else spec.vocab_size
    par = setup.parallel
    stages = pipeline_stages(graph, par, tied=spec.tie_embeddings)
    notes: tuple[str, ...] = (tied,)
    if par.pp > 1:
        split = ", ".join(str(st.layers) for st in stages)
        notes += (
            f"pipeline: {par.pp} stages holding {split} layers (the first L mod p stages one "
            "more); embedding on the first stage, head and loss on the last"
            + (
                "; the last stage keeps its own copy of the tied embedding"
                if spec.tie_embeddings
                else ""
            ),
        )
    done: dict[tuple[object, ...], Breakdown] = {}
    results = []
    for st in stages:
        key = (st.graph.layout, st.is_first, st.is_last, st.in_flight, st.in_flight_later)
        if key not in done:
            counts = graph_param_counts(
                st.graph, lm_head_numel=vocab * spec.hidden_size if st.is_last else 0
            )
            done[key] = estimate_graph(
                spec.name,
                st.graph,
                counts,
                setup,
                gpu,
                options,
                notes=notes,
                stage=st,
                device=device,
                embedding_grad_extra=_replicated_embedding_grad(spec, st, par),
            )
        results.append(done[key])
    worst = max(results, key=lambda b: b.peak_bytes)
    if par.pp == 1:
        return worst
    return replace(worst, stages=tuple(results))


def estimate_graph(
    model_name: str,
    graph: OpGraph,
    counts: ParamCounts,
    setup: TrainingSetup,
    gpu: GpuProfile,
    options: Options = Options(),
    *,
    notes: tuple[str, ...] = (),
    stage: Stage | None = None,
    device: str = "cuda",
    embedding_grad_extra: int = 0,
) -> Breakdown:
    """The Breakdown of one training step of any op graph (lowered or traced) with its
    parameter tensors' counts, on one rank of ``stage`` (the whole model without pipeline
    parallelism). ``embedding_grad_extra``: gradient elements beyond the parameters' (DTensor
    tensor parallelism: the vocab-parallel embedding's gradient is the full V x h table)."""
    par = setup.parallel
    if stage is None:
        k, later = in_flight(0, par)
        stage = Stage(0, 0, graph, k, later, True, True)
    opt = optimizer_bytes(setup, counts, device)
    plan = plan_for(
        graph, options.recompute, every=options.every, budget_bytes=options.budget_bytes
    )
    offloaded = {o.what: o for o in options.offload}
    params_b = counts.total * setup.weight_dtype.itemsize
    grads_b = counts.total * setup.gradient_dtype.itemsize
    opt_b = opt.total_bytes
    assumptions = [
        f"precision {setup.precision.value}: weights {setup.weight_dtype.value}, gradients "
        f"{setup.gradient_dtype.value}, optimizer states {setup.optimizer_dtype.value}"
        + (", fp32 master weights" if setup.precision.is_mixed else "")
        + (
            f"; torch.autocast: matmuls in {setup.activation_dtype.value}, each saving "
            f"{setup.activation_dtype.value} casts of its input and weight"
            if setup.precision.is_amp
            else ""
        ),
        f"attention kernel {setup.attention.value}; loss {setup.loss.value}",
        *notes,
        f"runtime overhead {gpu.runtime_overhead_bytes} bytes from the GPU profile "
        "(context + workspaces); allocator fragmentation not included",
        "logits are freed after the loss (as HF Trainer does); keeping model outputs alive "
        "adds b*s*V of the activation dtype",
    ]
    if setup.optimizer_foreach and opt.step_temporary_bytes:
        assumptions.append("foreach optimizer step: temporaries the size of all parameters")
    if opt.step_tensor_bytes and not opt.step_on_device:
        assumptions.append(
            f"optimizer step counters ({opt.step_tensor_bytes} bytes) on the host: torch keeps "
            "them on the GPU only for fused or capturable Adam"
        )

    sharding = Sharding(par.shard_ranks, par.zero)
    assumptions.append(sharding.describe())
    if par.world_size > par.dp:
        assumptions.append(f"layout: {par.describe()}")
    grads_b += embedding_grad_extra * setup.gradient_dtype.itemsize
    params_b = sharding.share(params_b, from_stage=3)
    grads_b = sharding.share(grads_b, from_stage=2)
    step_b = opt.step_tensor_bytes if opt.step_on_device else 0
    if sharding.shards_parameters:
        # FSDP2: every rank's optimizer steps its shard of every parameter tensor, so it keeps
        # one step tensor per tensor (torch adam.py _init_group, over the DTensor shards)
        opt_b = sharding.share(opt_b - step_b, from_stage=1) + step_b
    else:
        opt_b = sharding.share(opt_b, from_stage=1)
    traffic = Traffic()
    gpu_params, gpu_grads, gpu_opt, gpu_acts = params_b, grads_b, opt_b, plan.stored_bytes
    step_temp = sharding.share(opt.step_temporary_bytes, from_stage=1)
    # seconds of host/NVMe traffic that overlap the backward / that are exposed
    overlapped = exposed = cpu_step = 0.0
    link = gpu.host_link_bytes_per_s
    if OffloadWhat.params in offloaded and OffloadWhat.optimizer not in offloaded:
        offloaded[OffloadWhat.optimizer] = Offload.parse("optimizer=cpu")
        assumptions.append("params=cpu implies optimizer=cpu (ZeRO-3 offload requires it)")
    if OffloadWhat.optimizer in offloaded:
        where = offloaded[OffloadWhat.optimizer].where.value
        moved = grads_b + params_b  # gradients down, updated weights up (ZeRO-Offload)
        if where == "cpu":
            traffic = Traffic(host_bytes=opt_b + grads_b, host_link_bytes=moved)
        else:
            traffic = Traffic(
                host_bytes=grads_b,
                nvme_bytes=opt_b,
                host_link_bytes=moved,
                nvme_link_bytes=2 * opt_b,
            )
            exposed += 2 * opt_b / options.nvme_bytes_per_s
        overlapped += grads_b / link
        exposed += params_b / link
        cpu_step = sharding.share(counts.total, from_stage=1) / gpu.cpu_adam_params_per_s
        gpu_opt, step_temp = 0, 0
        assumptions.append(
            f"optimizer step on the CPU ({where}) at {gpu.cpu_adam_params_per_s:.3g} "
            "parameters/s (profile); gradients go down during backward, weights come back after"
        )
    if OffloadWhat.params in offloaded:
        resident = max(2 * counts.per_block, counts.embedding, counts.head)
        gpu_params = resident * setup.weight_dtype.itemsize
        gpu_grads = resident * setup.gradient_dtype.itemsize
        traffic = Traffic(
            host_bytes=traffic.host_bytes + params_b,
            nvme_bytes=traffic.nvme_bytes,
            host_link_bytes=traffic.host_link_bytes + 2 * params_b,
            nvme_link_bytes=traffic.nvme_link_bytes,
        )
        overlapped += 2 * params_b / link
        assumptions.append(
            "params=cpu: two blocks' weights resident (current + prefetch), "
            "weights streamed up in forward and again in backward"
        )
    if OffloadWhat.activations in offloaded:
        gpu_acts = plan.stored_bytes - _offloadable(graph, plan)
        moved = 2 * (plan.stored_bytes - gpu_acts)
        traffic = Traffic(
            host_bytes=traffic.host_bytes + plan.stored_bytes - gpu_acts,
            nvme_bytes=traffic.nvme_bytes,
            host_link_bytes=traffic.host_link_bytes + moved,
            nvme_link_bytes=traffic.nvme_link_bytes,
        )
        overlapped += moved / link
        assumptions.append(
            "activations=cpu: saved tensors of the blocks go to pinned host "
            "memory (save_on_cpu); one block's come back at a time"
        )

    buffers = 0
    ddp = par.dp > 1 and par.zero == 0 and not setup.precision.is_mixed
    if ddp and not par.bucket_view:
        buffers = counts.total * setup.gradient_dtype.itemsize
        assumptions.append(
            "DDP: gradient buckets hold a copy of every gradient (gradient_as_bucket_view=False, "
            "the torch default; --bucket-view removes it)"
        )
    elif ddp:
        assumptions.append(
            "DDP gradient_as_bucket_view: the gradients are views of the buckets, allocated "
            "when DDP is built, so they take their bytes for the whole step"
        )
    pipe = _torch_pipeline(graph, setup, stage)
    if pipe.buffer_bytes:
        buffers += pipe.buffer_bytes
        assumptions.append(
            f"torch.distributed.pipelining: {pipe.buffer_bytes} bytes of receive buffers (one "
            "per micro-batch, kept across steps); each in-flight micro-batch's output is kept "
            "until its backward"
        )
    if par.dtensor_tp:
        assumptions.append(
            "DTensor tensor parallelism: the vocab-parallel embedding's gradient is the full "
            "V x h table on every rank (DTensor's embedding backward returns it replicated); "
            "sequence-parallel projections save their all-gathered input; loss_parallel keeps "
            "one more b*s*V/t fp32 tensor"
        )
    if par.microbatches > 1:
        assumptions.append(
            f"{par.microbatches} micro-batches per step: gradients accumulate across them"
        )
    timeline = step_timeline(
        graph,
        plan,
        setup,
        counts,
        params_bytes=gpu_params,
        grads_bytes=gpu_grads,
        optimizer_bytes=gpu_opt,
        stored_activation_bytes=gpu_acts,
        step_temporary_bytes=step_temp,
        grads_resident=OffloadWhat.params not in offloaded,
        activations_offloaded=OffloadWhat.activations in offloaded,
        sharding=sharding,
        others_first=(stage.in_flight - 1) * gpu_acts,
        others_later=(
            max(stage.in_flight_later - 1, 0) * gpu_acts if par.microbatches > 1 else None
        ),
        buffer_bytes=buffers,
        reshard=par.fsdp_reshard,
        first_layer=stage.first_layer,
        extra_grad_bytes=embedding_grad_extra * setup.gradient_dtype.itemsize,
        grads_preallocated=ddp and par.bucket_view,
        pipeline_first=pipe.first,
        pipeline_later=pipe.later,
        grad_received=pipe.grad_received,
    )
    peak = timeline.peak
    flops_per_s = gpu.matmul_flops_per_s(setup.activation_dtype) * options.mfu
    step_seconds = (3 * graph.forward_flops + plan.extra_forward_flops) / flops_per_s
    comp = {c.value: plan.stored_by_component.get(c, 0) for c in Component}
    if gpu_acts != plan.stored_bytes:
        comp = {k: 0 for k in comp} | {"output": gpu_acts}
    transfers = tuple(step_transfers(par, _step_shape(graph, counts, setup, plan), _links(gpu)))
    time = step_time(
        micro_batch_compute_seconds=3 * graph.forward_flops / flops_per_s,
        micro_batch_recompute_seconds=plan.extra_forward_flops / flops_per_s,
        microbatches=par.microbatches,
        pp=par.pp,
        vpp=par.vpp,
        transfers=transfers,
        offload_overlapped_seconds=overlapped,
        offload_exposed_seconds=exposed,
        backward_window_seconds=par.microbatches * 2 * graph.forward_flops / flops_per_s,
        cpu_optimizer_seconds=cpu_step,
    )
    return Breakdown(
        model_name=model_name,
        setup=setup,
        gpu=gpu,
        options=options,
        strategy=options.label,
        params=counts,
        parameter_bytes=gpu_params,
        gradient_bytes=gpu_grads,
        optimizer_bytes=gpu_opt,
        activation_bytes=gpu_acts * stage.in_flight,
        activation_by_component={k: v * stage.in_flight for k, v in comp.items()},
        overhead_bytes=gpu.runtime_overhead_bytes,
        peak=peak,
        timeline=timeline,
        host_bytes=traffic.host_bytes,
        nvme_bytes=traffic.nvme_bytes,
        moved_bytes_per_step=traffic.host_link_bytes + traffic.nvme_link_bytes,
        transfer_seconds=traffic.seconds(gpu.host_link_bytes_per_s, options.nvme_bytes_per_s),
        forward_flops=graph.forward_flops,
        extra_forward_flops=plan.extra_forward_flops,
        step_seconds=step_seconds,
        activation_plan=plan,
        optimizer_detail=opt,
        assumptions=tuple(assumptions),
        buffer_bytes=buffers,
        stage=stage.label if par.pp > 1 else "",
        transfers=transfers,
        time=time,
    )


@dataclass(frozen=True)
class _Pipeline:
    """What ``torch.distributed.pipelining`` keeps on a stage beyond its activations."""

    buffer_bytes: int = 0
    """Receive buffers, one per micro-batch, kept across steps (``args_recv_info`` for the
    stage's input, ``grad_recv_info`` for its output's gradient)."""
    first: tuple[int, int] = (0, 0)
    """At the first backward: (outputs of the in-flight micro-batches, kept in the stage's
    ``fwd_cache`` until their backward; saved inputs that are receive buffers)."""
    later: tuple[int, int] = (0, 0)
    """The same at a later backward, where the previous micro-batch's input gradient is still
    held by its pending send (the schedule waits on sends at its next action)."""
    grad_received: bool = False
    """The gradient entering the stage's last layer is a receive buffer (not the last stage)."""


def _torch_pipeline(graph: OpGraph, setup: TrainingSetup, stage: Stage) -> _Pipeline:
    """The receive buffers and kept outputs of a ``PipelineStage`` under ``Schedule1F1B``
    (``torch/distributed/pipelining/stage.py``): a stage receives each micro-batch's input into
    its own buffer (made once, reused every step), and its output's gradient likewise; it keeps
    every in-flight micro-batch's output (the logits on the last stage) until that
    micro-batch's backward. When the first layer saves its input, that saved tensor is the
    receive buffer (counted once)."""
    par = setup.parallel
    if not par.torch_pipeline or not graph.num_layers:
        return _Pipeline()
    m = par.microbatches
    stream = graph.block(0).input.nbytes  # the residual stream between stages
    first_block = graph.kinds[graph.layout.kind_at(0)]
    saves_input = any(
        saved.name == first_block.input.name for op in first_block.ops for saved in op.saves
    )
    buffers = (0 if stage.is_first else m * stream) + (0 if stage.is_last else m * stream)
    output = graph.logits.nbytes if stage.is_last and graph.logits else stream
    aliased = stream if saves_input and not stage.is_first else 0
    first = (stage.in_flight * output, stage.in_flight * aliased)
    pending_send = 0 if stage.is_first else stream
    later = (stage.in_flight_later * output + pending_send, stage.in_flight_later * aliased)
    return _Pipeline(buffers, first, later, grad_received=not stage.is_last)


def _replicated_embedding_grad(spec: ModelSpec, stage: Stage, par: Parallelism) -> int:
    """Gradient elements the vocab-parallel embedding adds beyond its V/t x h rows under
    DTensor: ``embedding_dense_backward`` has no vocab-sharded strategy
    (``torch/distributed/tensor/_ops/_embedding_ops.py``), so the gradient is computed and kept
    replicated, V x h, on every tensor-parallel rank (measured: ``memcalc measure --tp``)."""
    if not (par.dtensor_tp and stage.is_first):
        return 0
    local = -(-spec.vocab_size // par.tp)
    return (spec.vocab_size - local) * spec.hidden_size


def _step_shape(
    graph: OpGraph, counts: ParamCounts, setup: TrainingSetup, plan: ActivationPlan
) -> StepShape:
    """What the rank's collectives depend on."""
    kinds = graph.kinds
    attn = next((b for b in kinds), None)
    kv_width = 0
    if attn is not None:
        kv_width = max((s.numel for s in attn.core_inputs[1:2]), default=0) // max(1, setup.tokens)
    forwards = plan.extra_forward_flops / max(1, graph.over_layers(lambda b: b.flops))
    return StepShape(
        tokens=setup.tokens,
        hidden=graph.block(0).input.numel // max(1, setup.tokens) if graph.num_layers else 0,
        kv_width=kv_width,
        dtype_bytes=setup.activation_dtype.itemsize,
        grad_bytes_per_param=setup.gradient_dtype.itemsize,
        weight_bytes_per_param=setup.weight_dtype.itemsize,
        layers=graph.num_layers,
        moe_layers=0,
        top_k=1,
        stage_params=counts.total,
        recompute_forwards=forwards,
    )


def _links(gpu: GpuProfile) -> Links:
    return Links(
        gpu.gpus_per_node,
        gpu.intra_node_bytes_per_s,
        gpu.inter_node_bytes_per_s,
        gpu.intra_node_link,
        gpu.inter_node_link,
    )


def _offloadable(graph: OpGraph, plan: ActivationPlan) -> int:
    """Bytes ``save_on_cpu`` moves off the GPU: what the blocks hold (their saved tensors, or
    their checkpointed inputs); the prologue/epilogue tensors stay (the loss needs them first
    in backward)."""
    outside = graph.prologue_saved_bytes + graph.epilogue_saved_bytes
    return max(0, plan.stored_bytes - outside)
