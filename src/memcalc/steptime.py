"""The time of one training step on one rank: one model, shared by ``estimate`` and ``plan``.

    step = compute + recompute + pipeline bubble + exposed communication
           + exposed offload transfers + the CPU optimizer step

- Compute: 3 x the stage's forward FLOPs per micro-batch (forward + backward = 2 x forward,
  Kaplan et al. 2020) x micro-batches, at ``mfu`` of the profile's dense peak; recompute adds
  its extra forwards.
- Bubble (Narayanan et al. 2021): 1F1B idles (p - 1) micro-batch times per step, interleaving
  with V virtual stages (p - 1) / V.
- Communication (``strategies/comms.py``): TP, PP and EP collectives are on the critical path;
  DP gradient sync and the CP ring overlap compute, so only what exceeds the compute is exposed.
- Offload (ZeRO-Offload, Ren et al. 2021): gradients go down during backward (hidden up to the
  backward time), updated weights come back after the CPU step (exposed); activations and
  streamed parameters overlap the compute; the CPU Adam step runs at the profile's
  ``cpu_adam_params_per_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.strategies.comms import Transfer


@dataclass(frozen=True)
class StepTime:
    """Seconds of one step, by part."""

    compute_seconds: float
    """Forward and backward of every micro-batch, without recompute."""
    recompute_seconds: float
    bubble_seconds: float
    communication_seconds: float
    """Exposed communication (the part no compute hides)."""
    offload_seconds: float
    """Exposed host/NVMe transfers."""
    cpu_optimizer_seconds: float

    @property
    def total_seconds(self) -> float:
        return (
            self.compute_seconds
            + self.recompute_seconds
            + self.bubble_seconds
            + self.communication_seconds
            + self.offload_seconds
            + self.cpu_optimizer_seconds
        )

    @property
    def added_seconds(self) -> float:
        """What the strategy adds to the bare compute: recompute, bubble, exposed
        communication and offload, the CPU step -- the planner's cost."""
        return self.total_seconds - self.compute_seconds

    def as_dict(self) -> dict[str, float]:
        return {
            "compute_seconds": self.compute_seconds,
            "recompute_seconds": self.recompute_seconds,
            "bubble_seconds": self.bubble_seconds,
            "communication_seconds": self.communication_seconds,
            "offload_seconds": self.offload_seconds,
            "cpu_optimizer_seconds": self.cpu_optimizer_seconds,
            "total_seconds": self.total_seconds,
        }


def step_time(
    *,
    micro_batch_compute_seconds: float,
    micro_batch_recompute_seconds: float,
    microbatches: int,
    pp: int,
    vpp: int,
    critical_communication_seconds: float = 0.0,
    overlapping_communication_seconds: float = 0.0,
    offload_overlapped_seconds: float = 0.0,
    offload_exposed_seconds: float = 0.0,
    backward_window_seconds: float = 0.0,
    cpu_optimizer_seconds: float = 0.0,
) -> StepTime:
    """The StepTime of one rank (see the module docstring): ``critical_communication_seconds``
    of collectives on the critical path, ``overlapping_communication_seconds`` that compute
    hides (``communication_seconds`` sums a step's Transfers into the two);
    ``offload_overlapped_seconds`` of transfers hidden up to ``backward_window_seconds``.

    >>> t = step_time(micro_batch_compute_seconds=1.0, micro_batch_recompute_seconds=0.25,
    ...               microbatches=4, pp=2, vpp=1, overlapping_communication_seconds=6.0)
    >>> t.compute_seconds, t.recompute_seconds, t.bubble_seconds, t.communication_seconds
    (4.0, 1.0, 1.25, 1.0)
    """
    compute = micro_batch_compute_seconds * microbatches
    recompute = micro_batch_recompute_seconds * microbatches
    per_micro_batch = micro_batch_compute_seconds + micro_batch_recompute_seconds
    bubble = (pp - 1) * per_micro_batch / vpp
    exposed = float(critical_communication_seconds)
    hidden_window = compute + recompute
    if overlapping_communication_seconds > hidden_window:
        exposed += overlapping_communication_seconds - hidden_window
    offload = float(offload_exposed_seconds)
    if offload_overlapped_seconds > backward_window_seconds:
        offload += offload_overlapped_seconds - backward_window_seconds
    return StepTime(compute, recompute, bubble, exposed, offload, cpu_optimizer_seconds)


def communication_seconds(transfers: tuple[Transfer, ...]) -> tuple[float, float]:
    """(seconds on the critical path, seconds that overlap compute) of a step's collectives."""
    critical = sum((t.seconds for t in transfers if not t.overlaps), 0.0)
    overlapping = sum((t.seconds for t in transfers if t.overlaps), 0.0)
    return critical, overlapping
