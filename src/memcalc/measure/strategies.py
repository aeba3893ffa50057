"""Recompute and offload, applied to a real model with torch's own mechanisms.

The decoder blocks are regrouped into ``Segment`` modules (k blocks each) that replace the
model's block list, in our reference model and in HF models alike (for a model whose loop passes
each layer its own mask -- HF Gemma 2 / 3, ``_Member`` -- the list keeps one entry per block and
a segment's last entry runs the segment):

* full / every-k: ``torch.utils.checkpoint(use_reentrant=False, preserve_rng_state=True)``
  around each segment (k = 1 for full) -- the block inputs are held, the rest is replayed.
* selective: ``torch.utils.checkpoint`` around the attention core only (QK^T, softmax,
  dropout, AV) -- what Megatron-LM does for Korthikanti et al.'s selective recompute. The core's
  inputs q, k, v are what the checkpoint holds; everything outside the core is saved as usual.
  With SDPA the kernel keeps no s x s tensor and there is nothing to drop: no checkpoint.
  (A ``create_selective_checkpoint_contexts`` policy over whole blocks was tried first: it
  caches op *outputs*, not what autograd saves, and held 30-60% more than this on the test
  grid, so it is not used.)
* activations=cpu: ``torch.autograd.graph.save_on_cpu`` around each segment (what the blocks
  save goes to host memory; the embedding and loss tensors stay).
* optimizer=cpu: handled by the runner (optimizer state kept on the host).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from memcalc.errors import MemcalcError
from memcalc.measure.build import layer_list
from memcalc.strategies.recompute import Recompute, sqrt_k

_CORE_FLAG = "memcalc_recompute_core"


def _checkpointed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(q, k, v, ...)`` under a non-reentrant checkpoint that holds only q, k and v (the
    other arguments are passed by keyword, so the checkpoint does not save them)."""

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
            return fn(q, k, v, *args, **kwargs)

        return checkpoint(core, q, k, v, use_reentrant=False, preserve_rng_state=True)

    return run


