"""Record the forward under FakeTensorMode (saved storages, module scopes, per-op FLOPs);
find the blocks; run the forward and the loss."""

from __future__ import annotations

import bisect
import contextlib
import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry, sdpa_flop_count

from memcalc.errors import MemcalcError
from memcalc.graph.ops import Saved
from memcalc.measure.reference_model import Transformer, causal_lm_loss
from memcalc.measure.trace.common import BY_ITEMSIZE, PROLOGUE, TORCH_TO_DTYPE
from memcalc.spec.training import DType

# ---------------------------------------------------------------------------------------------
# Recording the forward


def storage_key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def memcalc_dtype(dtype: torch.dtype) -> DType:
    return TORCH_TO_DTYPE.get(dtype) or BY_ITEMSIZE.get(dtype.itemsize, DType.int8)


@dataclass
class StorageRecord:
    key: int
    name: str
    nbytes: int
    dtype: torch.dtype
    scope: int
    """The scope that was running when the storage was first noted."""

    def saved(self) -> Saved:
        dtype = memcalc_dtype(self.dtype)
        if self.nbytes % dtype.itemsize:
            dtype = DType.int8
        return Saved(self.name, self.nbytes // dtype.itemsize, dtype)


@dataclass
class _Timeline:
    """Values that change at autograd sequence numbers: the value at a node is the last one
    set at or before the node's sequence number (nodes made later get larger numbers)."""

    seqs: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)

    def set(self, seq: int, value: Any) -> None:
        self.seqs.append(seq)
        self.values.append(value)

    def at(self, seq: int, default: Any) -> Any:
        i = bisect.bisect_right(self.seqs, seq) - 1
        return self.values[i] if i >= 0 else default


