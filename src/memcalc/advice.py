"""Advice the estimate can prove: a setting the user did not choose that would lower the peak
a lot, said in one line with the number it gives.

The loss is the case that matters most often (DESIGN.md, "What real measurements taught us"):
HF's cross-entropy upcasts the logits to fp32 and ``log_softmax`` saves b*s*V fp32 bytes, and
at the loss's backward the logits, their fp32 copy and the gradient coexist; a fused or
chunked linear + cross-entropy (Liger's ``LigerFusedLinearCrossEntropyLoss``, which TRL's
``use_liger_kernel`` turns on; Apple's Cut Cross-Entropy; torchtune's chunked loss) never
holds a b*s*V tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

from memcalc.estimate import Breakdown, estimate
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import Loss, TrainingSetup
from memcalc.units import Unit, format_bytes

LOSS_SHARE = 0.2
"""The loss "dominates" when a fused loss would lower a strategy's peak by at least this
fraction of it (the loss's b*s*V tensors are a fifth of the peak or more)."""


def loss_advice(
    spec: ModelSpec,
    setup: TrainingSetup,
    gpu: GpuProfile,
    rows: Sequence[Breakdown],
    unit: Unit = Unit.GiB,
) -> str | None:
    """One line suggesting ``--loss fused`` when the standard loss sets much of the peak of
    one of ``rows`` (the strategies estimated), with the peak it would give; else None."""
    if setup.loss is not Loss.standard or not rows:
        return None
    best: tuple[float, Breakdown, Breakdown] | None = None
    for b in rows:
        alt = estimate(spec, b.setup.replace(loss=Loss.fused), gpu, b.options)
        share = (b.peak_bytes - alt.peak_bytes) / b.peak_bytes
        if share >= LOSS_SHARE and (best is None or share > best[0]):
            best = (share, b, alt)
    if best is None:
        return None
    _, b, alt = best
    u = unit.value
    fits = " (it would fit)" if alt.fits and not b.fits else ""
    return (
        f"--loss: the loss's fp32 logits set {_size(b.peak_bytes - alt.peak_bytes, unit)} "
        f"of the {_size(b.peak_bytes, unit)} {u} peak ({b.strategy}); a fused or chunked "
        "cross-entropy keeps no batch x seq x vocab tensor (--loss fused: Liger's fused "
        "linear cross-entropy, TRL use_liger_kernel, Cut Cross-Entropy, a chunked loss): "
        f"peak {_size(alt.peak_bytes, unit)} {u}{fits}"
    )


def _size(num_bytes: int, unit: Unit) -> str:
    return format_bytes(num_bytes, unit).split()[0]
