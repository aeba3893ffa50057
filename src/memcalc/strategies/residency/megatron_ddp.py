"""Megatron-core's DistributedDataParallel and distributed optimizer: the contiguous gradient
buffer every parameter's ``main_grad`` is a view of, the bf16 parameter buffer the distributed
optimizer re-points the parameters into, and their padding.

Sources (Megatron-LM ``d98e8a64``): ``megatron/core/distributed/param_and_grad_buffer.py``
``_ParamAndGradBuffer.__init__`` (``grad_data = torch.zeros(numel, dtype=grad_dtype)``;
``param_data`` only with the distributed optimizer), ``_compute_default_per_buffer_param_layout``
(no padding without it), ``megatron/core/optimizer/distrib_optimizer.py``
``_compute_per_buffer_param_layout`` and ``optimizer/param_layout.py`` (each parameter's start
padded to 64 elements, each bucket's end to ``lcm(dp, 128)``; a shared embedding in a bucket of
its own), ``distributed/distributed_data_parallel.py`` (buckets of ``max(40e6, 1e6 x dp)``
elements with ``overlap_grad_reduce``, else one bucket).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from memcalc.strategies.residency.gradients import ResidentGradients

PARAM_START_ALIGN = 64
"""``param_layout.py`` ``pad_param_start``: parameter starts padded to 64 elements."""
BUCKET_END_ALIGN = 128
"""``param_layout.py`` ``bucket_end_divisor``: bucket ends padded to ``lcm(dp, 128)``."""
MIN_BUCKET_NUMEL = 40_000_000
"""``DistributedDataParallel.__init__``: ``bucket_size = max(40000000, 1000000 * dp)``."""


@dataclass(frozen=True)
class MainGradBuffer(ResidentGradients):
    """The ``main_grad`` buffer: allocated (zeroed) when the model is wrapped, written in place
    by backward and zeroed, not freed, by ``zero_grad_buffer`` each step -- every gradient is
    on the GPU at every moment, between steps too."""

    accumulates_in_place: ClassVar[bool] = False
    """Every micro-batch's weight gradient reaches ``main_grad`` the same way (the backward
    hook's ``main_grad.add_``, or fused into the wgrad GEMM): the first pass's bytes, no
    temporary beyond them under accumulation."""

    def on_gpu(self, value: int, bucket: int) -> int:
        return self.totals.full

    def at_loss(self, accumulated: bool) -> int:
        return self.totals.full

    def between_steps(self) -> int:
        return self.totals.full


def _pad(value: int, divisor: int) -> int:
    return -(-value // divisor) * divisor


@lru_cache(maxsize=256)
def padded_numel(params: tuple[tuple[int, bool], ...], dp: int, bucket_size: int | None) -> int:
    """Elements of the distributed optimizer's buffer for ``params`` ((numel, shared
    embedding) in model order), laid out as ``_compute_per_buffer_param_layout`` does: in
    reverse order, each start padded to 64, a bucket closed when it reaches ``bucket_size``
    (or at a shared embedding, which gets its own bucket), each bucket end padded to
    ``lcm(dp, 128)``.

    >>> padded_numel(((100, False), (10, False)), 8, None)
    256
    """
    end_divisor = math.lcm(dp, BUCKET_END_ALIGN)
    start = bucket_start = 0
    in_bucket = False
    for numel, shared in reversed(params):
        start = _pad(start, PARAM_START_ALIGN)
        if shared and in_bucket:
            bucket_start = start = _pad(start, end_divisor)
            in_bucket = False
        end = start + numel
        in_bucket = True
        if shared or (bucket_size is not None and end - bucket_start >= bucket_size):
            bucket_start = start = _pad(end, end_divisor)
            in_bucket = False
        else:
            start = end
    return _pad(start, end_divisor) if in_bucket else start


@dataclass(frozen=True)
class DistributedOptimizerBuffers:
    """The padding of the distributed optimizer's buffers on one rank: the bf16 parameter
    buffer and the fp32 gradient buffer hold ``padding`` elements beyond the parameters
    (the fp32 main parameters and Adam states are shards of the parameters themselves:
    ``distrib_optimizer.py`` ``_build_model_and_main_param_groups``,
    ``shard_model_param.clone().float()``)."""

    padding: int
    param_itemsize: int
    grad_itemsize: int

    @property
    def buffer_bytes(self) -> int:
        return self.padding * (self.param_itemsize + self.grad_itemsize)

    @property
    def note(self) -> str:
        return (
            "Megatron distributed optimizer: contiguous bf16 parameter and fp32 gradient "
            f"buffers, padded by {self.padding:,} elements (64-element parameter starts, "
            "lcm(dp, 128) bucket ends); fp32 main parameters and Adam states sharded over dp"
        )


def distributed_optimizer_buffers(
    params: Sequence[tuple[int, bool]],
    dp: int,
    bucket_size: int | None,
    param_itemsize: int,
    grad_itemsize: int,
) -> DistributedOptimizerBuffers:
    """The padding of one buffer of ``params`` (see ``padded_numel``)."""
    key = tuple(params)
    padding = padded_numel(key, dp, bucket_size) - sum(n for n, _ in key)
    return DistributedOptimizerBuffers(padding, param_itemsize, grad_itemsize)


def bucket_size(overlap_grad_reduce: bool, given: int | None, dp: int) -> int | None:
    """Elements per DDP bucket (None: one bucket for the whole buffer)."""
    if not overlap_grad_reduce:
        return None
    return given if given is not None else max(MIN_BUCKET_NUMEL, 1_000_000 * dp)
