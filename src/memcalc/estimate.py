"""Op graph x strategy x setup x GPU profile -> Breakdown: the memory of one training step.

The four components (parameters, gradients, optimizer states, activations) are what lives
between phases; the peak comes from a step timeline (``timeline.py``), not a sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memcalc.graph.lower import lower
from memcalc.graph.ops import Component, OpGraph
from memcalc.optimizer import OptimizerBytes, optimizer_bytes
from memcalc.params import ParamCounts, graph_param_counts
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import Attention, TrainingSetup
from memcalc.strategies.offload import DEFAULT_NVME_BYTES_PER_S, Offload, OffloadWhat, Traffic
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
) -> Breakdown:
    """The Breakdown of one training step of a ModelSpec (lowered to its op graph).

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
    counts = graph_param_counts(graph, lm_head_numel=vocab * spec.hidden_size)
    notes = (tied, *_architecture_notes(spec, setup))
    return estimate_graph(spec.name, graph, counts, setup, gpu, options, notes=notes)


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
        if capacity is None:
            out.append(
                f"MoE load imbalance {setup.moe_imbalance:g}x on the busiest expert: no effect "
                "with every expert on this GPU (expert parallelism would scale its share)"
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
    options: Options = Options(),
    *,
    notes: tuple[str, ...] = (),
) -> Breakdown:
    """The Breakdown of one training step of any op graph (lowered or traced) with its
    parameter tensors' counts."""
    opt = optimizer_bytes(setup, counts)
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

    sharding = Sharding(setup.gpus, setup.zero)
    assumptions.append(sharding.describe())
    params_b = sharding.share(params_b, from_stage=3)
    grads_b = sharding.share(grads_b, from_stage=2)
    opt_b = sharding.share(opt_b, from_stage=1)
    traffic = Traffic()
    gpu_params, gpu_grads, gpu_opt, gpu_acts = params_b, grads_b, opt_b, plan.stored_bytes
    step_temp = sharding.share(opt.step_temporary_bytes, from_stage=1)
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
        gpu_opt, step_temp = 0, 0
        assumptions.append(f"optimizer step on the CPU ({where}); CPU Adam time not included")
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
        assumptions.append(
            "activations=cpu: saved tensors of the blocks go to pinned host "
            "memory (save_on_cpu); one block's come back at a time"
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
    )
    peak = timeline.peak
    flops_per_s = gpu.matmul_flops_per_s(setup.activation_dtype) * options.mfu
    step_seconds = (3 * graph.forward_flops + plan.extra_forward_flops) / flops_per_s
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
        parameter_bytes=gpu_params,
        gradient_bytes=gpu_grads,
        optimizer_bytes=gpu_opt,
        activation_bytes=gpu_acts,
        activation_by_component=comp,
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
    )


def _offloadable(graph: OpGraph, plan: ActivationPlan) -> int:
    """Bytes ``save_on_cpu`` moves off the GPU: what the blocks hold (their saved tensors, or
    their checkpointed inputs); the prologue/epilogue tensors stay (the loss needs them first
    in backward)."""
    outside = graph.prologue_saved_bytes + graph.epilogue_saved_bytes
    return max(0, plan.stored_bytes - outside)
