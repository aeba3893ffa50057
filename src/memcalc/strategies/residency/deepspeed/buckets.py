"""When DeepSpeed reduces its gradient (ipg) bucket, and what each reduction copies.

Gradients enter the bucket one tensor at a time, in the order given (the backward's for the
gradient hooks of ZeRO-2 and ZeRO-3, ``model.parameters()`` for ZeRO-1's ``reduce_gradients``
at the end of the backward):

* ZeRO-1/2 (``stage_1_and_2.py`` ``reduce_independent_p_g_buckets_and_remove_grads``): a tensor
  that would overflow the bucket (``elements + numel > reduce_bucket_size``) first reduces what
  is in it (``reduce_ipg_grads``); a tensor larger than the bucket is not copied into it
  (``extra_large_param_to_reduce``: its own gradient is reduced at the next reduction) but
  counts in its elements all the same.
* ZeRO-3 (``stage3.py`` ``reduce_independent_p_g_buckets_and_remove_grads`` /
  ``__add_grad_to_ipg_bucket``): the same test, only when the bucket is not empty; a tensor
  that does not fit stays in autograd's gradient until the next reduction.

The epilogue (``independent_gradient_partition_epilogue``) reduces what is left. Each
reduction's input is ``elements`` of gradients; its copies are the engine's to say
(``zero12.py``, ``zero3.py``).

>>> [(f.position, f.elements) for f in flushes((4, 3, 3, 2), 6, zero3=False)]
[(1, 4), (3, 6), (4, 2)]
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate

from memcalc.strategies.residency.deepspeed.trace import EPILOGUE


@dataclass(frozen=True)
class Flush:
    """One reduction of the bucket."""

    position: int
    """It runs at the gradient hook of the tensor at this index of the order (before that
    tensor is copied in); ``len(order)``: in the epilogue, after the last gradient."""
    elements: int
    """Elements of gradients reduced (the bucket's, or an oversized tensor's own)."""
    tensors: tuple[int, ...]
    """Indices (into the order) of the tensors reduced."""
    pending: int
    """Elements of gradients outside the bucket (oversized tensors) alive at the reduction."""


def flushes(order: Sequence[int], capacity: int, *, zero3: bool) -> list[Flush]:
    """Every reduction of a bucket of ``capacity`` elements filled with tensors of ``order``
    elements, in order (see the module docstring), the epilogue's last."""
    out: list[Flush] = []
    elements, outside = 0, 0
    members: list[int] = []
    for j, n in enumerate(order):
        if elements + n > capacity and (elements > 0 or not zero3):
            if members:
                out.append(Flush(j, elements, tuple(members), outside))
            elements, members, outside = 0, [], 0
        members.append(j)
        elements += n
        if n > capacity:
            outside += n  # not copied in: autograd's gradient waits for the reduction
    if members:
        out.append(Flush(len(order), elements, tuple(members), outside))
    return out


@dataclass(frozen=True)
class Order:
    """Tensors in the order their gradients arrive, and where the step timeline's moments fall
    in it: layer ``i``'s backward with ``written`` of its elements written (the walk counts
    them from the layer's last op down) is at element ``start(i) + written``."""

    numels: tuple[int, ...]
    """Elements of each tensor, in arrival order."""
    layers: tuple[int, ...]
    """Each tensor's layer."""

    @cached_property
    def ends(self) -> tuple[int, ...]:
        """Elements arrived once each tensor's gradient has."""
        return tuple(accumulate(self.numels))

    @cached_property
    def _starts(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for end, n, lay in zip(self.ends, self.numels, self.layers, strict=True):
            out.setdefault(lay, end - n)
        return out

    def start(self, layer: int) -> int:
        """Elements that arrive before ``layer``'s first tensor."""
        return self._starts.get(layer, self.ends[-1] if self.ends else 0)

    @cached_property
    def head(self) -> int:
        """Positions of the tensors outside the blocks that arrive first (the LM head's and
        the final norm's)."""
        return next((k for k, lay in enumerate(self.layers) if lay != EPILOGUE), len(self.layers))

    def during(self, lo: int, hi: int) -> range:
        """Positions of the tensors whose gradients complete in (lo, hi] elements."""
        return range(bisect_right(self.ends, lo), bisect_right(self.ends, hi))
