"""Proven lower bounds on a configuration's peak GPU memory and step time, cheap enough to
decide most of the search without a full estimate.

Both come from the first pipeline stage (the whole model without pipelining), computed with
the same lowering, recompute plans and placement (``strategies/placement.py``) ``estimate``
uses; ``estimate`` reports the most loaded stage's memory and the slowest stage's time, so
a bound on the first stage bounds what it reports.

- Memory: at its first backward the rank holds its parameters, optimizer states and the
  activations of every micro-batch in flight; at a later backward (gradient accumulation)
  those of the micro-batches then in flight and every gradient; at the end of the backward its
  parameters, optimizer states and gradients. The peak is at least the largest, plus the
  runtime overhead. Transients (the
  loss's logits, gathered ZeRO-3 blocks, recomputed segments) only add to it.
- Time: compute and recompute of every micro-batch, the pipeline bubble, the CPU optimizer
  step, the offload transfers no compute hides and the collectives of the step without
  recompute (``step_time``'s model with the recomputed forwards' collectives left out: they
  only add); the last stage's compute bounds it too (it holds the LM head).

``tests/test_plan.py`` checks both bounds against full estimates over random configurations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from memcalc.errors import MemcalcError
from memcalc.estimate import Options, flat_rate, links_of, stage_param_counts, step_shape
from memcalc.graph.lower import lower_cached
from memcalc.graph.ops import OpGraph
from memcalc.optimizer import OptimizerBytes, optimizer_bytes
from memcalc.params import ParamCounts
from memcalc.plan.space import Candidate
from memcalc.plan.strategies import OFFLOADS
from memcalc.profiles import GpuProfile
from memcalc.spec.compat import framework_fallback
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.steptime import (
    Kernels,
    MicroBatch,
    kernels_of,
    micro_batch,
    optimizer_step_seconds,
    runtime_of,
    step_time,
)
from memcalc.steptime.schedule import (
    NO_HOST_TRAFFIC,
    Windows,
    compose,
    exposed_collectives,
    offload_exposed,
    windows_of,
)
from memcalc.strategies.comms import (
    StepShape,
    Transfer,
    data_parallel_transfers,
    model_parallel_transfers,
)
from memcalc.strategies.offload import Offload, OffloadWhat, OffloadWhere
from memcalc.strategies.pipeline import Stage, in_flight, pipeline_stages
from memcalc.strategies.placement import HostTraffic, Placement, place
from memcalc.strategies.recompute import ActivationPlan, Recompute, plan_for, sqrt_k
from memcalc.strategies.sharding import Sharding
from memcalc.validate import derive


@dataclass(frozen=True)
class StageFacts:
    """What the bounds need of one layout's first pipeline stage."""

    counts: ParamCounts
    optimizer: OptimizerBytes
    outside_blocks_bytes: int
    """Saved bytes of the prologue and epilogue (they stay on the GPU under activations=cpu)."""
    forward_flops: int
    plans: dict[Recompute, ActivationPlan]
    in_flight: int
    """Micro-batches the stage holds at its first backward (no gradients yet)..."""
    in_flight_later: int
    """... and at a later one, when every gradient has been accumulated once."""
    graph: OpGraph
    last_forward_flops: int
    """The last stage's (it holds the LM head and loss: often the slowest stage)."""
    last_extra_flops: dict[Recompute, int]
    shape: StepShape
    """What the first stage's collectives depend on (without recompute)."""
    kernels: MicroBatch
    """One micro-batch's kernel time on the first stage..."""
    last_kernels: MicroBatch
    """... and on the slowest stage (``last_*``: that stage's)."""
    last_shape: StepShape
    """What the slowest stage's collectives depend on."""

    @property
    def flops_per_saved_byte(self) -> float:
        """The fewest extra forward FLOPs per activation byte any recompute choice saves: a
        lower bound on what the budget plan pays per byte it saves when every layer is of one
        kind (it mixes these per-layer choices; the ratio of a mix is no better than its
        best part). 0 -- no bound -- with several kinds of layer."""
        if len(self.graph.kinds) != 1:
            return 0.0
        none = self.plans[Recompute.none].stored_bytes
        ratios = [
            p.extra_forward_flops / (none - p.stored_bytes)
            for r, p in self.plans.items()
            if r in (Recompute.selective, Recompute.full) and p.stored_bytes < none
        ]
        return min(ratios, default=0.0)

    @property
    def min_stored_bytes(self) -> int:
        """The fewest activation bytes any recompute plan stores (the budget plan's floor)."""
        return min(p.stored_bytes for p in self.plans.values())


