"""DeepSpeed's ZeRO engine as a sharding engine: one rank's states (``Placement``) and what it
holds at each moment (``Residency``), stage by stage (``zero12.py``, ``bf16_optimizer.py``,
``zero3.py``).

The optimizer is DeepSpeed's own for ``"type": "Adam"/"AdamW"``
(``runtime/engine.py`` ``_configure_basic_optimizer``): ``FusedAdam`` without offload (in
place, ``step`` a Python int; a 4-byte ``_dummy_overflow_buf``), ``DeepSpeedCPUAdam`` with
``offload_optimizer`` (fp32 moments on the host), or ``torch.optim.AdamW`` with ``torch_adam``
(a 4-byte fp32 ``step`` tensor -- on the host beside a CUDA parameter -- and its step
temporaries: the foreach ``sqrt`` copy on CUDA, the single-tensor path's ``sqrt`` and ``div``
on the CPU). The moments are fp32 (the master partition's dtype).

GPU vs CPU: on CUDA ``offload_optimizer`` / ``offload_param`` buffers are host memory (pinned
with ``pin_memory``, the default); on the CPU accelerator ``pin_memory`` is a no-op
(``accelerator/cpu_accelerator.py``) and they share the one memory, so the CPU comparison
counts them on the device. gloo's reduce-scatter copy is the only kernel difference
(``zero3.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memcalc.dtypes import DType
from memcalc.errors import MemcalcError
from memcalc.strategies.offload import OffloadWhat, OffloadWhere
from memcalc.strategies.placement import Placement, place
from memcalc.strategies.recompute import Recompute, Segments
from memcalc.strategies.residency.compose import RankInputs, Residency
from memcalc.strategies.residency.deepspeed.bf16_optimizer import Bf16OptimizerGradients
from memcalc.strategies.residency.deepspeed.buckets import Order
from memcalc.strategies.residency.deepspeed.fetch import Coordinator, trace_calls
from memcalc.strategies.residency.deepspeed.flat import FlatGroup
from memcalc.strategies.residency.deepspeed.trace import EPILOGUE, PROLOGUE, ParamTrace, param_trace
from memcalc.strategies.residency.deepspeed.zero3 import Partitions, Zero3Gradients, Zero3Params
from memcalc.strategies.residency.deepspeed.zero12 import Reduction, Zero12Gradients
from memcalc.strategies.residency.fsdp2 import NoGather
from memcalc.strategies.residency.moments import GradientHolder, ParamsHolder
from memcalc.strategies.residency.pipelining import NO_RETENTION
from memcalc.strategies.residency.tensor_parallel import NO_EXTRAS

CONTAINERS_PER_LAYER = 4
"""Parameterless hooked modules of an HF decoder layer (the layer, its attention and MLP
containers, its activation module): each one's fetch prefetches (``fetch.trace_calls``)."""


@dataclass(frozen=True)
class Split:
    """Bytes of one state on the device and in host memory."""

    device: int = 0
    host: int = 0

    def on(self, cpu: bool) -> tuple[int, int]:
        """(device, host) as a run sees them: the CPU accelerator's host is its device."""
        return (self.device + self.host, 0) if cpu else (self.device, self.host)


@dataclass(frozen=True)
class States:
    """A rank's parameters, gradients (at the end of the backward) and optimizer states, and
    the step's transient bytes beyond them."""

    params: Split
    gradients: Split
    optimizer: Split
    step_transient: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dtypes:
    """Bytes per element of the model, its gradient accumulation and its reduction."""

    model: int
    accum: int
    comm: int


def _dtypes(inp: RankInputs) -> Dtypes:
    setup, cfg = inp.setup, inp.setup.deepspeed_config
    comm = cfg.communication_data_type or setup.weight_dtype
    return Dtypes(setup.weight_dtype.itemsize, setup.gradient_dtype.itemsize, comm.itemsize)


def _offloads(inp: RankInputs) -> tuple[bool, bool]:
    whats = {o.what: o.where for o in inp.offloads}
    if OffloadWhere.nvme in whats.values():
        raise MemcalcError(
            "--offload: the DeepSpeed engine models offload to cpu (its NVMe swapper is not "
            "modelled); use optimizer=cpu or params=cpu"
        )
    return (
        OffloadWhat.optimizer in whats or OffloadWhat.params in whats,
        OffloadWhat.params in whats,
    )


def _adam(inp: RankInputs, partition: int, offload: bool, scalars: int) -> tuple[Split, int]:
    """The master partition and the moments (fp32), DeepSpeed's scalars, and the optimizer's
    own step temporaries."""
    cfg, cpu = inp.setup.deepspeed_config, inp.device == "cpu"
    states = 3 * partition * 4 + scalars
    temporaries, step = 0, 0
    if cfg.torch_adam:
        step = 4  # torch.optim.AdamW's fp32 step tensor
        temporaries = (2 if cpu else 1) * partition * 4
    elif not offload:
        states += 4  # FusedAdam's _dummy_overflow_buf (int32)
    if offload:
        return Split(scalars, states - scalars + step), 0
    return Split(states + (step if cpu else 0), step if not cpu else 0), temporaries


