"""Op graph x strategy x setup x GPU profile -> Breakdown: the memory of one training step.

The four components (parameters, gradients, optimizer states, activations) are what lives
between phases; the peak comes from a step timeline (``timeline.py``), not a sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from memcalc.allocator.events import unmodelled
from memcalc.allocator.reserved import Reserved, reserved_for
from memcalc.frameworks import ModelCode
from memcalc.frameworks.features import Checkpointing
from memcalc.graph.lower import lower_cached
from memcalc.graph.ops import Block, Component, Gemm, OpGraph
from memcalc.optimizer import OptimizerBytes, optimizer_bytes
from memcalc.params import ParamCounts, graph_param_counts, setup_param_counts
from memcalc.profiles import GpuProfile
from memcalc.spec.megatron_setup import for_gpu
from memcalc.spec.model import ModelSpec
from memcalc.spec.parallel import Parallelism
from memcalc.spec.training import Attention, TrainingSetup
from memcalc.steptime import StepTime, rank_forward_flops, runtime_of, step_of
from memcalc.strategies.checkpointing import framework_plan
from memcalc.strategies.comms import Links, StepShape, Transfer, step_transfers
from memcalc.strategies.offload import OffloadWhat
from memcalc.strategies.options import DEFAULT_HEADROOM as DEFAULT_HEADROOM
from memcalc.strategies.options import DEFAULT_MFU as DEFAULT_MFU
from memcalc.strategies.options import MIN_MFU as MIN_MFU
from memcalc.strategies.options import NO_STRATEGY
from memcalc.strategies.options import RESERVED_HEADROOM as RESERVED_HEADROOM
from memcalc.strategies.options import Options as Options
from memcalc.strategies.pipeline import Stage, in_flight, pipeline_stages
from memcalc.strategies.placement import Placement, gpu_activation_bytes
from memcalc.strategies.recompute import ActivationPlan, Recompute
from memcalc.strategies.residency import Residency
from memcalc.strategies.residency.compose import (
    RankInputs,
    held_activations,
    tensor_parallel_extras,
)
from memcalc.strategies.residency.engines import rank_of
from memcalc.strategies.residency.megatron_schedule import stage_chunks
from memcalc.strategies.sharding import Sharding, sharding_of
from memcalc.timeline import Moment, RankState, Timeline, gradient_totals, step_timeline


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
    """Kernel time of one micro-batch (forward, backward and recompute; no communication,
    bubble or optimizer step -- those are in ``time``). JSON: ``micro_batch_compute_seconds``
    (and the old name ``step_seconds``)."""
    activation_plan: ActivationPlan
    optimizer_detail: OptimizerBytes
    assumptions: tuple[str, ...] = field(default=())
    buffer_bytes: int = 0
    """Communication buffers and workspaces on the GPU throughout (DDP's gradient buckets,
    library GEMM workspaces, the distributed optimizer's padding)."""
    between_steps_bytes: int = 0
    """Allocated on the GPU after the optimizer step (what ``torch.cuda.memory_allocated``
    reads between steps): parameters, optimizer states, buffers and workspaces, and the
    gradients where the framework keeps them (Megatron's gradient buffer)."""
    stage: str = ""
    """The pipeline stage this breakdown is of ("" without pipeline parallelism)."""
    stages: tuple[Breakdown, ...] = ()
    """Every pipeline stage's breakdown (this one is the most loaded)."""
    transfers: tuple[Transfer, ...] = ()
    """The step's collectives on this rank."""
    time: StepTime | None = None
    """The step's time, by part (the model ``plan`` ranks by)."""
    graph: OpGraph | None = field(default=None, repr=False, compare=False)
    """The op graph estimated (the allocator replay reads it)."""
    device: str = "cuda"
    model_parameter_count: int | None = None
    """Parameters of the whole model under this setup (adapters included), all ranks
    together, when the layout splits them (tp, pp or ep > 1); None: ``params`` is the whole
    model."""

    @cached_property
    def reserved(self) -> Reserved:
        """The caching allocator replayed over this step (``allocator.reserved``); computed
        on first use."""
        if self.graph is None:
            return Reserved(self.options.alloc_conf, "no op graph to replay")
        reserve = int(self.gpu.memory_bytes * self._headroom(modelled=True))
        return reserved_for(
            self.graph,
            self.activation_plan,
            self.setup,
            self.params,
            self.options.alloc_conf,
            device_memory=self.gpu.memory_bytes,
            capacity=self.gpu.memory_bytes - reserve - self.overhead_bytes,
            offloaded=bool(self.options.offload),
            device=self.device,
        )

    def _headroom(self, *, modelled: bool) -> float:
        if self.options.headroom is not None:
            return self.options.headroom
        return RESERVED_HEADROOM if modelled else DEFAULT_HEADROOM

    @property
    def headroom_fraction(self) -> float:
        """The fraction of GPU memory kept free in the verdict (``Options.headroom``)."""
        return self._headroom(modelled=self.reserved.modelled)

    @property
    def reserved_total_bytes(self) -> int:
        """Reserved memory plus the runtime overhead (what ``nvidia-smi`` shows); the
        allocated peak plus the overhead when the step is not replayed."""
        if not self.reserved.modelled:
            return self.peak_bytes
        return self.reserved.reserved_peak_bytes + self.overhead_bytes

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
        """One micro-batch's recompute seconds."""
        if self.time is None:
            return 0.0
        return self.time.recompute_seconds / self.setup.parallel.microbatches

    @property
    def transfer_hidden(self) -> bool:
        """True when transfers take less time than the step's compute (so prefetch/overlap
        can hide them)."""
        return self.transfer_seconds <= self.step_seconds

    @property
    def reserve_bytes(self) -> int:
        """GPU memory kept free for fragmentation and workspaces (``options.headroom``)."""
        return int(self.gpu.memory_bytes * self.headroom_fraction)

    @property
    def usable_bytes(self) -> int:
        """GPU memory the peak may use: the device's minus the reserve."""
        return self.gpu.memory_bytes - self.reserve_bytes

    @property
    def headroom_bytes(self) -> int:
        """GPU memory left at the peak: beside reserved memory and the overhead when the step
        is replayed, else beside the allocated peak (negative: over the device)."""
        return self.gpu.memory_bytes - self.reserved_total_bytes

    @property
    def ranks_per_node(self) -> int:
        """GPUs of this job on one server (they share its host RAM and NVMe)."""
        return min(self.setup.parallel.world_size, self.gpu.gpus_per_node)

    @property
    def host_bytes_per_node(self) -> int:
        """Host RAM the node's ranks pin for offloaded states (this rank's x ranks per node)."""
        return self.host_bytes * self.ranks_per_node

    @property
    def host_memory_per_node(self) -> int:
        return self.gpu.host_memory_bytes_per_gpu * self.gpu.gpus_per_node

    @property
    def nvme_bytes_per_node(self) -> int:
        return self.nvme_bytes * self.ranks_per_node

    @property
    def nvme_capacity_per_node(self) -> int:
        return self.gpu.nvme_bytes_per_gpu * self.gpu.gpus_per_node

    @property
    def over_gpu_bytes(self) -> int:
        """Bytes the peak exceeds the usable GPU memory by (0 when it fits). A replayed step
        fits when the allocator finishes it within the usable memory, releasing its cache and
        retrying if it must (``alloc_retries``)."""
        r = self.reserved
        if not r.modelled:
            return max(0, self.peak_bytes - self.usable_bytes)
        if r.bounded is None or not r.out_of_memory:
            return 0
        return max(1, self.reserved_total_bytes - self.usable_bytes)

    @property
    def over_host_bytes(self) -> int:
        return max(0, self.host_bytes_per_node - self.host_memory_per_node)

    @property
    def over_nvme_bytes(self) -> int:
        return max(0, self.nvme_bytes_per_node - self.nvme_capacity_per_node)

    @property
    def fits(self) -> bool:
        """The peak leaves the reserve free, and the node's host RAM and NVMe hold what is
        offloaded to them."""
        return not (self.over_gpu_bytes or self.over_host_bytes or self.over_nvme_bytes)


def estimate(
    spec: ModelSpec,
    setup: TrainingSetup,
    gpu: GpuProfile,
    options: Options = NO_STRATEGY,
    *,
    graph: OpGraph | None = None,
    device: str = "cuda",
    dp_rank: int | None = None,
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
    setup = for_gpu(setup, gpu.compute_capability)
    setup = setup.with_kbit_input_grads(options.recompute is not Recompute.none)
    graph = graph or lower_cached(spec, setup, device=device)
    tied = "tied embedding counted once" if spec.tie_embeddings else "untied embedding and LM head"
    par = setup.parallel
    chunks = stage_chunks(graph.num_layers, setup)
    stages = pipeline_stages(graph, par, tied=spec.tie_embeddings, chunks=chunks)
    notes: tuple[str, ...] = (tied, *_architecture_notes(spec, setup))
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
        key = (
            st.graph.layout,
            st.is_first,
            st.is_last,
            st.in_flight,
            st.in_flight_later,
            st.index if st.chunks else 0,
        )
        if key not in done:
            counts = stage_param_counts(spec, setup, graph, st)
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
                embedding=(spec.vocab_size, spec.hidden_size) if st.is_first else None,
                dp_rank=dp_rank,
            )
        results.append(done[key])
    worst = max(results, key=lambda b: b.peak_bytes)
    if max(par.tp, par.pp, par.ep) > 1:
        whole = setup_param_counts(spec, setup.replace(parallel=Parallelism()))
        worst = replace(worst, model_parameter_count=whole.total)
    if par.pp == 1:
        return worst
    # the step lasts as long as its slowest stage
    slowest = max(results, key=lambda b: b.time.total_seconds if b.time else 0.0)
    return replace(worst, stages=tuple(results), time=slowest.time)


def stage_param_counts(
    spec: ModelSpec, setup: TrainingSetup, graph: OpGraph, stage: Stage
) -> ParamCounts:
    """The parameter counts one rank of ``stage`` holds (the LM head's weight on the last)."""
    vocab = graph.logits.numel // setup.tokens if graph.logits else spec.vocab_size
    return graph_param_counts(
        stage.graph, lm_head_numel=vocab * spec.hidden_size if stage.is_last else 0
    )


def _architecture_notes(spec: ModelSpec, setup: TrainingSetup) -> list[str]:
    """Assumptions the MoE and MLA lowerings make (see graph/blocks/moe.py, mla.py)."""
    out = []
    moe = spec.moe
    if moe is not None and spec.moe_layers:
        capacity = setup.capacity_factor
        if capacity is None:
            capacity = moe.capacity_factor
        routing = (
            f"capacity factor {capacity:g}: every expert's buffer ceil(t*k/E x {capacity:g}) rows "
            "(Megatron-core; HF has no capacity routing)"
            if capacity is not None
            else "dropless routing (HF grouped_mm experts): t*k rows through the experts"
        )
        out.append(
            f"MoE: {moe.top_k} of {moe.num_experts} experts per token, {routing}; "
            f"{spec.moe_layers} MoE layers"
        )
        ep = setup.parallel.ep
        if capacity is None and ep == 1:
            out.append(
                f"MoE load imbalance {setup.moe_imbalance:g}x on the busiest expert: no effect "
                "with every expert on this GPU (expert parallelism would scale its share)"
            )
        elif capacity is None:
            out.append(
                f"expert parallelism {ep}: {moe.num_experts // ep} experts per GPU, whose "
                f"tokens come from {ep} GPUs; the busiest GPU gets {setup.moe_imbalance:g}x its "
                "fair share (--moe-imbalance)"
            )
    if spec.mla is not None and setup.attention is not Attention.eager:
        out.append(
            "MLA attention (q/k head dim != v head dim): a fused CUDA kernel (mem-efficient) "
            "saving q, k, v, out and logsumexp; CPU SDPA would run the fp32 math kernel and "
            "keep the s x s scores"
        )
    return out


def estimate_graph(
    model_name: str,
    graph: OpGraph,
    counts: ParamCounts,
    setup: TrainingSetup,
    gpu: GpuProfile,
    options: Options = NO_STRATEGY,
    *,
    notes: tuple[str, ...] = (),
    stage: Stage | None = None,
    device: str = "cuda",
    embedding: tuple[int, int] | None = None,
    dp_rank: int | None = None,
) -> Breakdown:
    """The Breakdown of one training step of any op graph (lowered or traced) with its
    parameter tensors' counts, on one rank of ``stage`` (the whole model without pipeline
    parallelism). ``embedding``: the (V, h) embedding table whose rows this rank holds (for
    DTensor tensor parallelism, whose embedding gradient is the full table). ``dp_rank``: the
    data-parallel rank to describe, where ranks differ (DeepSpeed ZeRO-1/2's partitions);
    None: the most loaded."""
    if stage is None:
        k, later = in_flight(0, setup.parallel)
        stage = Stage(0, 0, graph, k, later, True, True)
    inputs = _rank_inputs(graph, counts, setup, gpu, options, stage, device, embedding, dp_rank)
    placed, rank = rank_of(inputs)
    first, timeline = _rank_timeline(inputs, placed, rank)
    transfers, time = _rank_time(inputs, options, placed)
    par = setup.parallel
    plan, opt, gpu_acts = inputs.plan, inputs.optimizer, inputs.kept_activation_bytes
    assert plan is not None
    comp = {c.value: plan.stored_by_component.get(c, 0) for c in Component}
    if gpu_acts != plan.stored_bytes:
        comp = {k: 0 for k in comp} | {"output": gpu_acts}
    return Breakdown(
        model_name=model_name,
        setup=setup,
        gpu=gpu,
        options=options,
        strategy=options.label,
        params=counts,
        parameter_bytes=placed.gpu_parameter_bytes,
        gradient_bytes=placed.gpu_gradient_bytes,
        optimizer_bytes=placed.gpu_optimizer_bytes,
        activation_bytes=gpu_acts + first,
        activation_by_component=_scaled(comp, gpu_acts + first, gpu_acts),
        overhead_bytes=gpu.runtime_overhead_bytes,
        peak=timeline.peak,
        timeline=timeline,
        host_bytes=placed.host_bytes,
        nvme_bytes=placed.nvme_bytes,
        moved_bytes_per_step=placed.host_link_bytes + placed.nvme_link_bytes,
        transfer_seconds=placed.host_link_bytes / gpu.host_link_bytes_per_s
        + (placed.nvme_link_bytes / gpu.nvme_bytes_per_s if placed.nvme_link_bytes else 0.0),
        forward_flops=rank_forward_flops(graph, par.cp),
        extra_forward_flops=plan.extra_forward_flops,
        # one micro-batch's kernels (forward, backward, recompute)
        step_seconds=(time.compute_seconds + time.recompute_seconds) / par.microbatches,
        activation_plan=plan,
        optimizer_detail=opt,
        assumptions=_assumptions(
            setup, gpu, options, notes, opt, counts, inputs.sharding, placed, rank, device
        ),
        buffer_bytes=rank.buffer_bytes,
        between_steps_bytes=placed.gpu_parameter_bytes
        + placed.gpu_optimizer_bytes
        + rank.buffer_bytes
        + rank.gradients.between_steps()
        + rank.pipeline.after_step
        + inputs.sharding.share(opt.persistent_temporary_bytes, 1),
        stage=stage.label if par.pp > 1 else "",
        transfers=transfers,
        time=time,
        graph=graph,
        device=device,
    )


def _rank_inputs(
    graph: OpGraph,
    counts: ParamCounts,
    setup: TrainingSetup,
    gpu: GpuProfile,
    options: Options,
    stage: Stage,
    device: str,
    embedding: tuple[int, int] | None,
    dp_rank: int | None,
) -> RankInputs:
    """What the sharding engine places for one rank: the recompute plan, the optimizer's
    bytes, the framework's sharding and tensor-parallel extras, the activations kept on the
    GPU."""
    plan = _plan(graph, options, setup.framework_def.checkpointing)
    instances = setup.megatron_options.distributed_optimizer_instances
    sharding = sharding_of(setup.parallel, setup.framework_def, instances if setup.megatron else 1)
    extras = tensor_parallel_extras(setup, graph, embedding)
    extra_grad_bytes = extras.embedding_grad_numel * setup.gradient_dtype.itemsize
    gpu_acts = gpu_activation_bytes(
        plan.stored_bytes,
        graph.prologue_saved_bytes + graph.epilogue_saved_bytes,
        any(o.what is OffloadWhat.activations for o in options.offload),
    )
    return RankInputs(
        graph,
        setup,
        counts,
        optimizer_bytes(setup, counts, device),
        sharding,
        options.offload,
        gpu,
        stage,
        extras,
        gradient_totals(graph, counts, setup.gradient_dtype.itemsize, extra_grad_bytes),
        plan.stored_bytes,
        gpu_acts,
        device,
        dp_rank,
        plan,
    )


def _rank_timeline(inputs: RankInputs, placed: Placement, rank: Residency) -> tuple[int, Timeline]:
    """The activations other in-flight micro-batches hold (first micro-batch's share) and the
    step's timeline on this rank."""
    graph, setup, stage, plan = inputs.graph, inputs.setup, inputs.stage, inputs.plan
    assert plan is not None
    state = RankState(
        placed.gpu_parameter_bytes,
        placed.gpu_optimizer_bytes,
        inputs.kept_activation_bytes,
        placed.step_temporary_bytes,
        placed.activations_offloaded,
        None if placed.grads_resident else placed.gpu_gradient_bytes,
    )
    layer_bytes = [plan.layer_stored(i) for i in range(graph.num_layers)]
    rest = inputs.kept_activation_bytes - sum(layer_bytes)
    first, later = held_activations(setup, stage, layer_bytes, rest)
    timeline = step_timeline(
        graph,
        plan,
        setup,
        inputs.counts,
        state,
        rank,
        others_first=first,
        others_later=later if setup.parallel.microbatches > 1 else None,
        first_layer=stage.first_layer,
    )
    return first, timeline


def _rank_time(
    inputs: RankInputs, options: Options, placed: Placement
) -> tuple[tuple[Transfer, ...], StepTime]:
    """The step's collectives and its time on this rank."""
    graph, setup, gpu, plan = inputs.graph, inputs.setup, inputs.gpu, inputs.plan
    assert plan is not None
    par = setup.parallel
    runtime = options.runtime or runtime_of(setup)
    shape = step_shape(graph, inputs.counts, setup, plan)
    transfers = tuple(step_transfers(par, shape, links_of(gpu), runtime.overlaps))
    time = step_of(
        graph,
        plan,
        gpu,
        runtime,
        microbatches=par.microbatches,
        pp=par.pp,
        vpp=par.vpp,
        cp=par.cp,
        transfers=transfers,
        placed=placed,
        flat_flops_per_s=flat_rate(gpu, setup, options.mfu),
    )
    return transfers, time


def _hf_kernels(setup: TrainingSetup) -> str:
    return f"attention kernel {setup.attention.value}; loss {setup.loss.value}"


def _megatron_kernels(setup: TrainingSetup) -> str:
    opts = setup.megatron_options
    return (
        f"Megatron-core GPT ({opts.transformer_impl.value} layers): attention backend "
        f"{opts.attention_backend.value}, vocab-parallel cross-entropy (fusion "
        f"{opts.cross_entropy_fusion.value}), TE FusedAdam"
        + ("" if opts.fused_adam else " unavailable: torch AdamW")
        + (f", recompute modules {', '.join(opts.recompute_modules)}")
    )


KERNEL_NOTES = {
    ModelCode.hf: _hf_kernels,
    ModelCode.ours: _hf_kernels,
    ModelCode.torchtitan: _hf_kernels,
    ModelCode.megatron_core: _megatron_kernels,
}
"""The assumption line naming the kernels of each framework's model code."""


def _scaled(comp: dict[str, int], held: int, one: int) -> dict[str, int]:
    """One micro-batch's activations by component, scaled to the ``held`` bytes of the
    micro-batches in flight."""
    return {k: v * held // max(one, 1) for k, v in comp.items()}


def _assumptions(
    setup: TrainingSetup,
    gpu: GpuProfile,
    options: Options,
    notes: tuple[str, ...],
    opt: OptimizerBytes,
    counts: ParamCounts,
    sharding: Sharding,
    placed: Placement,
    rank: Residency,
    device: str,
) -> tuple[str, ...]:
    """Every assumption that changes a number, as the report states it."""
    par = setup.parallel
    out = [
        f"precision {setup.precision.value}: weights {setup.weight_dtype.value}, gradients "
        f"{setup.gradient_dtype.value}, optimizer states {setup.optimizer_dtype.value}"
        + (", fp32 master weights" if setup.precision.is_mixed else "")
        + (
            f"; torch.autocast: matmuls in {setup.activation_dtype.value}, each saving "
            f"{setup.activation_dtype.value} casts of its input and weight"
            if setup.precision.is_amp
            else ""
        ),
        KERNEL_NOTES[setup.framework_def.model_code](setup),
        *notes,
        f"runtime overhead {gpu.runtime_overhead_bytes} bytes from the GPU profile "
        "(context + workspaces)",
        _verdict_note(setup, options, device),
        "logits are freed after the loss (as HF Trainer does); keeping model outputs alive "
        "adds b*s*V of the activation dtype",
    ]
    if setup.optimizer_foreach and opt.step_temporary_bytes:
        out.append("foreach optimizer step: temporaries the size of all parameters")
    if opt.step_tensor_bytes and not opt.step_on_device:
        out.append(
            f"optimizer step counters ({opt.step_tensor_bytes} bytes) on the host: torch keeps "
            "them on the GPU only for fused or capturable Adam"
        )
    out.append(sharding.describe())
    if par.world_size > par.dp:
        out.append(f"layout: {par.describe()}")
    if setup.lora is not None:
        out.append(_lora_note(setup, counts))
    out.extend(placed.notes)
    out.extend(rank.notes)
    if par.microbatches > 1:
        out.append(f"{par.microbatches} micro-batches per step: gradients accumulate across them")
    return tuple(out)


def _verdict_note(setup: TrainingSetup, options: Options, device: str) -> str:
    """How ``fits`` is judged for this step (the allocator replay, or the allocated peak with
    a reserve where the replay does not model the layout)."""
    why = unmodelled(setup, offloaded=bool(options.offload), device=device)
    if why is None:
        h = RESERVED_HEADROOM if options.headroom is None else options.headroom
        return (
            "fits = reserved memory (torch's CUDA caching allocator replayed over the step's "
            f"allocations: docs/allocator.md; {options.alloc_conf.describe()}; one stream) "
            f"plus the runtime overhead within the GPU's memory less {h:.0%} (--headroom); a "
            "step that needs cache flushes (num_alloc_retries) still fits"
        )
    h = DEFAULT_HEADROOM if options.headroom is None else options.headroom
    return (
        f"fits = peak at most {1 - h:.0%} of GPU memory: {h:.0%} kept free for allocator "
        "fragmentation (GMLake, Guo et al. 2024: 15% on average with the default caching "
        f"allocator; --headroom); reserved memory not replayed: {why}"
    )


_PLANS: dict[tuple[object, ...], tuple[OpGraph, ActivationPlan]] = {}


def _plan(graph: OpGraph, options: Options, rule: Checkpointing) -> ActivationPlan:
    """The activation plan of ``graph`` under ``options``' recompute as the framework's
    checkpointing modes (``rule``) run it, computed once per graph object (the graph is kept
    with it, so its id is not reused)."""
    key = (id(graph), options.recompute, options.every, options.budget_bytes, rule)
    hit = _PLANS.get(key)
    if hit is None or hit[0] is not graph:
        if len(_PLANS) > 2048:
            _PLANS.clear()
        plan = framework_plan(
            graph, options.recompute, rule, every=options.every, budget_bytes=options.budget_bytes
        )
        hit = _PLANS[key] = (graph, plan)
    return hit[1]


def _lora_note(setup: TrainingSetup, counts: ParamCounts) -> str:
    lora = setup.lora
    assert lora is not None
    parts = [
        f"LoRA r={lora.rank} on {', '.join(lora.targets) or 'PEFT default targets'} "
        f"({lora.adapter_dtype.value} adapters): {counts.trainable:,} trainable, "
        f"{counts.frozen:,} frozen parameters (no gradient, no optimizer state)"
    ]
    if setup.quantize.value != "none":
        parts.append(f"base linear weights {setup.quantize.value} (bitsandbytes storage)")
    if setup.prepared_for_kbit:
        parts.append("prepare_model_for_kbit_training: non-quantized parameters in fp32")
    parts.append(
        "first layer saves from its first op (embedding output requires grad)"
        if setup.embedding_output_requires_grad
        else "the frozen embedding's output needs no grad: the first layer's first norm saves "
        "nothing"
    )
    return "; ".join(parts)


def flat_rate(gpu: GpuProfile, setup: TrainingSetup, mfu: float | None) -> float | None:
    """``--mfu``'s rate: that fraction of the dense peak in the activation dtype (None: the
    kernel model)."""
    return None if mfu is None else gpu.matmul_flops_per_s(setup.activation_dtype) * mfu


def step_shape(
    graph: OpGraph, counts: ParamCounts, setup: TrainingSetup, plan: ActivationPlan
) -> StepShape:
    """What the rank's collectives depend on: the stage's layers and MoE layers (a block whose
    routed experts run as a grouped GEMM), the rows its experts receive, its parameters."""
    par = setup.parallel
    kinds = graph.kinds
    attn = next((b for b in kinds), None)
    kv_width = 0
    if attn is not None:
        kv_width = max((s.numel for s in attn.core_inputs[1:2]), default=0) // max(1, setup.tokens)
    forwards = plan.extra_forward_flops / max(1, graph.over_layers(lambda b: b.flops))
    expert_rows = [_expert_rows(b) for b in kinds]
    moe_layers = sum(c for r, c in zip(expert_rows, graph.kind_counts, strict=True) if r)
    return StepShape(
        tokens=setup.tokens,
        # the residual stream's width (sequence parallelism shards its tokens, not its width)
        hidden=graph.block(0).input.numel
        // max(1, setup.tokens)
        * (par.tp if par.sequence_parallel else 1)
        if graph.num_layers
        else 0,
        kv_width=kv_width,
        dtype_bytes=setup.activation_dtype.itemsize,
        grad_bytes_per_param=setup.gradient_dtype.itemsize,
        weight_bytes_per_param=setup.weight_dtype.itemsize,
        layers=graph.num_layers,
        moe_layers=moe_layers,
        expert_rows=max(expert_rows, default=0),
        stage_params=counts.trainable,
        recompute_forwards=forwards,
        expert_params=counts.optimizer_counts.expert,
    )


def _expert_rows(block: Block) -> int:
    """Rows a block's routed experts process per micro-batch on this rank (0: no routed
    experts): the grouped GEMM over the expert weights (``ParamTensor.active_numel`` marks
    them), its groups x rows per group -- the tokens the all-to-all brings in."""
    for op in block.ops:
        routed = any(w.active_numel is not None for w in op.weights)
        if routed and isinstance(op.work, Gemm):
            return op.work.groups * op.work.m
    return 0


def links_of(gpu: GpuProfile) -> Links:
    """The bandwidths of the profile's server and network."""
    return Links(
        gpu.gpus_per_node,
        gpu.intra_node_bytes_per_s,
        gpu.inter_node_bytes_per_s,
        gpu.intra_node_link,
        gpu.inter_node_link,
    )
