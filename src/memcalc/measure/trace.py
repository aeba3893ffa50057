"""Trace any ``nn.Module`` into memcalc's op graph under FakeTensorMode: no memory is allocated.

The model is built inside ``torch._subclasses.fake_tensor.FakeTensorMode`` (its parameters are
fake tensors: shapes, dtypes and storages, no data), cast to the activation dtype of the
precision recipe, put in training mode and run forward on int64 token ids of shape (B, S)
(labels = ids), then backward. What the op graph needs is read from autograd itself:

* saved tensors: ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd saves
  for backward; storages are identified by ``t.untyped_storage()._cdata`` (fake tensors have
  storages too), so views of one buffer count once, as in ``measure/tracker.py``. Parameter and
  buffer storages are excluded (they are counted as parameters).
* ops: the autograd graph from ``loss.grad_fn``: each node's ``_saved_*`` attributes (unpacked
  through the hook, so they are the same tensors) name the storages it saved; a node that saves
  an activation becomes one ``Op`` named after the node (``NativeLayerNormBackward0``), in
  forward order (``node._sequence_nr()``). A storage belongs to the first op that saves it.
* scopes: the decoder blocks are the children of the largest ``nn.ModuleList`` of modules of one
  type; module hooks note the autograd sequence number where each module (and block) starts and
  ends, so every node is placed in the prologue, one block or the epilogue, under a module path
  that names its component (attention, mlp, norm; embedding before the blocks, output after).
  A block's input is its first positional tensor; its other tensor arguments (RoPE cos/sin,
  masks) are shared by all blocks: saved, they are counted once in the prologue (as lower.py
  does), unsaved, they are what a per-block checkpoint keeps besides the input.
* attention core (what selective recompute drops): the matmuls of two activations (QK^T, AV;
  every other matmul has a weight operand), every node between them, and the copies and views
  that feed only them (repeat_kv). Its inputs, read from outside, are the core inputs (q, k, v
  before any expansion). Found by structure, not by an (S, S) shape, which q, k and v also have
  when head_dim == S. A fused SDPA/flash kernel has no core to drop.
* FLOPs: the per-op formulas of ``torch.utils.flop_counter`` (FlopCounterMode's registry; matmuls
  and attention kernels only, no elementwise FLOPs), counted in a dispatch mode that attributes
  each op to the autograd node it creates; FLOPs of nodes that save nothing go to the first op
  of their scope, so block totals stay right.
* ``Op.grad_bytes`` is an approximation: 2 x the op's largest saved storage (its output gradient
  and one input gradient of about that size).

On CPU (where FakeTensorMode runs here) three things are routed to what a GPU runs, as
``measure`` does for real CPU runs: ``F.dropout`` to ``torch.native_dropout`` (1-byte bool masks),
``F.scaled_dot_product_attention`` with dropout to the flash kernel (q, k, v, out, logsumexp; the
CPU math fallback would keep the s x s probabilities in fp32), and transformers' packed-sequence
check (which cannot read fake position ids and would materialise a (b, 1, s, s) mask and disable
GQA in SDPA) to "not packed", which is what a real run of these inputs finds. Other kernels save
what the CPU kernel saves (LayerNorm statistics in the input dtype; fp32 on CUDA).
"""

from __future__ import annotations

import bisect
import contextlib
import importlib
import inspect
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry, sdpa_flop_count

from memcalc.errors import MemcalcError
from memcalc.graph.ops import Block, Component, Op, OpGraph, Saved
from memcalc.measure.build import Impl, attention_kind, torch_dtype
from memcalc.measure.reference_model import Config, Transformer, causal_lm_loss
from memcalc.measure.strategies import bool_dropout_masks
from memcalc.params import ParamCounts, ParamTensor
from memcalc.spec.loaders import load_model, read_data_file
from memcalc.spec.model import ModelSpec
from memcalc.spec.presets import PRESETS
from memcalc.spec.training import DType, TrainingSetup

PROLOGUE = -1
"""Scope of everything before the first block (the epilogue is ``len(blocks)``)."""

