"""Where each model state lives under an offload choice -- GPU, pinned host RAM or NVMe -- and
what moving it costs per step. One function, shared by ``estimate`` (the breakdown) and
``plan`` (its memory bound), so both place bytes the same way.

Sources: ZeRO-Offload (Ren et al. 2021: fp32 optimizer states and master weights, and the
optimizer step, on the CPU; 16-bit gradients go down during backward, updated 16-bit weights
come back after the step), ZeRO-Infinity (Rajbhandari et al. 2021: optimizer states on NVMe,
parameters streamed from the host one block at a time) and
``torch.autograd.graph.save_on_cpu`` (saved tensors copied to pinned host memory in forward,
back in backward).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memcalc.errors import MemcalcError
from memcalc.optimizer import OptimizerBytes
from memcalc.params import ParamCounts
from memcalc.profiles import GpuProfile
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.offload import Offload, OffloadWhat, OffloadWhere
from memcalc.strategies.sharding import Sharding


@dataclass(frozen=True)
class HostTraffic:
    """Host-link bytes of one rank by direction and the compute they can run under. The link
    carries each direction on its own lanes (PCIe is full duplex): what goes down (GPU to
    host) and what comes up overlap each other and the compute, not the same direction's
    other copies."""

    forward_up: int = 0
    """Per micro-batch, during its forward: streamed parameters (params=cpu)."""
    forward_down: int = 0
    """Per micro-batch, during its forward: saved activations going to the host."""
    backward_up: int = 0
    """Per micro-batch, during its backward: streamed parameters, activations coming back."""
    backward_down: int = 0
    """Per micro-batch, during its backward: gradients of streamed parameters."""
    step_down: int = 0
    """Per step, during the last micro-batch's backward: gradients to the CPU optimizer."""
    step_up: int = 0
    """Per step, after the CPU optimizer step: the updated (trained) weights -- exposed."""
    nvme_seconds: float = 0.0
    """Optimizer-state swaps with NVMe around the CPU step -- exposed."""


@dataclass(frozen=True)
class Placement:
    """One rank's model states on the GPU, host and NVMe, and the seconds of moving them."""

    offloads: tuple[Offload, ...]
    """The offloads in effect (params=cpu brings optimizer=cpu with it)."""
    gpu_parameter_bytes: int
    gpu_gradient_bytes: int
    gpu_optimizer_bytes: int
    step_temporary_bytes: int
    """The optimizer step's temporaries on the GPU (0 when the step runs on the CPU)."""
    host_bytes: int
    nvme_bytes: int
    host_link_bytes: int
    """Bytes over the host link per step, both directions added."""
    nvme_link_bytes: int
    """Bytes read + written on NVMe per step."""
    traffic: HostTraffic
    """When the host-link bytes move (what the step-time model can hide)."""
    cpu_step_seconds: float
    """The optimizer step on the CPU."""
    notes: tuple[str, ...]

    @property
    def offloaded(self) -> frozenset[OffloadWhat]:
        return frozenset(o.what for o in self.offloads)

    @property
    def grads_resident(self) -> bool:
        """Every gradient stays on the GPU until the step (not with params=cpu)."""
        return OffloadWhat.params not in self.offloaded

    @property
    def activations_offloaded(self) -> bool:
        return OffloadWhat.activations in self.offloaded


def effective_offloads(offloads: tuple[Offload, ...]) -> tuple[Offload, ...]:
    """The offloads as they run: ZeRO-3 offload of the parameters requires the optimizer's
    (DeepSpeed ``offload_param`` needs ``offload_optimizer``), so params=cpu adds
    optimizer=cpu when no optimizer offload was chosen."""
    whats = {o.what for o in offloads}
    if OffloadWhat.params in whats and OffloadWhat.optimizer not in whats:
        return (*offloads, Offload(OffloadWhat.optimizer, OffloadWhere.cpu))
    return offloads


def gpu_activation_bytes(stored_bytes: int, outside_blocks_bytes: int, offloaded: bool) -> int:
    """Stored activations left on the GPU: with activations=cpu the blocks' saved tensors (or
    checkpointed inputs) go to the host; the prologue's and epilogue's stay (the loss needs
    them first in backward)."""
    return min(stored_bytes, outside_blocks_bytes) if offloaded else stored_bytes


