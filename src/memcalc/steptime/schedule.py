"""The time of one training step on one rank, composed from its parts as the framework
schedules them: one model, shared by ``estimate`` and ``plan``'s bounds.

    micro-batch = forward + backward + recompute kernels
                  + the tensor / expert / pipeline collectives no compute hides
    step = m x micro-batch + pipeline bubble + the data-parallel collectives no compute hides
           + exposed offload transfers + the optimizer step (GPU, or CPU when offloaded)

- Bubble (Narayanan et al. 2021, sec. 2.2): 1F1B idles (p - 1) micro-batch times per step;
  interleaving with v virtual stages (p - 1) / v.
- A collective hides behind the compute of its window (``strategies.comms.Window``); what it
  needs beyond that window is exposed. Hidden is not free: the collective's kernels take SMs
  and HBM bandwidth from the compute they overlap, which runs ``OVERLAP_SLOWDOWN`` slower
  while they do (``overlap_exposed``). Per micro-batch: TP collectives behind the GEMMs when
  the runtime overlaps them, the CP ring behind attention, FSDP's prefetched all-gathers behind
  the forward, its backward gathers and reduce-scatters (and ZeRO-2's) behind the backward and
  recompute. Per step: DDP / distributed-optimizer gradient reduction behind the last
  micro-batch's backward (``no_sync`` accumulation, Megatron ``overlap_grad_reduce``), the
  ZeRO-1/2 parameter all-gather behind the next forward (``overlap_param_gather``).
- Offload (``strategies.placement.HostTraffic``): each direction of the host link is its own
  lanes. Per micro-batch the forward's copies hide behind the forward, the backward's behind
  the backward; the gradients for a CPU optimizer behind the last backward; the updated
  weights coming back after the CPU step and NVMe swaps are exposed.
- The optimizer step on the GPU reads and writes its states, gradients and weights once
  (bound by HBM bandwidth); on the CPU it runs at the host's rate (``cpu_adam_params_per_s``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memcalc.strategies.comms import Collective, Transfer, Window
from memcalc.strategies.placement import HostTraffic

OVERLAP_SLOWDOWN = 0.189
"""How much slower compute runs while a collective runs beside it: NCCL's kernels occupy SMs
(one thread block per channel: 24 of an H100's 132 SMs in an FSDP all-gather, NVIDIA
developer forum "Compute-communication overlap causes severe GEMM performance degradation
because of tail effect", nsys trace) and HBM bandwidth. Measured over GPT and LLaMA training
steps on 4 A100, H100, MI250 and MI210: "an average computational slowdown of 18.9%, with a
maximum of 40.0%" against the same compute with no communication beside it (arXiv:2507.03114,
*Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning:
Performance and Power Implications*, abstract)."""


def overlap_exposed(seconds: float, hide: float, slowdown: float = OVERLAP_SLOWDOWN) -> float:
    """What a collective of ``seconds`` adds to ``hide`` seconds of compute it runs beside:
    while both run the compute progresses at 1 / (1 + slowdown), so the pair takes
    max(seconds, hide + seconds x slowdown / (1 + slowdown)).

    >>> round(overlap_exposed(1.0, 5.0, 0.25), 3)  # hidden, but 1 s at 80% costs 0.2 s
    0.2
    >>> overlap_exposed(6.0, 5.0, 0.25)  # longer than the compute: the excess
    1.2
    >>> overlap_exposed(0.0, 5.0)
    0.0
    """
    if seconds <= 0:
        return 0.0
    return max(seconds - hide, seconds * slowdown / (1 + slowdown))


@dataclass(frozen=True)
class StepTime:
    """Seconds of one step, by part."""

    compute_seconds: float
    """Forward and backward kernels of every micro-batch, without recompute."""
    recompute_seconds: float
    bubble_seconds: float
    communication_seconds: float
    """Exposed communication (the part no compute hides)."""
    offload_seconds: float
    """Exposed host/NVMe transfers."""
    cpu_optimizer_seconds: float
    optimizer_seconds: float = 0.0
    """The optimizer step on the GPU."""
    matmul_seconds: float = 0.0
    """Of ``compute_seconds``: the matmuls..."""
    attention_seconds: float = 0.0
    """... the fused attention kernels ..."""
    memory_bound_seconds: float = 0.0
    """... and the elementwise / reduction ops (HBM traffic)."""
    micro_batch_seconds: float = 0.0
    """One micro-batch: forward, backward, recompute and its exposed collectives."""

    @property
    def total_seconds(self) -> float:
        return (
            self.kernels_and_collectives_seconds
            + self.offload_seconds
            + self.cpu_optimizer_seconds
            + self.optimizer_seconds
        )

    @property
    def kernels_and_collectives_seconds(self) -> float:
        """Compute, recompute, bubble and exposed communication: the part of the total that
        does not depend on where the model states live (``plan``'s bounds add the rest per
        offload choice, in ``total_seconds``' order)."""
        return (
            self.compute_seconds
            + self.recompute_seconds
            + self.bubble_seconds
            + self.communication_seconds
        )

    @property
    def added_seconds(self) -> float:
        """What the strategy adds to the bare compute: recompute, bubble, exposed
        communication and offload, the CPU optimizer step -- the planner's cost. (The GPU
        optimizer step is part of every step that keeps its optimizer on the GPU.)"""
        return (
            self.recompute_seconds
            + self.bubble_seconds
            + self.communication_seconds
            + self.offload_seconds
            + self.cpu_optimizer_seconds
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "compute_seconds": self.compute_seconds,
            "recompute_seconds": self.recompute_seconds,
            "bubble_seconds": self.bubble_seconds,
            "communication_seconds": self.communication_seconds,
            "offload_seconds": self.offload_seconds,
            "cpu_optimizer_seconds": self.cpu_optimizer_seconds,
            "optimizer_seconds": self.optimizer_seconds,
            "matmul_seconds": self.matmul_seconds,
            "attention_seconds": self.attention_seconds,
            "memory_bound_seconds": self.memory_bound_seconds,
            "micro_batch_seconds": self.micro_batch_seconds,
            "total_seconds": self.total_seconds,
        }


@dataclass(frozen=True)
class Kernels:
    """One micro-batch's kernel seconds on one rank, as the schedule needs them."""

    forward: float
    backward: float
    recompute: float = 0.0
    matmul: float = 0.0
    """Matmul seconds of the micro-batch (forward + backward): what TP overlap hides behind."""
    attention: float = 0.0
    """Attention-kernel seconds (forward + backward): what the CP ring hides behind."""
    memory: float = 0.0


@dataclass(frozen=True)
class Windows:
    """A step's collectives summed by where they run (``windows_of``)."""

    critical_per_micro_batch: float = 0.0
    """Tensor / expert / pipeline collectives on the critical path, per micro-batch."""
    critical_per_step: float = 0.0
    """Data-parallel collectives on the critical path (no overlap), per step."""
    by_window: tuple[tuple[Window, float], ...] = ()
    """Seconds per step of the collectives that compute can hide, by window."""


def windows_of(
    transfers: Sequence[Transfer], microbatches: int, start: Windows | None = None
) -> Windows:
    """Sum a step's collectives by window (per micro-batch for the critical TP/EP/PP ones);
    ``start``: the sums of the collectives before these (the same additions in the same
    order as summing all of them at once)."""
    by_window: dict[Window, float] = dict(start.by_window) if start is not None else {}
    critical_mb = start.critical_per_micro_batch if start is not None else 0.0
    step_level = start.critical_per_step if start is not None else 0.0
    for t in transfers:
        seconds = t.seconds
        if t.window is Window.none:
            if t.dimension == "dp":
                step_level += seconds
            else:
                critical_mb += seconds / microbatches
            continue
        edge = edge_seconds(t, microbatches)
        if t.window in (Window.last_backward, Window.next_forward):
            step_level += edge
        else:
            critical_mb += edge / microbatches
        by_window[t.window] = by_window.get(t.window, 0.0) + seconds - edge
    return Windows(critical_mb, step_level, tuple(by_window.items()))


EDGE_WINDOWS = {
    Window.forward: Collective.all_gather,
    Window.backward: Collective.reduce_scatter,
    Window.last_backward: None,
    Window.next_forward: None,
}
"""The data-parallel windows whose first or last call no compute can hide, and the collective
it is (None: any)."""


def edge_seconds(t: Transfer, microbatches: int) -> float:
    """The seconds of a hidden data-parallel collective that run outside its window, per step:
    one call per window. FSDP2 prefetches each block's all-gather during the block before it
    (``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``: ``pre_forward`` waits for
    its own unshard, only the next group is prefetched), so the first block's gather of every
    micro-batch's forward starts with nothing to run beside it, and the last block's
    reduce-scatter is issued after the last backward kernel. Megatron's and DDP's bucketed
    gradient reduction finishes with the bucket of the first layers, whose gradients are the
    backward's last (Megatron ``finish_grad_sync`` waits for it; DDP's ``Reducer`` launches a
    bucket when its last gradient is ready), and ``overlap_param_gather`` dispatches the first
    bucket's all-gather before the forward that needs it."""
    if t.dimension != "dp" or t.window not in EDGE_WINDOWS or t.calls <= 0:
        return 0.0
    kind = EDGE_WINDOWS[t.window]
    if kind is not None and t.collective is not kind:
        return 0.0
    per_window = microbatches if t.window in (Window.forward, Window.backward) else 1
    return min(t.seconds, per_window * t.seconds / t.calls)


def step_time(
    kernels: Kernels,
    *,
    microbatches: int,
    pp: int,
    vpp: int,
    transfers: Sequence[Transfer] = (),
    windows: Windows | None = None,
    host: HostTraffic | None = None,
    host_link_bytes_per_s: float = 1.0,
    cpu_optimizer_seconds: float = 0.0,
    optimizer_seconds: float = 0.0,
) -> StepTime:
    """The StepTime of one rank (see the module docstring); ``windows`` (``windows_of``) in
    place of ``transfers`` when the caller has summed them already.

    Two micro-batches of 1 s forward + 2 s backward on 2 stages, 0.5 s of TP traffic per
    micro-batch on the critical path, and a 5 s gradient reduce behind the last 2 s backward:

    >>> from memcalc.strategies.comms import Collective, Links
    >>> lk = Links(8, 1.0, 1.0, "NVLink", "IB", efficiency=1.0, intra_latency_s=0.0)
    >>> tp = Transfer("tp", Collective.send_recv, 2, 1, 1.0, 0.0, 0, lk)  # 1 s per step
    >>> dp = Transfer("dp", Collective.send_recv, 2, 5, 5.0, 0.0, 0, lk, Window.last_backward)
    >>> t = step_time(Kernels(1.0, 2.0), microbatches=2, pp=2, vpp=1, transfers=[tp, dp])
    >>> t.micro_batch_seconds, t.bubble_seconds, t.communication_seconds, t.total_seconds
    (3.5, 3.0, 4.5, 13.5)
    """
    m = microbatches
    w = windows if windows is not None else windows_of(transfers, m)
    critical_mb, step_level = exposed_collectives(kernels, m, w)
    offload = offload_exposed(kernels, m, host, host_link_bytes_per_s)
    return compose(
        kernels,
        microbatches=m,
        pp=pp,
        vpp=vpp,
        critical_per_micro_batch=critical_mb,
        critical_per_step=step_level,
        offload_seconds=offload,
        cpu_optimizer_seconds=cpu_optimizer_seconds,
        optimizer_seconds=optimizer_seconds,
    )


def exposed_collectives(kernels: Kernels, microbatches: int, w: Windows) -> tuple[float, float]:
    """(per micro-batch, per step) seconds of the step's collectives that no compute hides:
    the critical ones and what each window's collectives need beyond its compute."""
    m = microbatches
    critical_mb = w.critical_per_micro_batch
    step_level = w.critical_per_step
    backward = kernels.backward + kernels.recompute
    for window, seconds in w.by_window:
        if window is Window.last_backward:
            step_level += overlap_exposed(seconds, backward)
        elif window is Window.next_forward:
            step_level += overlap_exposed(seconds, kernels.forward)
        else:
            hide = (
                kernels.matmul
                if window is Window.matmuls
                else kernels.attention
                if window is Window.attention
                else kernels.forward
                if window is Window.forward
                else backward
            )
            critical_mb += overlap_exposed(seconds / m, hide)
    return critical_mb, step_level


def offload_exposed(
    kernels: Kernels, microbatches: int, host: HostTraffic | None, link: float
) -> float:
    """Seconds per step of the host / NVMe transfers no pass hides (each direction of the
    host link on its own lanes)."""
    if host is None or host == NO_HOST_TRAFFIC:
        return 0.0
    backward = kernels.backward + kernels.recompute
    offload_mb = max(
        0.0,
        host.forward_up / link - kernels.forward,
        host.forward_down / link - kernels.forward,
    )
    offload_mb += max(0.0, host.backward_up / link - backward, host.backward_down / link - backward)
    offload = microbatches * offload_mb + max(0.0, host.step_down / link - backward)
    return offload + (host.step_up / link + host.nvme_seconds)


def compose(
    kernels: Kernels,
    *,
    microbatches: int,
    pp: int,
    vpp: int,
    critical_per_micro_batch: float,
    critical_per_step: float,
    offload_seconds: float,
    cpu_optimizer_seconds: float,
    optimizer_seconds: float,
) -> StepTime:
    """The StepTime from one micro-batch's kernels and the exposed parts."""
    m = microbatches
    compute_mb = kernels.forward + kernels.backward + kernels.recompute
    mb = compute_mb + critical_per_micro_batch
    # the idle (p - 1) / v micro-batch times; the pipeline's per-micro-batch collectives are
    # charged for all m + (p - 1) / v of them as communication
    bubble = pipeline_seconds(compute_mb, 0, pp, vpp)
    return StepTime(
        compute_seconds=m * (kernels.forward + kernels.backward),
        recompute_seconds=m * kernels.recompute,
        bubble_seconds=bubble,
        communication_seconds=pipeline_seconds(critical_per_micro_batch, m, pp, vpp)
        + critical_per_step,
        offload_seconds=offload_seconds,
        cpu_optimizer_seconds=cpu_optimizer_seconds,
        optimizer_seconds=optimizer_seconds,
        matmul_seconds=m * kernels.matmul,
        attention_seconds=m * kernels.attention,
        memory_bound_seconds=m * kernels.memory,
        micro_batch_seconds=mb,
    )


NO_HOST_TRAFFIC = HostTraffic()


def pipeline_seconds(micro_batch_seconds: float, microbatches: int, pp: int, vpp: int) -> float:
    """m micro-batches through a 1F1B pipeline of ``pp`` stages (``vpp`` virtual stages each):
    (m + (p - 1) / v) micro-batch times (Narayanan et al. 2021, sec. 2.2).

    >>> pipeline_seconds(2.0, 8, 4, 1), pipeline_seconds(2.0, 8, 4, 2)
    (22.0, 19.0)
    """
    return (microbatches + (pp - 1) / vpp) * micro_batch_seconds


def communication_seconds(transfers: Sequence[Transfer]) -> tuple[float, float]:
    """(seconds on the critical path, seconds that can overlap compute) of a step's
    collectives (their sum, before any overlap)."""
    critical = sum((t.seconds for t in transfers if not t.overlaps), 0.0)
    overlapping = sum((t.seconds for t in transfers if t.overlaps), 0.0)
    return critical, overlapping