TORCH_TO_DTYPE = {
    torch.float32: DType.fp32,
    torch.bfloat16: DType.bf16,
    torch.float16: DType.fp16,
    torch.int64: DType.int64,
    torch.int8: DType.int8,
    torch.bool: DType.bool,
    torch.float8_e4m3fn: DType.fp8,
    torch.float8_e5m2: DType.fp8,
}
BY_ITEMSIZE = {1: DType.int8, 2: DType.fp16, 4: DType.fp32, 8: DType.int64}
"""Dtypes memcalc has no name for (int32, uint8, float64...) are recorded by element size, so
their bytes stay exact."""

_LN = re.compile(r"(^|_)ln(_|\d|$)")


@dataclass(frozen=True)
class Trace:
    """The op graph and parameter counts traced from one model."""

    name: str
    graph: OpGraph
    counts: ParamCounts
    seconds: float
    """Wall time of build + forward + backward under FakeTensorMode."""
    tied: bool
    """No separate output projection: the LM head is the embedding (or there is none)."""
    unattributed_bytes: int = 0
    """Saved bytes that no node reachable from the loss claims (kept, in a catch-all op)."""
    notes: tuple[str, ...] = ()

    @property
    def num_ops(self) -> int:
        g = self.graph
        return len(g.prologue) + len(g.epilogue) + sum(len(b.ops) for b in g.blocks)


# ---------------------------------------------------------------------------------------------
# Targets: module:function, HF config.json, memcalc preset / spec file


def parse_input_shape(text: str) -> tuple[int, int]:
    """``"4x1024"`` -> (4, 1024): batch x sequence, both positive.

    >>> parse_input_shape("4x1024")
    (4, 1024)
    """
    parts = text.lower().replace("×", "x").split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise MemcalcError(
            f"--input-shape: expected BxS (batch x sequence length), e.g. 4x1024; got {text!r}"
        )
    return int(parts[0]), int(parts[1])


@dataclass(frozen=True)
class Target:
    """A model to trace: how to build it, and what it is."""

    name: str
    build: Callable[[], nn.Module]
    """Called inside FakeTensorMode."""
    kind: str
    """module, hf-config or spec."""
    vocab_size: int | None = None


def resolve_target(target: str, setup: TrainingSetup, impl: Impl = Impl.ours) -> Target:
    """What ``target`` names: a memcalc preset or spec file (built with ``impl``), an HF
    ``config.json`` (random init), or ``module:function`` returning an ``nn.Module``."""
    path = Path(target)
    if target in PRESETS or (path.suffix == ".toml" and path.is_file()):
        return _spec_target(load_model(target), setup, impl)
    if path.suffix == ".json" and path.is_file():
        data = read_data_file(path)
        if "model_type" in data:
            return _hf_config_target(data, path, setup)
        return _spec_target(load_model(target), setup, impl)
    if path.suffix in (".json", ".toml"):
        raise MemcalcError(f"{target}: no such file")
    if ":" in target:
        return _module_target(target)
    raise MemcalcError(
        f"TARGET: {target!r} is not module:function, an HF config.json, a memcalc spec file "
        f"or a preset ({', '.join(PRESETS)})"
    )


def _spec_target(spec: ModelSpec, setup: TrainingSetup, impl: Impl) -> Target:
    if setup.dropout is not None:
        spec = spec.with_dropout(setup.dropout)
    if spec.is_gpt2 and setup.seq > spec.max_position_embeddings:
        raise MemcalcError(
            f"--input-shape: sequence {setup.seq} is longer than the model's "
            f"max_position_embeddings ({spec.max_position_embeddings})"
        )
    attention = attention_kind(setup)

    def build() -> nn.Module:
        if impl is Impl.ours:
            return Transformer(Config.from_spec(spec, attention))
        from memcalc.measure.build import _hf_model

        return _hf_model(spec, attention)

    return Target(spec.name, build, "spec", spec.vocab_size)