def _optimizer_name(inp: RankInputs, offload: bool) -> str:
    if inp.setup.deepspeed_config.torch_adam:
        return "torch.optim.AdamW (torch_adam)"
    return "DeepSpeedCPUAdam on the host (offload_optimizer)" if offload else "FusedAdam"


def _rank(group: FlatGroup, given: int | None) -> int:
    if given is not None:
        return given
    return max(range(group.ranks), key=lambda r: (group.grads_in_partition(r), group.padding(r)))


def _arrival(trace: ParamTrace) -> Order:
    order = trace.backward_order
    return Order(tuple(trace.numels[j] for j in order), tuple(trace.layers[j] for j in order))


def zero12(inp: RankInputs, trace: ParamTrace) -> tuple[States, Zero12Gradients]:
    """ZeRO-1 / ZeRO-2 (``zero12.py``, ``flat.py``)."""
    setup, cfg, d = inp.setup, inp.setup.deepspeed_config, _dtypes(inp)
    offload, _ = _offloads(inp)
    group = FlatGroup(trace.numels, setup.parallel.dp)
    r, s, b = _rank(group, inp.dp_rank), group.partition, d.model
    stage = setup.parallel.zero
    in_hooks = stage == 2 or cfg.overlap(stage)
    order = trace.backward_order if in_hooks else tuple(range(len(trace.numels)))
    arrival = Order(tuple(trace.numels[j] for j in order), tuple(trace.layers[j] for j in order))
    reduction = Reduction(
        group, r, arrival, order, cfg.reduce_bucket_size, offload, keeps_unowned=stage == 1
    )
    optimizer, temporaries = _adam(inp, s, offload, 4)
    if offload:
        staging = trace.largest * b  # temp_grad_buffer_for_gpu_offload / _for_cpu_offload
        # norm_for_param_grads: an fp64 norm of each tensor of the partition, kept to the step
        partition = 8 * len(group.in_partition(r))
        grads = Split(staging + partition, s * 4 + staging)  # + the host's fp32 gradients
        params = Split(group.padded * b, s * b)  # + param_buffer_of_bit16_for_cpu_offload
        transient = 0
    else:
        partition = group.grads_in_partition(r) * b + group.padding(r) * d.accum
        grads, params = Split(partition), Split(group.padded * b)
        flat = s * b + (s * 4 if b != 4 else 0)  # flatten(averaged_gradients).to(fp32)
        transient = max(8 * max(group.pieces(r)), flat, s * 4 + temporaries - partition)
    holder = Zero12Gradients(
        inp.totals,
        reduction,
        _arrival(trace),
        in_hooks,
        b,
        (2 if cfg.overlap(stage) else 1) * cfg.reduce_bucket_size * b,
        d.comm if d.comm != b else 0,
        partition,
        setup.gradient_dtype.itemsize,
        grads.on(inp.device == "cpu")[0] - partition,
    )
    bucket = f"{cfg.reduce_bucket_size:,}-element gradient bucket" + (
        " (two: overlap_comm)" if cfg.overlap(stage) else ""
    )
    note = (
        f"DeepSpeed ZeRO-{stage} (stage_1_and_2.py) on rank {r} of {group.ranks}: flat 16-bit "
        f"parameters padded to {group.padded:,} elements on every rank, an fp32 master partition "
        f"of {s:,}, a {bucket} from the first gradient to the end of each backward, "
        f"{_optimizer_name(inp, offload)}"
    )
    return States(params, grads, optimizer, transient, (note,)), holder


def bf16_optimizer(inp: RankInputs, trace: ParamTrace) -> tuple[States, Bf16OptimizerGradients]:
    """ZeRO-1 with bf16 weights and fp32 gradient accumulation (``bf16_optimizer.py``)."""
    d = _dtypes(inp)
    group = FlatGroup(trace.numels, inp.setup.parallel.dp)
    buffer = group.padded * 4
    grads = Bf16OptimizerGradients(
        inp.totals,
        _arrival(trace),
        buffer,
        d.model,
        inp.setup.gradient_dtype.itemsize,
        trace.largest,
        group.padded * d.comm if d.comm != 4 else 0,
    )
    optimizer, temporaries = _adam(inp, group.partition, False, 4)
    lp = trace.total * d.model
    states = States(
        Split(group.padded * d.model),
        Split(buffer + lp),
        optimizer,
        max(0, group.partition * 4 + temporaries - lp - buffer),
        ("DeepSpeed BF16_Optimizer: a full-size fp32 gradient buffer on every rank",),
    )
    return states, grads


