"""Recompute and offload, applied to a real model with torch's own mechanisms.

The decoder blocks are regrouped into ``Segment`` modules (k blocks each) that replace the
model's block list, in our reference model and in HF models alike:

* full / every-k: ``torch.utils.checkpoint(use_reentrant=False, preserve_rng_state=True)``
  around each segment (k = 1 for full) -- the block inputs are held, the rest is replayed.
* selective: the same checkpoint per block with a selective-checkpoint policy
  (``create_selective_checkpoint_contexts``): inside the attention module every op is
  recomputed except the q/k/v and output projections (``mm``/``addmm``), whose outputs are
  cached; outside attention every non-view op's output is cached. This approximates
  Korthikanti et al.'s selective recompute; it differs from memcalc's estimate in two ways that
  the measurement shows: SAC caches op *outputs* (not what autograd saves), and the q/k/v
  projection outputs must be kept to replay the core (the estimate drops them).
* activations=cpu: ``torch.autograd.graph.save_on_cpu`` around each segment (what the blocks
  save goes to host memory; the embedding and loss tensors stay).
* optimizer=cpu: handled by the runner (optimizer state kept on the host).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from memcalc.errors import MemcalcError
from memcalc.measure.build import layer_list
from memcalc.strategies.recompute import Recompute, sqrt_k

_aten = torch.ops.aten
_PROJECTIONS = {_aten.mm.default, _aten.addmm.default}


class _AttentionScope:
    """True while an attention module's forward runs (set by module hooks)."""

    def __init__(self) -> None:
        self.depth = 0

    def enter(self, *_: Any) -> None:
        self.depth += 1

    def leave(self, *_: Any) -> None:
        self.depth -= 1


def selective_policy(scope: _AttentionScope):  # type: ignore[no-untyped-def]
    """Recompute the attention core (everything in attention but the projections); save the
    outputs of every other non-view op."""

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if func.is_view:
            return CheckpointPolicy.PREFER_RECOMPUTE
        if scope.depth > 0 and func not in _PROJECTIONS:
            return CheckpointPolicy.MUST_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE

    return policy


class Segment(nn.Module):
    """k consecutive decoder blocks run as one unit, checkpointed and/or offloaded."""

    def __init__(self, blocks: list[nn.Module], *, checkpointed: bool,
                 context_fn: Any = None, offload: bool = False, pin_memory: bool = False):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.checkpointed = checkpointed
        self.context_fn = context_fn
        self.offload = offload
        self.pin_memory = pin_memory

    def forward(self, hidden: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        def run(h: torch.Tensor, *a: Any) -> torch.Tensor:
            for block in self.blocks:
                out = block(h, *a, **kwargs)
                h = out[0] if isinstance(out, tuple) else out
            return h

        offload = (torch.autograd.graph.save_on_cpu(pin_memory=self.pin_memory)
                   if self.offload else contextlib.nullcontext())
        with offload:
            if not self.checkpointed:
                return run(hidden, *args)
            extra = {"context_fn": self.context_fn} if self.context_fn else {}
            # Positional tensors are what the checkpoint holds (its _NoopSaveInputs).
            return checkpoint(run, hidden, *args, use_reentrant=False, preserve_rng_state=True,
                              **extra)


def _attention_modules(block: nn.Module) -> list[nn.Module]:
    names = ("attn", "self_attn")
    return [getattr(block, n) for n in names if isinstance(getattr(block, n, None), nn.Module)]


def apply_strategy(model: nn.Module, recompute: Recompute, *, every: int | None = None,
                   offload_activations: bool = False, pin_memory: bool = False) -> str:
    """Regroup the model's blocks into Segments for ``recompute``; returns a label."""
    parent, attr = layer_list(model)
    blocks = list(getattr(parent, attr))
    n = len(blocks)
    if recompute is Recompute.budget:
        raise MemcalcError("--recompute: budget is not measured; choose one of: none, "
                           "selective, full, every-k")
    if recompute is Recompute.none and not offload_activations:
        return "none"
    k, context_fn = 1, None
    checkpointed = recompute is not Recompute.none
    if recompute is Recompute.every_k:
        k = every or sqrt_k(n)
        if not 1 <= k <= n:
            raise MemcalcError(f"--every: must be between 1 and the number of blocks ({n}); "
                               f"got {k}")
    if recompute is Recompute.selective:
        scope = _AttentionScope()
        for block in blocks:
            for attn in _attention_modules(block):
                attn.register_forward_pre_hook(scope.enter)
                attn.register_forward_hook(scope.leave)
        context_fn = functools.partial(create_selective_checkpoint_contexts,
                                       selective_policy(scope))
    segments = [Segment(blocks[i : i + k], checkpointed=checkpointed, context_fn=context_fn,
                        offload=offload_activations, pin_memory=pin_memory)
                for i in range(0, n, k)]
    setattr(parent, attr, nn.ModuleList(segments))
    label = recompute.value if recompute is not Recompute.every_k else f"every-{k}"
    return label + (" + activations=cpu" if offload_activations else "")


@contextlib.contextmanager
def bool_dropout_masks():  # type: ignore[no-untyped-def]
    """Route ``F.dropout`` to ``torch.native_dropout`` (what CUDA runs): a 1-byte bool mask is
    saved instead of CPU dropout's mask in the input dtype. Only needed on CPU."""
    original = torch.nn.functional.dropout

    def native(input: torch.Tensor, p: float = 0.5, training: bool = True,
               inplace: bool = False) -> torch.Tensor:
        if not training or p == 0:
            return input
        return torch.native_dropout(input, p, True)[0]

    torch.nn.functional.dropout = native  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.nn.functional.dropout = original