def _hf_config_target(cfg: dict[str, Any], path: Path, setup: TrainingSetup) -> Target:
    try:
        import transformers
    except ImportError:
        raise MemcalcError(
            f"{path}: tracing an HF config needs transformers: pip install 'memcalc[hf]'"
        ) from None
    cfg = dict(cfg)
    model_type = cfg.pop("model_type")
    cfg["use_cache"] = False  # training: no KV cache
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError, TypeError) as e:
        raise MemcalcError(f"{path}: model_type {model_type!r}: {_one_line(e)}") from None
    if setup.dropout is not None:
        for key in (
            "attention_dropout",
            "attn_pdrop",
            "resid_pdrop",
            "embd_pdrop",
            "hidden_dropout",
            "hidden_dropout_prob",
            "attention_probs_dropout_prob",
        ):
            if hasattr(config, key):
                setattr(config, key, setup.dropout)
    attention = attention_kind(setup)

    def build() -> nn.Module:
        try:
            return transformers.AutoModelForCausalLM.from_config(
                config, attn_implementation=attention
            )
        except Exception as e:  # transformers' own checks, any kind: one line
            raise MemcalcError(f"{path}: {_one_line(e)}") from None

    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return Target(name or model_type, build, "hf-config", getattr(config, "vocab_size", None))


def _module_target(target: str) -> Target:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise MemcalcError(f"{target}: expected module:function, e.g. mypkg.models:build_model")

    def build() -> nn.Module:
        with _cwd_on_path():
            try:
                module = importlib.import_module(module_name)
            except Exception as e:  # user code: any failure is one line
                raise MemcalcError(
                    f"{target}: cannot import {module_name!r}: {_one_line(e)}"
                ) from None
            fn: Any = module
            for part in attr.split("."):
                if not hasattr(fn, part):
                    raise MemcalcError(
                        f"{target}: module {module_name!r} has no attribute {attr!r}"
                    )
                fn = getattr(fn, part)
            if not callable(fn):
                raise MemcalcError(f"{target}: {attr!r} is not callable")
            try:
                model = fn()
            except MemcalcError:
                raise
            except Exception as e:  # user code
                raise MemcalcError(f"{target}: {attr}() failed: {_one_line(e)}") from None
        if not isinstance(model, nn.Module):
            raise MemcalcError(
                f"{target}: {attr}() returned {type(model).__name__}, not a torch.nn.Module"
            )
        return model

    return Target(target, build, "module")


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    """Local packages import as from ``python -c``: the working directory goes first."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


# ---------------------------------------------------------------------------------------------
# What a GPU runs, under fake CPU tensors


@contextlib.contextmanager
def gpu_kernels() -> Iterator[None]:
    """Route the CPU-only code paths to the tensors a GPU saves (see the module docstring)."""
    original_sdpa = F.scaled_dot_product_attention

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
        heads_match = query.shape[-3] == key.shape[-3]
        if dropout_p > 0 and query.device.type == "cpu" and (heads_match or enable_gqa):
            # aten._scaled_dot_product_flash_attention_for_cpu: saves q, k, v, out, logsumexp
            # (as CUDA flash); dropout is replayed from the RNG state, no mask is kept. Only
            # reached under FakeTensorMode (the real CPU kernel has no dropout).
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


def cast_floating(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``model.to(dtype)`` for fake parameters (``Module.to`` swaps tensors, which fake
    parameters refuse): floating parameters and buffers become ``dtype``, tied ones stay tied."""
    memo: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is None or not p.is_floating_point() or p.dtype == dtype:
                continue
            if id(p) not in memo:
                memo[id(p)] = nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
            module._parameters[key] = memo[id(p)]
        for key, b in list(module._buffers.items()):
            if b is not None and b.is_floating_point():
                module._buffers[key] = b.to(dtype)
    return model


# ---------------------------------------------------------------------------------------------
# Recording the forward


def _storage_key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def _dtype(dtype: torch.dtype) -> DType:
    return TORCH_TO_DTYPE.get(dtype) or BY_ITEMSIZE.get(dtype.itemsize, DType.int8)


@dataclass
class _Storage:
    key: int
    name: str
    nbytes: int
    dtype: torch.dtype
    scope: int
    """The scope that was running when the storage was first noted."""

    def saved(self) -> Saved:
        dtype = _dtype(self.dtype)
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
class _Recorder:
    """What the forward leaves behind: saved storages, where each module and block ran (in
    autograd sequence numbers), block inputs, op outputs and FLOPs."""

    exclude: set[int]
    """Parameter and buffer storages."""
    block_index: dict[int, int]
    """id(block module) -> its index."""
    paths: dict[int, str]
    """id(module) -> its qualified name."""
    scope: int = PROLOGUE
    storages: dict[int, _Storage] = field(default_factory=dict)
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

    def storage(self, t: torch.Tensor) -> _Storage:
        key = _storage_key(t)
        st = self.storages.get(key)
        if st is None:
            nbytes = t.untyped_storage().nbytes()
            st = _Storage(key, f"t{len(self.storages)}", nbytes, t.dtype, self.scope)
            self.storages[key] = st
            self.keep_alive.append(t)
        return st

    # saved_tensors_hooks
    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
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
            key = _storage_key(t)
            if t is not hidden and key not in self.exclude and t.untyped_storage().nbytes():
                self.shared_inputs.setdefault(key, t)