def replays(inp: RankInputs) -> dict[int, tuple[int, ...]]:
    """The layers whose forward each layer's backward replays (``torch.utils.checkpoint``):
    a fully recomputed layer its own, an every-k segment's last layer the segment's."""
    plan = inp.plan
    if plan is None:
        return {}
    stack, n = plan.stack, inp.graph.num_layers
    if isinstance(stack, Segments):
        return {
            min(s + stack.k, n) - 1: tuple(range(s, min(s + stack.k, n)))
            for s in range(0, n, stack.k)
        }
    full = {k for k, c in enumerate(stack.choice) if c is Recompute.full}
    return {i: (i,) for i in range(n) if stack.layout.kind_at(i) in full}


def _gathered(
    inp: RankInputs, trace: ParamTrace, parts: Partitions
) -> tuple[Zero3Params, tuple[int, ...]]:
    """Play the coordinator over the step's trace (``fetch.py``) and take, per part of the
    timeline, the most it holds gathered; and what it holds during the backward of each of
    the head's tensors' modules."""
    cfg = inp.setup.deepspeed_config
    modules = [(m.layer, m.params) for m in trace.modules]
    calls = trace_calls(modules, CONTAINERS_PER_LAYER, replays(inp))
    coordinator = Coordinator(
        trace.numels,
        parts.persistent,
        parts.ranks,
        inp.setup.weight_dtype.itemsize,
        cfg.stage3_prefetch_bucket_size,
        cfg.stage3_max_live_parameters,
        cfg.stage3_max_reuse_distance,
    )
    held = coordinator.play(calls)
    n = inp.graph.num_layers
    last = max(t for t, c in enumerate(calls) if not c.backward)  # the LM head's forward

    def most(layers: set[int], backward: bool, upto: int = len(calls)) -> int:
        return max(
            (
                held[t]
                for t, c in enumerate(calls[:upto])
                if c.layer in layers and c.backward == backward
            ),
            default=0,
        )

    head = {EPILOGUE}  # the final norm with the last layer's forward, the head's backward too
    owner = {
        p: t for t, c in enumerate(calls) if c.backward for p in c.params if c.layer == EPILOGUE
    }
    order = trace.backward_order
    head_gathered = tuple(
        held[owner[order[k]]] for k in range(len(order)) if trace.layers[order[k]] == EPILOGUE
    )
    return Zero3Params(
        tuple(most({i} | (head if i == n - 1 else set()), False, last) for i in range(n)),
        tuple(most({i} | (head if i == n - 1 else set()), True) for i in range(n)),
        most({PROLOGUE}, False),
        held[last],
        held[last],
        max(most({PROLOGUE}, True), held[-1]),
    ), head_gathered


def zero3(inp: RankInputs, trace: ParamTrace) -> tuple[States, Zero3Gradients, Zero3Params]:
    """ZeRO-3 (``zero3.py``, ``fetch.py``)."""
    setup, cfg, d = inp.setup, inp.setup.deepspeed_config, _dtypes(inp)
    offload, offload_param = _offloads(inp)
    parts = Partitions(
        trace.numels,
        setup.parallel.dp,
        cfg.stage3_param_persistence_threshold,
        cfg.stage3_model_persistence_threshold,
    )
    p, b = parts.total, d.model
    persistent = parts.persistent_whole * b
    ipg = cfg.reduce_bucket_size * d.comm
    # grad_partitions_flat_buffer (host under offload, beside the fp32 sub-group gradients,
    # and an fp64 norm of each partition with data, norm_for_param_grads, kept to the step)
    rank = inp.dp_rank or 0
    mine = sum(1 for j, n in enumerate(trace.numels) if parts.part(j) * rank < n)
    norms = 8 * mine if offload else 0
    grads = Split(ipg + norms, p * d.accum + p * 4) if offload else Split(ipg + p * d.accum)
    gathered, head_gathered = _gathered(inp, trace, parts)
    holder = Zero3Gradients(
        inp.totals,
        parts,
        _arrival(trace),
        cfg.reduce_bucket_size,
        b,
        d.comm,
        grads.on(inp.device == "cpu")[0] - norms,
        inp.device == "cpu",
        setup.gradient_dtype.itemsize,
        head_gathered,
        offload,
        norms,
    )
    optimizer, temporaries = _adam(inp, p, offload, 5 if offload else 9)
    params = Split(persistent, p * b) if offload_param else Split(p * b + persistent)
    regather = persistent if len(parts.persistent) > 1 else 0  # _post_step's coalesced buffer
    if offload:
        step = regather
    else:
        flat = max(
            n * d.accum + (n * 4 if d.accum != 4 else 0)
            for n in parts.sub_groups(cfg.sub_group_size)
        )
        norm = 8 * max((parts.part(j) for j in range(len(trace.numels))), default=0)
        step = max(norm - persistent, flat - persistent, regather)
    note = (
        f"DeepSpeed ZeRO-3 (stage3.py): per-parameter partitions, {len(parts.persistent)} "
        f"parameters of at most {cfg.stage3_param_persistence_threshold:,} elements kept whole, a "
        f"{cfg.reduce_bucket_size:,}-element gradient bucket held for the run, weights gathered by "
        f"the coordinator (prefetch {cfg.stage3_prefetch_bucket_size:,}, max live "
        f"{cfg.stage3_max_live_parameters:,}, reuse distance {cfg.stage3_max_reuse_distance:,}), "
        f"{_optimizer_name(inp, offload)}"
        + ("; gloo's reduce-scatter input copy counted (CPU)" if inp.device == "cpu" else "")
    )
    states = States(params, grads, optimizer, max(0, step) + temporaries, (note,))
    return states, holder, gathered


