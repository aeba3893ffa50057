"""DeepSpeed's ``BF16_Optimizer`` (``runtime/bf16_optimizer.py``): what ZeRO-1 runs for a bf16
model with ``data_types.grad_accum_dtype: fp32`` and no offload
(``runtime/engine.py`` ``_do_optimizer_sanity_check`` returns BFLOAT16).

``_setup_for_real_optimizer`` flattens the bf16 parameters like ZeRO-1/2 (padded to 2 x ranks),
clones the rank's partition to fp32 for the optimizer, and allocates
``fp32_groups_gradients_flat = zeros_like(bf16_groups_flat, grad_acc_dtype)`` -- a full-size
fp32 gradient buffer kept for the whole run. With ``immediate_grad_update`` false (the default)
no hook runs in the backward: autograd's bf16 ``.grad`` fill up whole, then
``backward_epilogue`` -> ``update_hp_grads`` adds each into the fp32 buffer
(``lp.grad.to(fp32)``, one tensor at a time), and the engine all-reduces the fp32 buffer
(``buffered_allreduce_fallback`` -> ``allreduce_bucket``: a view of the one flat tensor, cast to
``communication_data_type`` when that differs). The bf16 ``.grad`` stay until ``zero_grad``
after the step; the step casts nothing (fp32 gradients, fp32 partition) and the norm
(``get_global_norm_of_tensors``: ``.float()`` of fp32 tensors) copies nothing.

The same on CUDA and on the CPU accelerator.
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.strategies.residency.deepspeed.buckets import Order
from memcalc.strategies.residency.moments import GradientTotals, Tail


@dataclass(frozen=True)
class Bf16OptimizerGradients:
    """The fp32 gradient buffer throughout, and autograd's bf16 gradients in the backward."""

    totals: GradientTotals
    arrival: Order
    buffer_bytes: int
    """``fp32_groups_gradients_flat``: padded elements x 4."""
    model_bytes: int
    walk_bytes: int
    """Bytes per gradient element the step timeline counts ``written`` in (fp32)."""
    largest: int
    """Elements of the largest tensor (its ``.to(fp32)`` in ``update_hp_grads``)."""
    reduce_copy: int
    """Bytes of the all-reduce's cast of the fp32 buffer (0 when it is reduced in fp32)."""
    prunes = True
    accumulates_in_place = False

    @property
    def _full(self) -> int:
        return self.arrival.ends[-1] * self.model_bytes if self.arrival.ends else 0

    def at_loss(self, accumulated: bool) -> int:
        return self.buffer_bytes + (self._full if accumulated else 0)

    def at_block(self, i: int, written: int, accumulated: bool, current: int = 0) -> int:
        if accumulated:
            return self.buffer_bytes + self._full + current // self.walk_bytes * self.model_bytes
        hi = self.arrival.start(i) + written // self.walk_bytes
        return self.buffer_bytes + hi * self.model_bytes

    def at_embedding(self, accumulated: bool) -> int:
        return self.buffer_bytes + self._full

    def at_step(self) -> int:
        return self.buffer_bytes + self._full

    def between_steps(self) -> int:
        """The fp32 gradient buffer stays allocated between steps."""
        return self.buffer_bytes

    def tail(self, accumulated: bool) -> tuple[Tail, ...]:
        """``update_hp_grads`` and the all-reduce, with the bf16 gradients still there."""
        extra = max(4 * self.largest, self.reduce_copy)
        return (Tail("backward epilogue: update_hp_grads, all-reduce", self.at_step(), extra),)

    def after_loss(self, accumulated: bool) -> tuple[Tail, ...]:
        return ()

    def extra_candidates(self) -> set[int]:
        return set()