class _OpRecorder(TorchDispatchMode):
    """Below autograd: each op's outputs and FLOPs, keyed by the autograd node the op made.

    The node is made before the op is dispatched, so its sequence number is the counter's
    current value minus one (only when some input requires grad; otherwise no node is made).
    FLOPs use FlopCounterMode's formulas (``torch.utils.flop_counter.flop_registry``), plus the
    CPU flash-attention kernel that registry lacks: matmuls and attention only.
    """

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

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
        elif packet in flop_registry:
            try:
                flops = flop_registry[packet](*args, **kwargs, out_val=out)
            except Exception:  # pragma: no cover - a formula that rejects these shapes
                flops = 0
        if flops:
            self.recorder.flops.append((seq, int(flops)))
        return out


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


def _forward(model: nn.Module, ids: torch.Tensor) -> Any:
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


def _loss_and_logits(out: Any, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
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


# ---------------------------------------------------------------------------------------------
# From the autograd graph to ops

MOVEMENT = frozenset(
    f"{name}Backward{i}"
    for name in (
        "Alias",
        "AsStrided",
        "Clone",
        "Expand",
        "Permute",
        "ReshapeAlias",
        "Select",
        "Slice",
        "Split",
        "SplitWithSizes",
        "Squeeze",
        "ToCopy",
        "Transpose",
        "Unbind",
        "Unsqueeze",
        "UnsafeSplit",
        "UnsafeView",
        "View",
    )
    for i in range(3)
)
"""Autograd nodes that only move or copy data (views, copies, casts): the attention core
reaches back through them to the tensors it reads (repeat_kv's expand + reshape of k and v,
matmul's reshape of q)."""

UNATTRIBUTED = "saved (no node claims it)"


@dataclass
class _Node:
    node: Any
    seq: int
    scope: int
    path: str
    saves: list[tuple[_Storage, torch.Tensor]]
    """The activation storages it saved (parameters excluded), with the tensor saved."""

    @property
    def kind(self) -> str:
        return type(self.node).__name__


def _saved_tensors(node: Any) -> list[torch.Tensor]:
    """The tensors a node saved (C++ nodes: ``_saved_*``; custom Functions: ``saved_tensors``).
    Reading them unpacks through the hooks, which return the tensor itself."""
    names = [a for a in dir(node) if a.startswith("_saved_")]
    if hasattr(node, "saved_tensors"):
        names.append("saved_tensors")
    out: list[torch.Tensor] = []
    for name in names:
        try:
            value = getattr(node, name)
        except RuntimeError:  # freed or undefined
            continue
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, torch.Tensor):
                out.append(v)
    return out


def _nodes(rec: _Recorder, loss: torch.Tensor) -> list[_Node]:
    """Every node reachable from ``loss.grad_fn`` (leaf accumulators excluded), in forward
    order, with the scope and module it ran in and the storages it saved."""
    if loss.grad_fn is None:
        raise MemcalcError("the loss does not depend on any parameter (nothing to train)")
    seen: set[int] = set()
    found: list[Any] = []
    stack: list[Any] = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)  # holds the Python wrapper, so ids are not reused
        stack.extend(n for n, _ in node.next_functions)
    out = []
    for node in sorted(found, key=lambda n: n._sequence_nr()):
        if type(node).__name__ == "AccumulateGrad":
            continue
        s = node._sequence_nr()
        saves: list[tuple[_Storage, torch.Tensor]] = []
        for t in _saved_tensors(node):
            st = rec.storages.get(_storage_key(t))
            if st is not None and st.key in rec.saved_set and all(st is not x for x, _ in saves):
                saves.append((st, t))
        scope = rec.scopes.at(s, PROLOGUE)
        out.append(_Node(node, s, scope, rec.modules.at(s, ""), saves))
    return out


