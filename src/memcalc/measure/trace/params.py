"""ParamCounts from a module's own parameter tensors (tied weights once)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from memcalc.errors import MemcalcError
from memcalc.graph.ops import Component
from memcalc.measure.trace.capture import storage_key
from memcalc.measure.trace.common import PROLOGUE
from memcalc.measure.trace.graph import component_of
from memcalc.params import ParamCounts, ParamTensor
from memcalc.spec.training import DType

DTYPES = {torch.float32: DType.fp32, torch.bfloat16: DType.bf16, torch.float16: DType.fp16}

# ---------------------------------------------------------------------------------------------
# Parameters


def param_counts(
    model: nn.Module,
    blocks: list[nn.Module],
    epilogue_modules: set[str] = frozenset(),  # type: ignore[assignment]
    weight_dtype: torch.dtype | None = None,
) -> ParamCounts:
    """ParamCounts of the module's own tensors (each storage once, so tied weights count once;
    see ``param_tensors``). ``lm_head_numel`` is the head's largest tensor, or the largest
    embedding when there is no head (tied); ``final_norm`` counts the norm parameters of
    ``epilogue_modules`` (first run after the last block)."""
    found = param_tensors(model, blocks, epilogue_modules, weight_dtype)
    tensors = list(found.tensors.values())
    if not tensors:
        raise MemcalcError(f"{type(model).__name__} has no parameters to train")
    embeddings = [m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding)]
    return ParamCounts.from_tensors(
        tensors,
        num_blocks=max(1, len(blocks)),
        lm_head_numel=found.head_numel or max(embeddings, default=0),
        final_norm=found.final_norm,
    )


@dataclass(frozen=True)
class FoundParams:
    tensors: dict[int, ParamTensor]
    """Storage key -> the parameter tensor (first name of a tied storage)."""
    head_numel: int
    final_norm: int


def param_tensors(
    model: nn.Module,
    blocks: list[nn.Module],
    epilogue_modules: set[str] = frozenset(),  # type: ignore[assignment]
    weight_dtype: torch.dtype | None = None,
) -> FoundParams:
    """The module's parameter tensors by storage key, each storage once.

    Components: ``nn.Embedding`` weights -> embedding; modules whose class name contains "Norm"
    -> norms; inside the blocks, by module path (mlp when the path says so, else attention);
    outside the blocks, anything else -> head (an untied output projection). A parameter with
    ``requires_grad=False`` (a frozen base under LoRA) is not trainable: no gradient, no
    optimizer state (``torch/csrc/autograd``: no ``AccumulateGrad`` node is made for it).
    A floating parameter whose dtype is not ``weight_dtype`` (the recipe's: one the model
    keeps in fp32, ``fake.kept_in_fp32``) is stored in a dtype of its own.
    Routed experts (an HF experts module: ``num_experts`` 3-D parameters stacked along dim 0,
    ``config.num_experts_per_tok`` of them per token) count ``top_k`` experts' worth as active.
    """
    top_k = getattr(getattr(model, "config", None), "num_experts_per_tok", None)
    block_ids = {id(b) for b in blocks}
    block_paths = [p for p, m in model.named_modules() if id(m) in block_ids]
    module_of: dict[int, tuple[str, nn.Module]] = {}
    for path, module in model.named_modules():
        for p in module.parameters(recurse=False):
            module_of.setdefault(id(p), (path, module))
    tensors: dict[int, ParamTensor] = {}
    final_norm = head_numel = 0
    for name, p in model.named_parameters():
        key = storage_key(p)
        if key in tensors:
            continue
        path, module = module_of[id(p)]
        inside = any(path == b or path.startswith(b + ".") for b in block_paths)
        if isinstance(module, nn.Embedding):
            comp = "embedding"
        elif "norm" in type(module).__name__.lower():
            comp = "norms"
            final_norm += p.numel() if path in epilogue_modules else 0
        elif inside:
            comp = "mlp" if component_of(path, {}, PROLOGUE, 0) is Component.mlp else "attention"
        else:
            comp = "head"
            head_numel = max(head_numel, p.numel())
        experts = getattr(module, "num_experts", None)
        active = None
        if (
            isinstance(top_k, int)
            and isinstance(experts, int)
            and p.dim() == 3
            and p.shape[0] == experts
            and 0 < top_k <= experts
        ):
            active = p.numel() // experts * top_k
        own = None
        if weight_dtype is not None and p.is_floating_point() and p.dtype != weight_dtype:
            own = DTYPES.get(p.dtype)
        tensors[key] = ParamTensor(
            name, tuple(p.shape), comp, trainable=p.requires_grad, dtype=own, active_numel=active
        )
    return FoundParams(tensors, head_numel, final_norm)