def layout_setup(
    base: TrainingSetup, layout: Candidate, zero: int = 0, spec: ModelSpec | None = None
) -> TrainingSetup:
    """``base`` run on ``layout`` at ZeRO ``zero``; with ``spec``, on HF's code where the
    layout's default framework (Megatron-core, with tp / pp) cannot build it, as ``memcalc
    estimate`` falls back (``spec.compat.framework_fallback``)."""
    setup = base.replace(batch=layout.batch, parallel=layout.parallel.replace(zero=zero))
    fallback = framework_fallback(spec, setup) if spec is not None else None
    return setup if fallback is None else setup.replace(framework=fallback.value)


def fixed_options(num_layers: int, base: Options) -> dict[Recompute, Options]:
    """The recompute strategies with a fixed plan, as Options (every-k at round(sqrt(L)))."""
    k = sqrt_k(num_layers)
    return {
        r: Options(
            recompute=r,
            every=k if r is Recompute.every_k else None,
            mfu=base.mfu,
            headroom=base.headroom,
            runtime=base.runtime,
            alloc_conf=base.alloc_conf,
        )
        for r in (Recompute.none, Recompute.selective, Recompute.every_k, Recompute.full)
    }


class Bounds:
    """Lower bounds for the configurations of one model, base setup and GPU."""

    def __init__(
        self, spec: ModelSpec, base: TrainingSetup, gpu: GpuProfile, options: Options
    ) -> None:
        self.spec, self.base, self.gpu = spec, base, gpu
        self.fixed = fixed_options(spec.num_layers, options)
        self.runtime = options.runtime or runtime_of(base)
        self.flat = flat_rate(gpu, base, options.mfu)
        # automatic headroom prunes with none: a step whose reserved memory is replayed may use
        # the whole device, and the bound (an allocated-peak bound) is below its reserved peak
        self.usable = gpu.memory_bytes - int(gpu.memory_bytes * (options.headroom or 0.0))
        self._stages: dict[tuple[int, int], tuple[OpGraph, bool, bool]] = {}
        self._facts: dict[tuple[object, ...], StageFacts | None] = {}
        self._by_split: dict[tuple[object, ...], StageFacts | None] = {}
        self._counts: dict[tuple[object, ...], tuple[ParamCounts, OptimizerBytes]] = {}
        self._placements: dict[tuple[int, int, int, int], Placement] = {}
        self._transfers: dict[tuple[object, ...], Windows] = {}
        self._heads: dict[tuple[object, ...], Windows] = {}
        self._dp: dict[tuple[object, ...], list[Transfer]] = {}
        self.overlaps = self.runtime.overlaps
        self.links = links_of(gpu)

    def facts(self, layout: Candidate) -> StageFacts | None:
        """The first stage's facts, or None when the layout cannot run this model (a tp that
        does not divide the heads, more stages than layers)."""
        par = layout.parallel
        key = (layout.batch, par.tp, par.cp, par.pp, par.vpp, par.microbatches, par.ep)
        if key not in self._facts:
            shared = self._shared(layout)
            self._facts[key] = (
                None
                if shared is None
                else dataclasses.replace(
                    shared,
                    in_flight=in_flight(0, par)[0],
                    in_flight_later=in_flight(0, par)[1],
                )
            )
        return self._facts[key]

    def _shared(self, layout: Candidate) -> StageFacts | None:
        """What does not depend on the accumulation or data-parallel size (in_flight unset)."""
        par = layout.parallel
        key = (layout.batch, par.tp, par.cp, par.pp, par.ep)
        if key not in self._by_split:
            self._by_split[key] = self._compute(layout)
        return self._by_split[key]

    def _compute(self, layout: Candidate) -> StageFacts | None:
        setup = layout_setup(self.base, layout, spec=self.spec)
        try:
            graph = lower_cached(self.spec, setup)
            stages = pipeline_stages(graph, setup.parallel, tied=self.spec.tie_embeddings)
        except MemcalcError:
            return None
        cp = setup.parallel.cp

        def kernels(st: Stage) -> MicroBatch:
            return micro_batch(st.graph, self.gpu, self.runtime, cp=cp, flat_flops_per_s=self.flat)

        # the slowest stage's kernels bound the step too (the LM head's, or a stage of
        # heavier layers: DeepSeek's MoE layers after its dense ones)
        stage, last = stages[0], slowest_stage(stages, kernels)
        # the parameters do not depend on the micro-batch or the sequence split
        key = (setup.parallel.tp, setup.parallel.pp, setup.parallel.ep)
        if key not in self._counts:
            c = stage_param_counts(self.spec, setup, graph, stage)
            self._counts[key] = (c, optimizer_bytes(setup, c, "cuda"))
        counts, optimizer = self._counts[key]
        g = stage.graph
        plans, last_extra = {}, {}
        for r, o in self.fixed.items():
            try:
                plans[r] = plan_for(g, r, every=o.every, budget_bytes=None)
                last_plan = (
                    plans[r]
                    if last is stage
                    else plan_for(last.graph, r, every=o.every, budget_bytes=None)
                )
                last_extra[r] = last_plan.extra_forward_flops
            except MemcalcError:  # every-k with k over a stage's layers
                plans.pop(r, None)
                continue
        shape = step_shape(g, counts, setup, plans[Recompute.none])
        return StageFacts(
            counts=counts,
            optimizer=optimizer,
            outside_blocks_bytes=g.prologue_saved_bytes + g.epilogue_saved_bytes,
            forward_flops=g.forward_flops,
            plans=plans,
            in_flight=0,
            in_flight_later=0,
            graph=g,
            last_forward_flops=last.graph.forward_flops,
            last_extra_flops=last_extra,
            shape=shape,
            kernels=kernels(stage),
            last_kernels=kernels(last),
            last_shape=shape
            if last is stage
            else step_shape(
                last.graph,
                stage_param_counts(self.spec, setup, graph, last),
                setup,
                plan_for(last.graph, Recompute.none),
            ),
        )

    def placement(self, facts: StageFacts, dp: int, zero: int, choice: int) -> Placement:
        """The first stage's model states placed under ZeRO ``zero`` over ``dp`` ranks and
        offload ``choice`` (activations excluded: the bounds add them)."""
        key = (id(facts.counts), dp, zero, choice)
        hit = self._placements.get(key)
        if hit is None:
            states_only = tuple(o for o in OFFLOADS[choice] if o != ACTIVATIONS)
            hit = self._placements[key] = place(
                facts.counts, self.base, facts.optimizer, Sharding(dp, zero), states_only, self.gpu
            )
        return hit

    def communication(
        self,
        facts: StageFacts,
        layout: Candidate,
        zero: int,
        forwards: float = 0.0,
        shape: StepShape | None = None,
    ) -> Windows:
        """The first stage's collectives (``shape``: another stage's), summed by window, with
        ``forwards`` extra forwards of recompute repeating theirs (0: a lower bound for any
        recompute)."""
        of = shape or facts.shape
        key = (id(of), layout.parallel, zero, forwards)
        hit = self._transfers.get(key)
        if hit is None:
            # the model-parallel collectives do not depend on the ZeRO stage, the
            # data-parallel ones not on recompute: each is built once, and summed in
            # step_transfers' order
            head_key = (id(of), layout.parallel, forwards)
            head = self._heads.get(head_key)
            if head is None:
                shape = dataclasses.replace(of, recompute_forwards=forwards)
                m = layout.parallel.microbatches
                head = self._heads[head_key] = windows_of(
                    model_parallel_transfers(layout.parallel, shape, self.links, self.overlaps),
                    m,
                )
            dp_key = (id(of), layout.parallel, zero)
            dp = self._dp.get(dp_key)
            if dp is None:
                par = derive(layout.parallel, zero=zero)  # a valid layout at any ZeRO stage
                dp = self._dp[dp_key] = data_parallel_transfers(par, of, self.links, self.overlaps)
            hit = self._transfers[key] = windows_of(dp, layout.parallel.microbatches, head)
        return hit

    def configurations(
        self,
        facts: StageFacts,
        layout: Candidate,
        zeros: tuple[int, ...],
        choices: list[int],
        recomputes: frozenset[Recompute] | None = None,
    ) -> tuple[
        list[tuple[int, int, Recompute, int, float]], int, tuple[int, int, Recompute, int, float]
    ]:
        """(ZeRO stage, offload choice, recompute, memory bound, seconds bound) of every
        strategy on ``layout`` whose memory bound is within the usable memory; how many
        strategies there were; and the one with the least memory bound. The budget plan is
        bounded by the least plan's memory and by the FLOPs it must add to fit."""
        par = layout.parallel
        m, k, outside = par.microbatches, facts.in_flight, facts.outside_blocks_bytes
        k_later = facts.in_flight_later
        first, last = facts.kernels, facts.last_kernels
        per_flop = first.seconds_per_recompute_flop()
        block_flops = max(1, facts.graph.over_layers(lambda b: b.flops))
        plans = [
            (
                r,
                p.stored_bytes,
                p.extra_forward_flops / block_flops,
                first.recompute_seconds(p),
                last_kernels_recompute(last, facts.last_extra_flops[r]),
            )
            for r, p in facts.plans.items()
            if recomputes is None or r in recomputes
        ]
        if recomputes is None or Recompute.budget in recomputes:
            plans.append((Recompute.budget, facts.min_stored_bytes, 0.0, 0.0, 0.0))
        none_stored = facts.plans[Recompute.none].stored_bytes
        per_byte = facts.flops_per_saved_byte
        overhead = self.gpu.runtime_overhead_bytes
        usable = self.usable
        base_kernels = kernels_of(first)
        last_base = kernels_of(last)
        link = self.gpu.host_link_bytes_per_s
        out: list[tuple[int, int, Recompute, int, float]] = []
        total, least = 0, (0, 0, Recompute.none, -1, 0.0)
        kernels_by_recompute: dict[float, Kernels] = {}
        for zero in zeros:
            # what does not depend on the offload choice, once per ZeRO stage: the collectives
            # per recompute's extra forwards, and the last stage's bound per recompute
            windows: dict[float, Windows] = {}
            fixed_parts: dict[tuple[float, float], float] = {}
            tails: dict[Recompute, float] = {}
            for choice in choices:
                if par.dp > 1 and zero < REQUIRED_ZERO[choice]:
                    continue
                placed = self.placement(facts, par.dp, zero, choice)
                untouched = placed.traffic == NO_HOST_TRAFFIC
                grads = placed.gpu_gradient_bytes
                accumulated = grads if m > 1 and placed.grads_resident else 0
                states = placed.gpu_parameter_bytes + placed.gpu_optimizer_bytes + overhead
                acts_off = ACTIVATIONS in OFFLOADS[choice]
                optimizer = optimizer_step_seconds(placed, self.gpu)
                for r, stored, forwards, recompute, last_recompute in plans:
                    total += 1
                    acts = (stored if stored < outside else outside) if acts_off else stored
                    held = acts * k
                    later = acts * k_later + accumulated if accumulated else 0
                    held = held if held > later else later
                    memory = states + (held if held > grads else grads)
                    if memory > usable:
                        if least[3] < 0 or memory < least[3]:
                            least = (zero, choice, r, memory, 0.0)
                        continue
                    if r is Recompute.budget and not acts_off:
                        # it must recompute enough to bring the stored bytes under what the
                        # memory leaves, at no fewer FLOPs per byte than the best fixed plan
                        cap = (usable - states) // (k or 1)
                        if accumulated:
                            cap = min(cap, (usable - states - accumulated) // (k_later or 1))
                        recompute = max(0, none_stored - cap) * per_byte * per_flop
                    # save_on_cpu moves every micro-batch's activations down and back up
                    host = placed.traffic
                    # nothing crosses the host link: offload_exposed's 0
                    no_offload = untouched and stored <= acts
                    if stored > acts:
                        host = HostTraffic(
                            host.forward_up,
                            host.forward_down + stored - acts,
                            host.backward_up + stored - acts,
                            host.backward_down,
                            host.step_down,
                            host.step_up,
                            host.nvme_seconds,
                        )
                    kern = kernels_by_recompute.get(recompute)
                    if kern is None:
                        kern = kernels_by_recompute[recompute] = Kernels(
                            base_kernels.forward,
                            base_kernels.backward,
                            recompute,
                            base_kernels.matmul,
                            base_kernels.attention,
                        )
                    # kernels and collectives depend on the recompute, not on the offload:
                    # once per (recompute, its seconds); then total_seconds' sum
                    fixed = fixed_parts.get((forwards, recompute))
                    if fixed is None:
                        w = windows.get(forwards)
                        if w is None:
                            w = windows[forwards] = self.communication(
                                facts, layout, zero, forwards
                            )
                        exposed = exposed_collectives(kern, m, w)
                        fixed = fixed_parts[(forwards, recompute)] = compose(
                            kern,
                            microbatches=m,
                            pp=par.pp,
                            vpp=par.vpp,
                            critical_per_micro_batch=exposed[0],
                            critical_per_step=exposed[1],
                            offload_seconds=0.0,
                            cpu_optimizer_seconds=0.0,
                            optimizer_seconds=0.0,
                        ).kernels_and_collectives_seconds
                    seconds = (
                        fixed
                        + (0.0 if no_offload else offload_exposed(kern, m, host, link))
                        + placed.cpu_step_seconds
                        + optimizer
                    )
                    # the slowest stage (the LM head's, or heavier layers') takes at least
                    # its kernels and the collectives of its own layers
                    tail = tails.get(r)
                    if tail is None:
                        tail = tails[r] = step_time(
                            Kernels(
                                last_base.forward,
                                last_base.backward,
                                last_recompute,
                                last_base.matmul,
                                last_base.attention,
                            ),
                            microbatches=m,
                            pp=par.pp,
                            vpp=par.vpp,
                            windows=self.communication(facts, layout, zero, 0.0, facts.last_shape),
                        ).total_seconds
                    if tail > seconds:
                        seconds = tail
                    out.append((zero, choice, r, memory, seconds))
                    if least[3] < 0 or memory < least[3]:
                        least = (zero, choice, r, memory, seconds)
        return out, total, least


def slowest_stage(stages: list[Stage], kernels: Callable[[Stage], MicroBatch]) -> Stage:
    """The first stage whose micro-batch kernels take longest. The stages of one lowering
    that hold the same block kinds, as many of each, with the same first / last role (the
    same prologue and epilogue ops) have the same kernels (``steptime.compute.micro_batch``
    reads nothing else): one of each is timed, in stage order, so the first of the slowest
    is ``max(stages, key=...)``'s answer."""
    seen: set[tuple[object, ...]] = set()
    representatives = []
    for st in stages:
        key = (st.is_first, st.is_last, st.graph.kind_counts, tuple(map(id, st.graph.kinds)))
        if key not in seen:
            seen.add(key)
            representatives.append(st)
    return max(representatives, key=lambda st: kernels(st).seconds)


def last_kernels_recompute(last: MicroBatch, extra_flops: int) -> float:
    """A lower bound on the last stage's recompute seconds for ``extra_flops``."""
    return extra_flops * last.seconds_per_recompute_flop()


ACTIVATIONS = Offload(OffloadWhat.activations, OffloadWhere.cpu)
REQUIRED_ZERO = [
    3
    if any(o.what is OffloadWhat.params for o in choice)
    else 1
    if any(o.what is OffloadWhat.optimizer for o in choice)
    else 0
    for choice in OFFLOADS
]
"""The least ZeRO stage each offload choice runs at on more than one data-parallel GPU
(``strategies/placement.py``)."""