MATMULS = frozenset({"BmmBackward0", "MmBackward0", "BaddbmmBackward0"})


def _from_parameter(node: Any) -> bool:
    """The operand comes from a parameter (possibly through views: ``weight.t()``)."""
    while node is not None:
        kind = type(node).__name__
        if kind == "AccumulateGrad":
            return True
        if kind not in MOVEMENT and kind != "TBackward0":
            return False
        node = node.next_functions[0][0] if node.next_functions else None
    return False


def _core_region(nodes: list[_Node], n: int) -> set[int]:
    """ids of the nodes a checkpoint around each block's attention core would replay.

    The attention matmuls are the matmuls of two activations (every other matmul of a block
    has a weight operand): QK^T and AV. The core is both of them and every node on a path
    between them (scale, mask add, softmax, casts, dropout), plus the data-movement nodes that
    feed only the core (repeat_kv's expand + copy of k and v, matmul's reshape of q). A fused
    kernel (SDPA, flash) has no such matmuls: nothing to drop, as in lower.py.
    """
    by_id = {id(x.node): x for x in nodes}
    consumers: dict[int, list[int]] = {}
    for x in nodes:
        for p, _ in x.node.next_functions:
            if p is not None:
                consumers.setdefault(id(p), []).append(id(x.node))
    region: set[int] = set()
    for block in range(n):
        inside = [x for x in nodes if x.scope == block]
        matmuls = {
            id(x.node)
            for x in inside
            if x.kind in MATMULS
            and all(p is not None and not _from_parameter(p) for p, _ in x.node.next_functions)
        }
        if not matmuls:
            continue
        after: set[int] = set()  # reached forward from an attention matmul
        for x in inside:
            if id(x.node) in matmuls or any(
                p is not None and id(p) in after for p, _ in x.node.next_functions
            ):
                after.add(id(x.node))
        before: set[int] = set()  # reaches an attention matmul
        for x in reversed(inside):
            if id(x.node) in matmuls or any(c in before for c in consumers.get(id(x.node), [])):
                before.add(id(x.node))
        core = (after & before) | matmuls
        for x in reversed(inside):
            used_by = consumers.get(id(x.node), [])
            if id(x.node) in core or (
                x.kind in MOVEMENT and used_by and all(c in core for c in used_by)
            ):
                core.add(id(x.node))
        region |= {i for i in core if i in by_id}
    return region


def _core_inputs(rec: _Recorder, x: _Node, region: set[int]) -> list[Saved]:
    """The tensors a core node reads from outside the core (q, k, v before any expansion)."""
    out = []
    for p, nr in x.node.next_functions:
        if p is None or id(p) in region or type(p).__name__ == "AccumulateGrad":
            continue
        meta = p._input_metadata[nr]
        shape, dtype = tuple(meta.shape), meta.dtype
        made = [
            t
            for t in rec.outputs.get(p._sequence_nr(), [])
            if tuple(t.shape) == shape and t.dtype == dtype
        ]
        if made:
            out.append(rec.storage(made[min(nr, len(made) - 1)]).saved())
        else:  # pragma: no cover - an op the dispatch mode did not see
            numel = math.prod(shape)
            out.append(Saved(f"core_input.{p._sequence_nr()}.{nr}", numel, _dtype(dtype)))
    return out


