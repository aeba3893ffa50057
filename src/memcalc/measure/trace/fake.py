"""Make fake CPU tensors run what a GPU runs (bool dropout masks, flash SDPA, no packing)."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from memcalc.measure.strategies import bool_dropout_masks

# ---------------------------------------------------------------------------------------------
# What a GPU runs, under fake CPU tensors


SDPA_SPANS: list[tuple[int, int]] = []
"""Autograd sequence numbers [first, last) of the nodes each SDPA call made (``gpu_kernels``):
a fused kernel to memcalc, even when the CPU runs it as a math composite of matmuls."""


@contextlib.contextmanager
def gpu_kernels() -> Iterator[None]:
    """Route the CPU-only code paths to the tensors a GPU saves (see the module docstring), and
    note where each SDPA call's nodes are (``SDPA_SPANS``)."""
    original_sdpa = F.scaled_dot_product_attention
    SDPA_SPANS.clear()

    def sdpa(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        first = torch._C._autograd._get_sequence_nr()
        try:
            return _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        finally:
            SDPA_SPANS.append((first, torch._C._autograd._get_sequence_nr()))

    def _sdpa(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None,
        dropout_p: float,
        is_causal: bool,
        scale: float | None,
        enable_gqa: bool,
    ) -> torch.Tensor:
        heads_match = query.shape[-3] == key.shape[-3]
        flash_dims = query.shape[-1] == value.shape[-1]  # MLA (v_head_dim != qk) has no flash
        if (
            dropout_p > 0
            and query.device.type == "cpu"
            and (heads_match or enable_gqa)
            and flash_dims
        ):
            # aten._scaled_dot_product_flash_attention_for_cpu: saves q, k, v, out, logsumexp
            # (as CUDA flash); dropout is replayed from the RNG state, no mask is kept. Only
            # reached under FakeTensorMode (the real CPU kernel has no dropout). What the
            # composite F.scaled_dot_product_attention does first is done here too: autocast
            # casts q, k, v to its 16-bit dtype, and a boolean mask becomes an additive one in
            # q's dtype (convert_boolean_attn_mask), which the kernel saves.
            if torch.is_autocast_enabled(query.device.type):
                dtype = torch.get_autocast_dtype(query.device.type)
                query, key, value = (t.to(dtype) for t in (query, key, value))
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(
                    attn_mask.logical_not(), float("-inf")
                )
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
            )[0]
        return original_sdpa(
            query,
            key,
            value,
            attn_mask=attn_mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
            enable_gqa=enable_gqa,
        )

    F.scaled_dot_product_attention = sdpa  # type: ignore[assignment]
    try:
        with bool_dropout_masks():
            yield
    finally:
        F.scaled_dot_product_attention = original_sdpa  # type: ignore[assignment]


@contextlib.contextmanager
def unpacked_sequences() -> Iterator[None]:
    """transformers checks position ids for packed sequences, and under FakeTensorMode (it
    cannot read the values) assumes they are packed: it then materialises a (b, 1, s, s) mask
    and, with a mask, SDPA repeats k and v to all heads. Our position ids are 0..s-1 in every
    row, one sequence each, which is what a real run finds. Enter after the model is built
    (that is when transformers' masking module has been imported)."""
    masking = sys.modules.get("transformers.masking_utils")
    packed = getattr(masking, "find_packed_sequence_indices", None)
    if packed is None:
        yield
        return
    masking.find_packed_sequence_indices = lambda position_ids: None  # type: ignore[union-attr]
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = packed  # type: ignore[union-attr]


@contextlib.contextmanager
def grouped_mm_in_any_dtype() -> Iterator[None]:
    """MoE experts in fp32 (and under autocast, whose fp32 weights make ``_grouped_mm`` run in
    fp32): the fake kernel of ``aten._grouped_mm`` encodes the CUDA rule and refuses anything
    but bf16 ("Expected inputs of BF16 type"), though the real CPU kernel accepts fp32. HF's
    ``transformers.integrations.moe._grouped_mm`` then has its own route, the custom op
    ``transformers::grouped_mm_fallback``, with a registered fake and an autograd that saves
    the input and the weight (as ``GroupedMmBackward0`` does; the offsets it keeps in
    ``ctx.offs`` are noted as saved by ``OpRecorder``). So, while tracing and only for weights
    that are not bf16, ``_can_use_grouped_mm`` answers False. bf16 keeps the real op. Enter
    after the model is built (that is when transformers' moe module has been imported)."""
    moe = sys.modules.get("transformers.integrations.moe")
    can_use = getattr(moe, "_can_use_grouped_mm", None)
    if can_use is None:
        yield
        return

    def bf16_only(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> bool:
        return weight.dtype == torch.bfloat16 and bool(can_use(input, weight, offs))

    moe._can_use_grouped_mm = bf16_only  # type: ignore[union-attr]
    try:
        yield
    finally:
        moe._can_use_grouped_mm = can_use  # type: ignore[union-attr]


def kept_in_fp32(model: nn.Module, dtype: torch.dtype) -> re.Pattern[str] | None:
    """The parameter names ``from_pretrained(dtype=dtype)`` leaves in fp32: the model's
    ``_keep_in_fp32_modules_strict`` (and, in fp16, ``_keep_in_fp32_modules``), matched
    anywhere in the full name as transformers matches them; None: none (or not 16 bits)."""
    if dtype not in (torch.float16, torch.bfloat16):
        return None
    patterns = set()
    for prefix, child in model.named_modules():
        names = set(getattr(child, "_keep_in_fp32_modules_strict", None) or [])
        if dtype == torch.float16:
            names |= set(getattr(child, "_keep_in_fp32_modules", None) or [])
        for name in names:
            rule = name.replace("*", ".*")
            patterns.add(rf"^{re.escape(prefix)}\..*{rule}" if prefix else rule)
    return re.compile("|".join(sorted(patterns))) if patterns else None


def cast_floating(
    model: nn.Module, dtype: torch.dtype, keep: re.Pattern[str] | None = None
) -> nn.Module:
    """``model.to(dtype)`` for fake parameters (``Module.to`` swaps tensors, which fake
    parameters refuse): floating parameters and buffers become ``dtype``, tied ones stay tied;
    parameters whose names match ``keep`` stay as they are (``kept_in_fp32``)."""
    memo: dict[int, nn.Parameter] = {}
    for prefix, module in model.named_modules():
        for key, p in list(module._parameters.items()):
            if p is None or not p.is_floating_point() or p.dtype == dtype:
                continue
            if keep is not None and keep.search(f"{prefix}.{key}" if prefix else key):
                continue
            if id(p) not in memo:
                memo[id(p)] = nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
            module._parameters[key] = memo[id(p)]
        for key, b in list(module._buffers.items()):
            if b is not None and b.is_floating_point():
                module._buffers[key] = b.to(dtype)
    return model