def _hf_eager_patched(original: Callable[..., Any]) -> Callable[..., Any]:
    """HF ``eager_attention_forward(module, q, k, v, mask, ...)``, checkpointed when the
    attention module carries the memcalc flag (other modules run the original)."""

    def eager(
        module: nn.Module,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if not getattr(module, _CORE_FLAG, False):
            return original(module, q, k, v, *args, **kwargs)
        return _checkpointed(functools.partial(_call_with_module, original, module))(
            q, k, v, *args, **kwargs
        )

    eager.memcalc_original = original  # type: ignore[attr-defined]
    return eager


def _call_with_module(
    fn: Callable[..., Any],
    module: nn.Module,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *args: Any,
    **kwargs: Any,
) -> Any:
    return fn(module, q, k, v, *args, **kwargs)


def _recompute_attention_core(model: nn.Module, blocks: list[nn.Module]) -> None:
    """Checkpoint the eager attention core of every block (ours: replace ``attn.core``; HF:
    wrap the modeling module's ``eager_attention_forward`` once, per-module flag)."""
    import sys

    for block in blocks:
        for attn in _attention_modules(block):
            core = getattr(attn, "core", None)
            if core is not None:
                attn.core = _checkpointed(core)  # type: ignore[method-assign]
                continue
            modeling = sys.modules[type(attn).__module__]
            current = modeling.eager_attention_forward
            if not hasattr(current, "memcalc_original"):
                modeling.eager_attention_forward = _hf_eager_patched(current)
            setattr(attn, _CORE_FLAG, True)


class Segment(nn.Module):
    """k consecutive decoder blocks run as one unit, checkpointed and/or offloaded."""

    def __init__(
        self,
        blocks: list[nn.Module],
        *,
        checkpointed: bool,
        offload: bool = False,
        pin_memory: bool = False,
    ):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.checkpointed = checkpointed
        self.offload = offload
        self.pin_memory = pin_memory

    def forward(self, hidden: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        every = (slice(0, len(args)), kwargs)
        return self.run_calls(hidden, args, [every] * len(self.blocks))

    def run_calls(
        self,
        hidden: torch.Tensor,
        flat: tuple[Any, ...],
        calls: list[tuple[slice, dict[str, Any]]],
    ) -> torch.Tensor:
        """The blocks in turn after the hidden state: block j with ``flat[calls[j][0]]`` as
        its positional arguments and ``calls[j][1]`` as its keywords."""

        def run(h: torch.Tensor, *positional: Any) -> torch.Tensor:
            for block, (part, kw) in zip(self.blocks, calls, strict=True):
                out = block(h, *positional[part], **kw)
                h = out[0] if isinstance(out, tuple) else out
            return h

        offload = (
            torch.autograd.graph.save_on_cpu(pin_memory=self.pin_memory)
            if self.offload
            else contextlib.nullcontext()
        )
        with offload:
            if not self.checkpointed:
                return run(hidden, *flat)
            # Positional tensors are what the checkpoint holds (its _NoopSaveInputs).
            return checkpoint(run, hidden, *flat, use_reentrant=False, preserve_rng_state=True)


class _Members:
    """The k blocks of one checkpointed segment, run by the last one's ``_Member``: what the
    model's loop passes to each block (its positional arguments and keywords) is collected
    until then."""

    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.hidden: torch.Tensor | None = None


class _Member(nn.Module):
    """One block of a segment in the model's own block list, for models whose loop passes
    each layer its own arguments: HF Gemma 2 / Gemma 3 pick the mask and rotary tables of
    ``config.layer_types[i]`` for the i-th entry (``modeling_gemma3.Gemma3TextModel.forward``),
    so a list of k-block ``Segment`` modules would give a whole segment the arguments of the
    segment's index (a full-attention layer the sliding-window mask and the reverse). A member
    before its segment's last records its call and hands the hidden state on unchanged; the
    last runs the segment -- under one checkpoint -- with every block's own call."""

    def __init__(self, block: nn.Module, members: _Members, last: bool) -> None:
        super().__init__()
        self.block = block
        self._members = [members]  # a list: not registered as a submodule
        self.last = last

    def forward(self, hidden: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        group = self._members[0]
        if group.hidden is None:
            group.hidden = hidden
        group.calls.append((args, kwargs))
        if not self.last:
            return hidden
        start, calls = group.hidden, group.calls
        group.hidden, group.calls = None, []
        flat: tuple[Any, ...] = ()
        parts = []
        for a, kw in calls:
            parts.append((slice(len(flat), len(flat) + len(a)), kw))
            flat += a
        return group.segment.run_calls(start, flat, parts)


def _uses_eager(model: nn.Module) -> bool:
    cfg = getattr(model, "cfg", None) or getattr(model, "config", None)
    return (getattr(cfg, "attention", None) or getattr(cfg, "_attn_implementation", "")) == "eager"


def _attention_modules(block: nn.Module) -> list[nn.Module]:
    names = ("attn", "self_attn", "attention")  # GPT-2 / Llama and most HF / GPT-NeoX
    return [getattr(block, n) for n in names if isinstance(getattr(block, n, None), nn.Module)]


def _per_layer_arguments(model: nn.Module) -> bool:
    """Whether the model's loop passes its layers different arguments: an HF config with more
    than one of ``layer_types`` (each type its own mask and rotary tables)."""
    cfg = getattr(model, "config", None)
    return len(set(getattr(cfg, "layer_types", None) or ())) > 1


def apply_strategy(
    model: nn.Module,
    recompute: Recompute,
    *,
    every: int | None = None,
    offload_activations: bool = False,
    pin_memory: bool = False,
) -> str:
    """Regroup the model's blocks into Segments for ``recompute``; returns a label."""
    parent, attr = layer_list(model)
    blocks = list(getattr(parent, attr))
    n = len(blocks)
    if recompute is Recompute.budget:
        raise MemcalcError(
            "--recompute: budget is not measured; choose one of: none, selective, full, "
            "every-k, block"
        )
    if recompute is Recompute.none and not offload_activations:
        return "none"
    k = 1
    checkpointed = recompute is not Recompute.none
    if recompute is Recompute.every_k:
        k = _blocks_in_range(every or sqrt_k(n), n)
    if recompute is Recompute.selective:
        if _uses_eager(model):
            _recompute_attention_core(model, blocks)
        checkpointed = False
        if not offload_activations:
            return "selective"
    first = n  # the blocks checkpointed: all of them, but for block
    if recompute is Recompute.block:
        # Megatron --recompute-method block --recompute-num-layers k: the first k blocks each
        # checkpointed from its own input, the rest kept (transformer_block.py
        # _checkpointed_forward, method 'block'); k defaults to 1 as the estimate's plan does
        # (strategies/recompute.py plan_for)
        first = _blocks_in_range(every or 1, n)
    segments = [
        Segment(
            blocks[i : i + k],
            checkpointed=checkpointed and i < first,
            offload=offload_activations,
            pin_memory=pin_memory,
        )
        for i in range(0, n, k)
    ]
    if k > 1 and _per_layer_arguments(model):
        members = []
        for seg in segments:
            group = _Members(seg)
            members += [
                _Member(b, group, j == len(seg.blocks) - 1) for j, b in enumerate(seg.blocks)
            ]
        setattr(parent, attr, nn.ModuleList(members))
    else:
        setattr(parent, attr, nn.ModuleList(segments))
    label = {Recompute.every_k: f"every-{k}", Recompute.block: f"block-{first}"}.get(
        recompute, recompute.value
    )
    return label + (" + activations=cpu" if offload_activations else "")


def _blocks_in_range(k: int, n: int) -> int:
    """``k`` (``--every``: blocks per segment, or blocks recomputed) if 1 <= k <= n."""
    if not 1 <= k <= n:
        raise MemcalcError(f"--every: must be between 1 and the number of blocks ({n}); got {k}")
    return k


@contextlib.contextmanager
def bool_dropout_masks():  # type: ignore[no-untyped-def]
    """Route ``F.dropout`` to ``torch.native_dropout`` (what CUDA runs): a 1-byte bool mask is
    saved instead of CPU dropout's mask in the input dtype. Only needed on CPU."""
    original = torch.nn.functional.dropout

    def native(
        input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
    ) -> torch.Tensor:
        if not training or p == 0:
            return input
        return torch.native_dropout(input, p, True)[0]

    torch.nn.functional.dropout = native  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.nn.functional.dropout = original