def place(
    counts: ParamCounts,
    setup: TrainingSetup,
    optimizer: OptimizerBytes,
    sharding: Sharding,
    offloads: tuple[Offload, ...],
    gpu: GpuProfile,
    *,
    stored_activation_bytes: int = 0,
    kept_activation_bytes: int = 0,
    in_flight: int = 1,
    microbatches: int = 1,
    extra_grad_bytes: int = 0,
) -> Placement:
    """The Placement of one rank's parameters, gradients and optimizer states (and, with
    activations=cpu, of the offloaded activations: ``in_flight`` micro-batches' on the host,
    every micro-batch's down and back up). ``extra_grad_bytes``: gradient bytes beyond the
    parameters' (DTensor's replicated vocab-parallel embedding gradient)."""
    effective = effective_offloads(offloads)
    by_what = {o.what: o for o in effective}
    _check_sharded_offloads(by_what, sharding)
    shares = _Shares.of(counts, setup, optimizer, sharding, extra_grad_bytes)
    tally = _Tally(shares.params, shares.grads, shares.optimizer, shares.step_temporary)
    if effective != offloads:
        tally.notes.append("params=cpu implies optimizer=cpu (ZeRO-3 offload requires it)")
    if OffloadWhat.optimizer in by_what:
        _offload_optimizer(
            tally, by_what[OffloadWhat.optimizer].where, shares, counts, sharding, gpu
        )
    if OffloadWhat.params in by_what:
        _offload_params(tally, shares, counts, setup)
    if OffloadWhat.activations in by_what:
        per_micro_batch = stored_activation_bytes - kept_activation_bytes
        tally.host += per_micro_batch * in_flight
        tally.host_link += 2 * per_micro_batch * microbatches
        tally.traffic["forward_down"] = per_micro_batch
        tally.traffic["backward_up"] = tally.traffic.get("backward_up", 0) + per_micro_batch
        tally.notes.append(
            "activations=cpu: saved tensors of the blocks go to pinned host "
            "memory (save_on_cpu); one block's come back at a time"
        )
    return Placement(
        offloads=effective,
        gpu_parameter_bytes=tally.gpu_params,
        gpu_gradient_bytes=tally.gpu_grads,
        gpu_optimizer_bytes=tally.gpu_optimizer,
        step_temporary_bytes=tally.step_temporary,
        host_bytes=tally.host,
        nvme_bytes=tally.nvme,
        host_link_bytes=tally.host_link,
        nvme_link_bytes=tally.nvme_link,
        traffic=HostTraffic(**tally.traffic, nvme_seconds=tally.nvme_seconds),
        cpu_step_seconds=tally.cpu_step_seconds,
        notes=tuple(tally.notes),
    )


def _check_sharded_offloads(by_what: dict[OffloadWhat, Offload], sharding: Sharding) -> None:
    """DeepSpeed offloads the optimizer from ZeRO-1 on and the parameters only at ZeRO-3;
    FSDP's CPUOffload moves its (sharded) parameters with the optimizer states."""
    if sharding.gpus <= 1:
        return
    if OffloadWhat.params in by_what and sharding.stage < 3:
        raise MemcalcError(
            "--offload params=cpu: with more than one data-parallel GPU the parameters "
            "are offloaded sharded, so it needs --zero 3 (DeepSpeed offload_param, FSDP "
            "CPUOffload)"
        )
    if OffloadWhat.optimizer in by_what and sharding.stage < 1:
        raise MemcalcError(
            "--offload optimizer: with more than one data-parallel GPU it needs --zero 1 or "
            "more (DeepSpeed offload_optimizer shards the states it moves)"
        )


@dataclass(frozen=True)
class _Shares:
    """This rank's share of each model state before any offload."""

    params: int
    trained: int
    """Of ``params``, the trained weights' (what a CPU optimizer step sends back up)."""
    grads: int
    optimizer: int
    step_temporary: int

    @classmethod
    def of(
        cls,
        counts: ParamCounts,
        setup: TrainingSetup,
        optimizer: OptimizerBytes,
        sharding: Sharding,
        extra_grad_bytes: int,
    ) -> _Shares:
        weights = counts.weight_bytes(setup.weight_dtype.itemsize)
        trained = counts.trainable_weight_bytes(setup.weight_dtype.itemsize)
        grads = counts.grad_bytes(setup.gradient_dtype.itemsize)
        step_b = optimizer.step_tensor_bytes if optimizer.step_on_device else 0
        states = optimizer.total_bytes - optimizer.step_tensor_bytes
        states_experts = _experts_part(states, counts.optimizer_counts)
        if sharding.shards_parameters:
            # FSDP2: every rank's optimizer steps its shard of every parameter tensor, so it
            # keeps one step tensor per tensor (torch adam.py _init_group, over the DTensor
            # shards)
            opt_b = sharding.share(optimizer.total_bytes - step_b, 1, states_experts) + step_b
        else:
            opt_b = sharding.share(optimizer.total_bytes, 1, states_experts)
        temporary = optimizer.step_temporary_bytes
        return cls(
            params=sharding.share(weights, 3, _experts_part(weights, counts)),
            trained=sharding.share(trained, 3, _experts_part(trained, counts.optimizer_counts)),
            grads=sharding.share(
                grads + extra_grad_bytes, 2, _experts_part(grads, counts.optimizer_counts)
            ),
            optimizer=opt_b,
            step_temporary=sharding.share(
                temporary, 1, _experts_part(temporary, counts.optimizer_counts)
            ),
        )