@dataclass
class Recorder:
    """What the forward leaves behind: saved storages, where each module and block ran (in
    autograd sequence numbers), block inputs, op outputs and FLOPs."""

    exclude: set[int]
    """Parameter and buffer storages."""
    block_index: dict[int, int]
    """id(block module) -> its index."""
    paths: dict[int, str]
    """id(module) -> its qualified name."""
    scope: int = PROLOGUE
    storages: dict[int, StorageRecord] = field(default_factory=dict)
    """Every storage given a name (saved ones, block inputs, core inputs)."""
    saved: list[int] = field(default_factory=list)
    """Keys of the storages autograd saved, in the order it saved them."""
    saved_set: set[int] = field(default_factory=set)
    module_stack: list[str] = field(default_factory=list)
    modules: _Timeline = field(default_factory=_Timeline)
    scopes: _Timeline = field(default_factory=_Timeline)
    block_inputs: dict[int, torch.Tensor] = field(default_factory=dict)
    shared_inputs: dict[int, torch.Tensor] = field(default_factory=dict)
    """Tensors passed to blocks besides the hidden state (masks, RoPE cos/sin), by storage."""
    first_scope_of_module: dict[str, int] = field(default_factory=dict)
    outputs: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    """Autograd sequence number -> the tensors the op that made that node returned."""
    flops: list[tuple[int, int]] = field(default_factory=list)
    """(autograd sequence number of the op's node, FLOPs)."""
    keep_alive: list[torch.Tensor] = field(default_factory=list)
    """Tensors whose storage keys were noted, kept so that no storage address is reused."""
    attention_inputs: list[Any] = field(default_factory=list)
    """The autograd nodes that made the q, k, v passed to HF's eager attention functions
    (where a selective checkpoint of the attention core starts; ``attention_calls``)."""
    extra_saves: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    """Autograd sequence number -> tensors its node keeps for backward outside
    ``save_for_backward`` (the grouped-mm fallback's ``ctx.offs``), noted as saved by it."""

    def storage(self, t: torch.Tensor) -> StorageRecord:
        key = storage_key(t)
        st = self.storages.get(key)
        if st is None:
            nbytes = t.untyped_storage().nbytes()
            st = StorageRecord(key, f"t{len(self.storages)}", nbytes, t.dtype, self.scope)
            self.storages[key] = st
            self.keep_alive.append(t)
        return st

    def note_saved(self, seq: int, t: torch.Tensor) -> None:
        """``t`` is kept for backward by the node with sequence number ``seq``, though not
        through saved_tensors_hooks."""
        self.pack(t)
        self.extra_saves.setdefault(seq, []).append(t)

    # saved_tensors_hooks
    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = storage_key(t)
        if key not in self.exclude and key not in self.saved_set:
            if t.untyped_storage().nbytes() > 0:
                self.storage(t)
                self.saved.append(key)
                self.saved_set.add(key)
        return t

    # module hooks
    def pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seq = torch._C._autograd._get_sequence_nr()
        path = self.paths.get(id(module), "")
        index = self.block_index.get(id(module))
        if index is not None:
            self.scope = index
            self.scopes.set(seq, index)
            self._note_block_inputs(index, args, kwargs)
        self.first_scope_of_module.setdefault(path, self.scope)
        self.module_stack.append(path)
        self.modules.set(seq, path)

    def post(self, module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        seq = torch._C._autograd._get_sequence_nr()
        if self.module_stack:
            self.module_stack.pop()
        self.modules.set(seq, self.module_stack[-1] if self.module_stack else "")
        if self.block_index.get(id(module)) == len(self.block_index) - 1:
            self.scope = len(self.block_index)
            self.scopes.set(seq, self.scope)

    def _note_block_inputs(self, index: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The hidden state (first positional tensor, else ``hidden_states=``) is the block's
        input; every other tensor argument is shared by the blocks."""
        flat, _ = tree_flatten((args, kwargs))
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        hidden = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if hidden is None:
            hidden = kwargs.get("hidden_states")
        if hidden is None:
            hidden = next((t for t in tensors if t.is_floating_point()), None)
        if hidden is None:
            return
        self.block_inputs.setdefault(index, hidden)
        self.keep_alive.append(hidden)
        for t in tensors:
            key = storage_key(t)
            if t is not hidden and key not in self.exclude and t.untyped_storage().nbytes():
                self.shared_inputs.setdefault(key, t)


@contextlib.contextmanager
def attention_calls(model: nn.Module, rec: Recorder) -> Iterator[None]:
    """Note the nodes that made q, k and v at each call of an HF ``eager_attention_forward``
    (looked up in its modeling module at call time, as measure's selective recompute wraps
    it): what a checkpoint of the attention core would hold."""
    patched: dict[Any, Any] = {}
    for m in model.modules():
        module = sys.modules.get(type(m).__module__)
        original = getattr(module, "eager_attention_forward", None)
        if module is None or original is None or module in patched:
            continue
        patched[module] = original

        def eager(attn: nn.Module, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            for t in args[:3]:
                if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                    rec.attention_inputs.append(t.grad_fn)
            return _original(attn, *args, **kwargs)

        module.eager_attention_forward = eager  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module, original in patched.items():
            module.eager_attention_forward = original  # type: ignore[attr-defined]


class OpRecorder(TorchDispatchMode):
    """Below autograd: each op's outputs and FLOPs, keyed by the autograd node the op made.

    The node is made before the op is dispatched, so its sequence number is the counter's
    current value minus one (only when some input requires grad; otherwise no node is made).
    FLOPs use FlopCounterMode's formulas (``torch.utils.flop_counter.flop_registry``), plus what
    that registry lacks: the CPU flash-attention kernel and the grouped matmul of MoE experts
    (``aten._grouped_mm`` and transformers' ``grouped_mm_fallback``: 2 * rows * in * out, every
    routed row once -- HF's dropless routing sends each token's k copies, t * k rows in all):
    matmuls and attention only.
    """

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder
        self.grouped_mm = _grouped_mm_ops()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        flat, _ = tree_flatten((args, kwargs))
        if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in flat):
            return out
        seq = torch._C._autograd._get_sequence_nr() - 1
        produced = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.recorder.outputs.setdefault(seq, []).extend(produced)
        packet = func._overloadpacket
        flops = 0
        if packet is torch.ops.aten._scaled_dot_product_flash_attention_for_cpu:
            flops = sdpa_flop_count(args[0].shape, args[1].shape, args[2].shape)
        elif packet in self.grouped_mm:
            # (S, in) x (E, in, out) with offsets: each of the S rows meets one expert
            rows, n_in = args[0].shape
            flops = 2 * rows * n_in * args[1].shape[-1]
            if packet is not torch.ops.aten._grouped_mm:
                # the fallback keeps the offsets in ctx.offs (GroupedMmBackward0 saves them)
                offs = args[2] if len(args) > 2 else kwargs.get("offs")
                if isinstance(offs, torch.Tensor):
                    self.recorder.note_saved(seq, offs)
        elif packet in flop_registry:
            try:
                flops = flop_registry[packet](*args, **kwargs, out_val=out)
            except Exception:  # pragma: no cover - a formula that rejects these shapes
                flops = 0
        if flops:
            self.recorder.flops.append((seq, int(flops)))
        return out


def _grouped_mm_ops() -> tuple[Any, ...]:
    """The grouped matmul ops MoE experts run (transformers' fallback only once registered)."""
    ops: list[Any] = [torch.ops.aten._grouped_mm]
    fallback = getattr(getattr(torch.ops, "transformers", None), "grouped_mm_fallback", None)
    if fallback is not None:
        ops.append(fallback)
    return tuple(ops)


# ---------------------------------------------------------------------------------------------
# The blocks, the forward call and the loss


def find_blocks(model: nn.Module) -> tuple[str, list[nn.Module]]:
    """The decoder blocks: the children of the largest ``nn.ModuleList`` (or ``nn.Sequential``)
    whose children are all of one type -- by parameter count, then length."""
    best: tuple[int, int, str, list[nn.Module]] | None = None
    for path, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)) or len(module) == 0:
            continue
        children = list(module)
        if len({type(c) for c in children}) != 1:
            continue
        numel = sum(p.numel() for p in module.parameters())
        key = (numel, len(children), path, children)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        raise MemcalcError(
            f"cannot find the decoder blocks of {type(model).__name__}: "
            "no nn.ModuleList of modules of one type"
        )
    return best[2], best[3]


def run_forward(model: nn.Module, ids: torch.Tensor) -> Any:
    """HF models and forwards with a ``labels`` argument get ``labels=ids``; memcalc's reference
    model ``(ids, ids)``; any other module ``model(ids)``."""
    if isinstance(model, Transformer):
        return model(ids, ids)
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    if "labels" in params:
        if "input_ids" in params:
            return model(input_ids=ids, labels=ids)
        return model(ids, labels=ids)
    return model(ids)


def loss_and_logits(out: Any, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``output.loss`` if it has one; else HF's causal-LM loss over a (B, S, V) output (or its
    ``.logits`` / ``[0]``); else ``output.sum()``."""
    batch, seq = ids.shape
    logits = getattr(out, "logits", None)
    if logits is None and isinstance(out, (tuple, list)) and out:
        logits = out[0]
    if logits is None and isinstance(out, torch.Tensor):
        logits = out
    if not (isinstance(logits, torch.Tensor) and tuple(logits.shape[:-1]) == (batch, seq)):
        logits = None
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss, logits
    if isinstance(out, torch.Tensor) and out.dim() == 0:
        return out, None
    if logits is not None and logits.is_floating_point():
        return causal_lm_loss(logits, ids, logits.shape[-1]), logits
    tensor = (
        out
        if isinstance(out, torch.Tensor)
        else next(
            (t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad),
            None,
        )
    )
    if tensor is None:
        raise MemcalcError(
            f"the model's forward returned {type(out).__name__} with no tensor to take a loss of"
        )
    return tensor.sum(), logits