def _graph(
    rec: _Recorder,
    blocks: list[nn.Module],
    modules: dict[str, nn.Module],
    loss: torch.Tensor,
    logits: torch.Tensor | None,
    batch: int,
    seq: int,
) -> OpGraph:
    n = len(blocks)
    missing = [i for i in range(n) if i not in rec.block_inputs]
    if missing:
        raise MemcalcError(f"block {missing[0]} of {n} was never called in the forward")
    nodes = _nodes(rec, loss)

    # Each storage belongs to the scope of the first node that saves it; tensors passed to
    # every block besides the hidden state (RoPE cos/sin) are counted once, in the prologue,
    # as lower.py does; storages no reachable node claims stay where they were saved.
    owner: dict[int, int] = {}
    for x in nodes:
        for st, _ in x.saves:
            owner.setdefault(st.key, x.scope)
    for key in rec.shared_inputs:
        if key in owner:
            owner[key] = PROLOGUE
    claimed = set(owner)
    for key in rec.saved:
        owner.setdefault(key, rec.storages[key].scope)

    region = _core_region(nodes, n)
    flops: dict[int, int] = {}
    for s, f in rec.flops:
        flops[s] = flops.get(s, 0) + f
    leftover: dict[int, int] = {}
    scopes: dict[int, list[Op]] = {k: [] for k in range(PROLOGUE, n + 1)}
    core_inputs: dict[int, dict[str, Saved]] = {k: {} for k in range(n)}
    previous: dict[int, Component] = {}
    shared: dict[int, tuple[_Storage, Component]] = {}
    for x in nodes:
        comp = _component(x.path, modules, x.scope, n) or previous.get(x.scope, Component.attention)
        previous[x.scope] = comp
        for st, _ in x.saves:
            if owner[st.key] == PROLOGUE != x.scope:
                shared.setdefault(st.key, (st, comp))
        core = id(x.node) in region
        if core:
            for read in _core_inputs(rec, x, region):
                core_inputs[x.scope].setdefault(read.name, read)
        own = tuple(st.saved() for st, _ in x.saves if owner[st.key] == x.scope)
        f = flops.pop(x.seq, 0)
        if not own:
            leftover[x.scope] = leftover.get(x.scope, 0) + f
            continue
        scopes[x.scope].append(
            Op(
                name=x.kind,
                component=comp,
                saves=own,
                flops=f,
                source=f"traced: autograd {x.kind} in {x.path or '<root>'}",
                attention_core=core,
                grad_bytes=2 * max(s.nbytes for s in own),
            )
        )
    for key in rec.saved:
        if key not in claimed:
            st, scope = rec.storages[key], owner[key]
            comp = _component("", modules, scope, n) or Component.attention
            source = "saved_tensors_hooks: packed, but on no node reachable from the loss"
            scopes[scope].append(Op(UNATTRIBUTED, comp, (st.saved(),), 0, source))
    if shared:
        items = list(shared.values())
        scopes[PROLOGUE].append(
            Op(
                "shared block inputs",
                items[0][1],
                tuple(st.saved() for st, _ in items),
                0,
                "tensors passed to every block (e.g. RoPE cos, sin) and saved by their ops: "
                "counted once",
            )
        )
    for s, f in flops.items():  # ops without a reachable node of their own
        scope = rec.scopes.at(s, PROLOGUE)
        leftover[scope] = leftover.get(scope, 0) + f
    for scope, f in leftover.items():
        if f and scopes[scope]:
            scopes[scope][0] = replace(scopes[scope][0], flops=scopes[scope][0].flops + f)

    graph_blocks = tuple(
        Block(
            tuple(scopes[i]),
            rec.storage(rec.block_inputs[i]).saved(),
            tuple(core_inputs[i].values()),
        )
        for i in range(n)
    )
    extra = tuple(
        rec.storage(t).saved() for key, t in rec.shared_inputs.items() if key not in owner
    )
    return OpGraph(
        tuple(scopes[PROLOGUE]),
        graph_blocks,
        tuple(scopes[n]),
        checkpoint_extra_inputs=extra,
        logits=_logits(logits, nodes, n, batch, seq),
    )


def _component(
    path: str, modules: dict[str, nn.Module], scope: int, blocks: int
) -> Component | None:
    """The component named by the innermost module on ``path`` (its attribute or class name);
    outside the blocks, embedding before and output after them."""
    parts = path.split(".") if path else []
    for depth in range(len(parts), 0, -1):
        name = parts[depth - 1].lower()
        cls = type(modules.get(".".join(parts[:depth]))).__name__.lower()
        if name.isdigit() and 0 <= scope < blocks:
            break  # reached the block itself
        if "norm" in cls or "norm" in name or _LN.search(name):
            return Component.norm
        if "attn" in name or "attention" in name or "attention" in cls:
            return Component.attention
        if "mlp" in cls or any(k in name for k in ("mlp", "ffn", "feed_forward", "expert")):
            return Component.mlp
        if "embed" in name or "embedding" in cls:
            return Component.embedding
        if "head" in name:
            return Component.output
    if scope < 0:
        return Component.embedding
    if scope >= blocks:
        return Component.output
    return None


