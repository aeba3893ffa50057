"""Offload strategies: what moves off the GPU, where it lives, and what moving it costs.

Sources: ZeRO-Offload (Ren et al. 2021: optimizer states, fp32 master weights and the step on
the CPU; 16-bit gradients go down and 16-bit parameters come back every step), ZeRO-Infinity
(Rajbhandari et al. 2021: optimizer state on NVMe, parameters streamed from CPU per layer) and
``torch.autograd.graph.save_on_cpu`` (every saved tensor copied to pinned host memory in forward
and back in backward).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memcalc.errors import MemcalcError, one_of


class OffloadWhat(str, Enum):
    """What is offloaded."""

    optimizer = "optimizer"
    """Optimizer states (+ fp32 master weights); the optimizer step runs on the CPU."""
    params = "params"
    """Parameters (and their gradients) stream from the host one block at a time."""
    activations = "activations"
    """Saved activations (or the checkpointed block inputs) go to the host in forward."""


class OffloadWhere(str, Enum):
    """Where offloaded bytes live."""

    cpu = "cpu"
    """Pinned host RAM, over the GPU's host link."""
    nvme = "nvme"
    """NVMe through host bounce buffers (optimizer only)."""


@dataclass(frozen=True)
class Offload:
    """One ``--offload WHAT=WHERE`` choice."""

    what: OffloadWhat
    where: OffloadWhere

    @property
    def label(self) -> str:
        return f"{self.what.value}={self.where.value}"

    @classmethod
    def parse(cls, text: str) -> Offload:
        """Parse ``WHAT=WHERE``.

        >>> Offload.parse("optimizer=cpu").label
        'optimizer=cpu'
        """
        what, sep, where = text.partition("=")
        if not sep:
            raise MemcalcError(
                f"--offload: expected WHAT=WHERE (e.g. optimizer=cpu), got {text!r}; WHAT is one "
                f"of: {', '.join(w.value for w in OffloadWhat)}; WHERE one of: cpu, nvme"
            )
        try:
            w = OffloadWhat(what)
        except ValueError:
            raise one_of("--offload WHAT", what, [x.value for x in OffloadWhat]) from None
        try:
            loc = OffloadWhere(where)
        except ValueError:
            raise one_of("--offload WHERE", where, [x.value for x in OffloadWhere]) from None
        if loc is OffloadWhere.nvme and w is not OffloadWhat.optimizer:
            raise MemcalcError(
                f"--offload: {w.value}=nvme is not modelled; use {w.value}=cpu "
                "(only optimizer=nvme goes to NVMe)"
            )
        return cls(w, loc)
