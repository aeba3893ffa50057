"""Gradients of a rank whose parameters live on the host (``--offload params=cpu``,
ZeRO-Infinity / DeepSpeed ``offload_param``): each block's gradients go down to the host as
they are written, so the GPU holds at most ``cap`` bytes of them."""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.strategies.residency.gradients import ResidentGradients
from memcalc.strategies.residency.moments import GradientTotals, Tail


@dataclass(frozen=True)
class OffloadedGradients:
    """The gradients another holder (``inner``) would keep, capped at the GPU's share."""

    inner: ResidentGradients
    cap: int
    """The gradient bytes that stay on the GPU (the placement's: two blocks' at most)."""

    @property
    def totals(self) -> GradientTotals:
        return self.inner.totals

    def at_loss(self, accumulated: bool) -> int:
        return min(self.inner.totals.full, self.cap) if accumulated else 0

    prunes = True

    accumulates_in_place = False

    def at_block(self, i: int, written: int, accumulated: bool, current: int = 0) -> int:
        return min(self.inner.logical(i, written, accumulated), self.cap)

    def at_embedding(self, accumulated: bool) -> int:
        return min(self.inner.logical(None, 0, accumulated), self.cap)

    def at_step(self) -> int:
        return min(self.inner.totals.full, self.cap)

    def extra_candidates(self) -> set[int]:
        return self.inner.extra_candidates()

    def between_steps(self) -> int:
        return 0

    def tail(self, accumulated: bool) -> tuple[Tail, ...]:
        return ()

    def after_loss(self, accumulated: bool) -> tuple[Tail, ...]:
        return ()