def _check(inp: RankInputs) -> None:
    setup, cfg = inp.setup, inp.setup.deepspeed_config
    par = setup.parallel
    if not cfg.contiguous_gradients:
        raise MemcalcError(
            "--ds contiguous_gradients=false: DeepSpeed's non-contiguous reduction path is not "
            "modelled (the default, true, is)"
        )
    if par.microbatches > 1 and any(o.what is not OffloadWhat.activations for o in inp.offloads):
        raise MemcalcError(
            "--microbatches: gradient accumulation with DeepSpeed's offload "
            "(async_accumulate_grad_in_cpu_via_gpu) is not modelled; --zero-engine torch "
            "estimates it under torch's ZeRO"
        )
    accum_fp32 = setup.gradient_dtype is DType.fp32 and setup.weight_dtype is not DType.fp32
    if accum_fp32 and par.zero == 2:
        raise MemcalcError(
            "--grad-dtype fp32 at ZeRO-2: DeepSpeed's compact fp32 gradient partition is not "
            "modelled; use ZeRO-1 (BF16_Optimizer) or ZeRO-3"
        )
    if accum_fp32 and par.zero == 1 and _offloads(inp)[0]:
        raise MemcalcError(
            "--grad-dtype fp32 with --offload at ZeRO-1: DeepSpeed's grad_accum attribute path is "
            "not modelled"
        )


def deepspeed_rank(inp: RankInputs) -> tuple[Placement, Residency]:
    """The rank's Placement (its states on the device and the host, the transfers' times
    from ``placement.place``) and its Residency."""
    _check(inp)
    trace = param_trace(inp.graph)
    setup = inp.setup
    stage = setup.parallel.zero
    bf16_opt = (
        stage == 1 and setup.gradient_dtype is DType.fp32 and setup.weight_dtype is not DType.fp32
    )
    params_holder: ParamsHolder = NoGather()
    grads: GradientHolder
    if stage == 3:
        states, grads, params_holder = zero3(inp, trace)
    elif bf16_opt:
        states, grads = bf16_optimizer(inp, trace)
    else:
        states, grads = zero12(inp, trace)
    return _placement(inp, states), Residency(grads, params_holder, NO_RETENTION, NO_EXTRAS, None)


def _placement(inp: RankInputs, states: States) -> Placement:
    """``placement.place``'s transfers and activation offload, with the engine's bytes."""
    base = place(
        inp.counts,
        inp.setup,
        inp.optimizer,
        inp.sharding,
        inp.offloads,
        inp.gpu,
        stored_activation_bytes=inp.stored_activation_bytes,
        kept_activation_bytes=inp.kept_activation_bytes,
        in_flight=inp.stage.in_flight,
        microbatches=inp.setup.parallel.microbatches,
    )
    cpu = inp.device == "cpu"
    (pd, ph), (gd, gh), (od, oh) = (
        s.on(cpu) for s in (states.params, states.gradients, states.optimizer)
    )
    offloaded_acts = any(o.what is OffloadWhat.activations for o in inp.offloads)
    acts = (inp.stored_activation_bytes - inp.kept_activation_bytes) * inp.stage.in_flight
    shared = cpu and any((states.params.host, states.gradients.host, states.optimizer.host))
    notes = (
        *states.notes,
        "DeepSpeed on the CPU accelerator: the offloaded buffers are in the one memory "
        "(pin_memory is a no-op)"
        if shared
        else "",
    )
    return replace(
        base,
        gpu_parameter_bytes=pd,
        gpu_gradient_bytes=gd,
        gpu_optimizer_bytes=od,
        step_temporary_bytes=states.step_transient,
        host_bytes=ph + gh + oh + (acts if offloaded_acts else 0),
        notes=tuple(n for n in (*base.notes, *notes) if n),
    )