def _logits(
    logits: torch.Tensor | None, nodes: list[_Node], n: int, batch: int, seq: int
) -> Saved | None:
    """The (B, S, V) logits: the model's output, or -- for a model that returns only its loss --
    the first (B, S, V) tensor of the epilogue, V being the width of its ``log_softmax``."""
    if logits is not None:
        return Saved("logits", logits.numel(), _dtype(logits.dtype))
    epilogue = [x for x in nodes if x.scope >= n]
    vocab = next(
        (x.node._input_metadata[0].shape[-1] for x in epilogue if x.kind == "LogSoftmaxBackward0"),
        None,
    )
    if vocab is None:
        return None
    for x in epilogue:
        for m in x.node._input_metadata:
            if tuple(m.shape) == (batch, seq, vocab):
                return Saved("logits", batch * seq * int(vocab), _dtype(m.dtype))
    return None


# ---------------------------------------------------------------------------------------------
# Tracing


def trace_module(
    build: Callable[[], nn.Module],
    setup: TrainingSetup,
    *,
    name: str,
    vocab_size: int | None = None,
) -> Trace:
    """Build ``build()`` under FakeTensorMode, run one training forward/backward on (B, S) token
    ids, and turn what autograd saved into an ``OpGraph`` (see the module docstring)."""
    start = time.perf_counter()
    batch, seq = setup.batch, setup.seq
    dtype = torch_dtype(setup.activation_dtype)
    with FakeTensorMode(allow_non_fake_inputs=True), gpu_kernels():
        model = build()
        device = _device(model, name)
        cast_floating(model, dtype).train()
        _, blocks = find_blocks(model)
        modules = dict(model.named_modules(remove_duplicate=False))
        paths = {id(m): p for p, m in modules.items()}
        exclude = {_storage_key(t) for t in (*model.parameters(), *model.buffers())}
        rec = _Recorder(exclude, {id(b): i for i, b in enumerate(blocks)}, paths)
        handles = []
        for m in modules.values():
            handles.append(m.register_forward_pre_hook(rec.pre, with_kwargs=True))
            handles.append(m.register_forward_hook(rec.post, with_kwargs=True, always_call=True))
        vocab = vocab_size or _embedding_rows(model) or 2
        ids = torch.randint(0, vocab, (batch, seq), device=device)
        try:
            with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
                with unpacked_sequences(), _OpRecorder(rec):
                    out = _forward(model, ids)
                    loss, logits = _loss_and_logits(out, ids)
            graph = _graph(rec, blocks, modules, loss, logits, batch, seq)
            loss.backward()
        except MemcalcError:
            raise
        except (DataDependentOutputException, DynamicOutputShapeException) as e:
            raise MemcalcError(
                f"{name}: tracing failed: the forward reads tensor values ({e.func}: .item(), "
                "nonzero, or control flow on data), which FakeTensorMode cannot know"
            ) from None
        except Exception as e:  # user code under fake tensors: one line
            raise MemcalcError(f"{name}: tracing failed: {_one_line(e)}") from None
        finally:
            for h in handles:
                h.remove()
        epilogue = {p for p, s in rec.first_scope_of_module.items() if s == len(blocks)}
        counts = param_counts(model, blocks, epilogue)
    unattributed = sum(
        s.nbytes
        for ops in (graph.prologue, graph.epilogue, *(b.ops for b in graph.blocks))
        for op in ops
        if op.name == UNATTRIBUTED
        for s in op.saves
    )
    notes = []
    if unattributed:
        notes.append(f"{unattributed} saved bytes on no node reachable from the loss: kept")
    return Trace(
        name=name,
        graph=graph,
        counts=counts,
        seconds=time.perf_counter() - start,
        tied=counts.head == 0,
        unattributed_bytes=unattributed,
        notes=tuple(notes),
    )