@dataclass
class _Tally:
    """A Placement being built: the GPU's bytes after each offload, and what moved."""

    gpu_params: int
    gpu_grads: int
    gpu_optimizer: int
    step_temporary: int
    host: int = 0
    nvme: int = 0
    host_link: int = 0
    nvme_link: int = 0
    nvme_seconds: float = 0.0
    cpu_step_seconds: float = 0.0
    traffic: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _offload_optimizer(
    tally: _Tally,
    where: OffloadWhere,
    shares: _Shares,
    counts: ParamCounts,
    sharding: Sharding,
    gpu: GpuProfile,
) -> None:
    """ZeRO-Offload: gradients down, the updated weights up -- only what is trained (a frozen
    base, LoRA, has no gradient and no update); the states on the host or on NVMe."""
    tally.host_link += shares.grads + shares.trained
    tally.traffic["step_down"] = shares.grads
    tally.traffic["step_up"] = shares.trained
    if where is OffloadWhere.cpu:
        tally.host += shares.optimizer + shares.grads
    else:
        if gpu.nvme_bytes_per_s <= 0:
            raise MemcalcError(
                f"--offload optimizer=nvme: {gpu.display_name}'s profile has no local NVMe "
                "(nvme_bytes_per_s = 0); use optimizer=cpu"
            )
        tally.host += shares.grads
        tally.nvme += shares.optimizer
        tally.nvme_link += 2 * shares.optimizer
        tally.nvme_seconds = 2 * shares.optimizer / gpu.nvme_bytes_per_s
    tally.cpu_step_seconds = cpu_updated_params(counts, sharding) / gpu.cpu_adam_params_per_s
    tally.gpu_optimizer, tally.step_temporary = 0, 0
    tally.notes.append(
        f"optimizer step on the CPU ({where.value}) at {gpu.cpu_adam_params_per_s:.3g} "
        "parameters/s (profile); gradients go down during backward, weights come back after"
    )


def _offload_params(
    tally: _Tally, shares: _Shares, counts: ParamCounts, setup: TrainingSetup
) -> None:
    """ZeRO-Infinity's parameter offload: two blocks resident (current + prefetch), the
    weights streamed up in forward and again in backward."""
    resident = max(2 * counts.per_block, counts.embedding, counts.head)
    tally.gpu_params = resident * setup.weight_dtype.itemsize
    tally.gpu_grads = min(shares.grads, resident * setup.gradient_dtype.itemsize)
    tally.host += shares.params
    tally.host_link += 2 * shares.params
    tally.traffic["forward_up"] = shares.params
    tally.traffic["backward_up"] = shares.params
    tally.notes.append(
        "params=cpu: two blocks' weights resident (current + prefetch), "
        "weights streamed up in forward and again in backward"
    )


def cpu_updated_params(counts: ParamCounts, sharding: Sharding) -> int:
    """Parameters this rank's CPU optimizer step updates: its shard of the trained ones --
    the dense ones over the data-parallel ranks, the routed experts it holds (E / ep of them)
    over the ranks that hold the same experts (dp / ep). The same share as the host RAM its
    optimizer states take, so expert parallelism moves experts between ranks without
    shrinking any rank's update (E/ep experts over dp/ep ranks = E/dp per rank).

    >>> from memcalc.params import ParamCounts
    >>> c = ParamCounts(0, 0, 800, 0, 0, 0, 0, 0, 0, 0, 0, 0, 800, expert=800)
    >>> cpu_updated_params(c, Sharding(8, 3, expert_gpus=8))  # ep 1: 800 experts over 8
    100
    >>> half = ParamCounts(0, 0, 400, 0, 0, 0, 0, 0, 0, 0, 0, 0, 400, expert=400)
    >>> cpu_updated_params(half, Sharding(8, 3, expert_gpus=4))  # ep 2: 400 here over 4
    100
    """
    trained = counts.optimizer_counts
    return sharding.share(counts.trainable, 1, _experts_part(counts.trainable, trained))


def _experts_part(num_bytes: int, counts: ParamCounts) -> int:
    """The routed experts' part of ``num_bytes`` of per-element model states over ``counts``
    (their share of the elements: states, gradients and weights are per element)."""
    return num_bytes * counts.expert // counts.total if counts.total else 0