def _device(model: nn.Module, name: str) -> torch.device:
    """Where the model's parameters are (the token ids go there too).

    Real (allocated) parameters would be converted on the fly and counted as activations, and
    fake tensors of a device this torch was not built for abort the process in autograd: both
    are errors.
    """
    tensors = [*model.parameters(), *model.buffers()]
    if any(not isinstance(t, FakeTensor) for t in tensors):
        raise MemcalcError(
            f"{name}: the model's parameters are real, allocated tensors; construct the model "
            "inside the function (trace calls it under FakeTensorMode), not before"
        )
    devices = {t.device for t in tensors}
    for d in devices:
        if d.type == "cuda" and not torch.cuda.is_available():
            raise MemcalcError(
                f"{name}: the model is on {d}, and this torch has no CUDA; build it on the CPU "
                "(the trace allocates nothing)"
            )
    if len(devices) > 1:
        raise MemcalcError(f"{name}: parameters on several devices: {sorted(map(str, devices))}")
    return devices.pop() if devices else torch.device("cpu")


def _embedding_rows(model: nn.Module) -> int | None:
    rows = [m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding)]
    return max(rows) if rows else None


# ---------------------------------------------------------------------------------------------
# Parameters


def param_counts(
    model: nn.Module,
    blocks: list[nn.Module],
    epilogue_modules: set[str] = frozenset(),  # type: ignore[assignment]
) -> ParamCounts:
    """ParamCounts of the module's own tensors (each storage once, so tied weights count once).

    Components: ``nn.Embedding`` weights -> embedding; modules whose class name contains "Norm"
    -> norms; inside the blocks, by module path (mlp when the path says so, else attention);
    outside the blocks, anything else -> head (an untied output projection). ``lm_head_numel``
    is the head's largest tensor, or the largest embedding when there is no head (tied);
    ``final_norm`` counts the norm parameters of ``epilogue_modules`` (first run after the last
    block).
    """
    block_ids = {id(b) for b in blocks}
    block_paths = [p for p, m in model.named_modules() if id(m) in block_ids]
    module_of: dict[int, tuple[str, nn.Module]] = {}
    for path, module in model.named_modules():
        for p in module.parameters(recurse=False):
            module_of.setdefault(id(p), (path, module))
    seen: set[int] = set()
    tensors: list[ParamTensor] = []
    final_norm = head_numel = 0
    for name, p in model.named_parameters():
        key = _storage_key(p)
        if key in seen:
            continue
        seen.add(key)
        path, module = module_of[id(p)]
        inside = any(path == b or path.startswith(b + ".") for b in block_paths)
        if isinstance(module, nn.Embedding):
            comp = "embedding"
        elif "norm" in type(module).__name__.lower():
            comp = "norms"
            final_norm += p.numel() if path in epilogue_modules else 0
        elif inside:
            comp = "mlp" if _component(path, {}, PROLOGUE, 0) is Component.mlp else "attention"
        else:
            comp = "head"
            head_numel = max(head_numel, p.numel())
        tensors.append(ParamTensor(name, tuple(p.shape), comp))
    if not tensors:
        raise MemcalcError(f"{type(model).__name__} has no parameters to train")
    embeddings = [m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding)]
    return ParamCounts.from_tensors(
        tensors,
        num_blocks=max(1, len(blocks)),
        lm_head_numel=head_numel or max(embeddings, default=0),
        final_norm=final_norm,
    )


# ---------------------------------------------------------------------------------------------
# Entry points


def trace_target(target: str, setup: TrainingSetup, impl: Impl = Impl.ours) -> Trace:
    """Trace a preset / spec file (with ``impl``), an HF config.json, or ``module:function``."""
    t = resolve_target(target, setup, impl)
    return trace_module(t.build, setup, name=t.name, vocab_size=t.vocab_size)


def trace_spec(spec: ModelSpec, setup: TrainingSetup, impl: Impl = Impl.ours) -> Trace:
    """Trace a ModelSpec built as memcalc's reference model (``ours``) or HF's (``hf``)."""
    t = _spec_target(spec, setup, impl)
    return trace_module(t.build, setup, name=t.name, vocab_size=t.vocab_size)


def describe(trace: Trace) -> str:
    """One line for stderr: what was found and how long it took."""
    return (
        f"traced {trace.name}: {len(trace.graph.blocks)} blocks, {trace.num_ops} ops "
        f"in {trace.seconds:.2f}s (FakeTensorMode: no memory allocated)"
    )


__all__ = [
    "Target",
    "Trace",
    "describe",
    "find_blocks",
    "param_counts",
    "parse_input_shape",
    "resolve_target",
    "trace_module",
    "trace_spec",
    "trace_target",
]
