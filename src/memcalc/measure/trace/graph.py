"""From the autograd graph of the loss to memcalc ops, blocks and the OpGraph."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from memcalc.errors import MemcalcError
from memcalc.graph.ops import Block, Component, Op, OpGraph, ParamTensor, Saved
from memcalc.measure.trace.capture import Recorder, StorageRecord, memcalc_dtype, storage_key
from memcalc.measure.trace.common import FC_NAME, LN_NAME, PROLOGUE

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


@dataclass(frozen=True)
class Built:
    """The traced graph, and what it leaves out."""

    graph: OpGraph
    dead_branch_bytes: int
    """Bytes saved only by autograd nodes with no path to the loss (see ``build_graph``)."""


@dataclass
class _Node:
    node: Any
    seq: int
    scope: int
    path: str
    saves: list[tuple[StorageRecord, torch.Tensor]]
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


def _nodes(rec: Recorder, loss: torch.Tensor) -> list[_Node]:
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
        saves: list[tuple[StorageRecord, torch.Tensor]] = []
        for t in _saved_tensors(node) + rec.extra_saves.get(s, []):
            st = rec.storages.get(storage_key(t))
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


def _core_region(
    nodes: list[_Node],
    n: int,
    boundary: frozenset[int] = frozenset(),
    fused: list[tuple[int, int]] | None = None,
) -> set[int]:
    """ids of the nodes a checkpoint around each block's attention core would replay.

    The attention matmuls are the matmuls of two activations (every other matmul of a block
    has a weight operand): QK^T and AV. The core is both of them and every node on a path
    between them (scale, mask add, softmax, casts, dropout), plus the data-movement nodes that
    feed only the core (repeat_kv's expand + copy of k and v, matmul's reshape of q). A fused
    kernel (SDPA, flash) has no such matmuls: nothing to drop, as in lower.py -- nor has SDPA
    when the CPU runs it as a math composite of matmuls (MLA's q/k and v head dims differ): the
    nodes an SDPA call made (``fused``: sequence-number spans) are never a core, as selective
    recompute (``measure``) never checkpoints SDPA. ``boundary``: ids of the nodes that made
    the q, k and v an HF attention function was called with (``Recorder.attention_inputs``);
    the core starts at that call, so a cast made before it (OLMo 2's ``q_embed.to(q_type)``)
    stays outside even though only the core reads it.
    """
    spans = fused or []
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
            and not any(a <= x.seq < b for a, b in spans)
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
                x.kind in MOVEMENT
                and id(x.node) not in boundary
                and used_by
                and all(c in core for c in used_by)
            ):
                core.add(id(x.node))
        region |= {i for i in core if i in by_id}
    return region


def _core_inputs(rec: Recorder, x: _Node, region: set[int]) -> list[Saved]:
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
            out.append(Saved(f"core_input.{p._sequence_nr()}.{nr}", numel, memcalc_dtype(dtype)))
    return out


def build_graph(
    rec: Recorder,
    blocks: list[nn.Module],
    modules: dict[str, nn.Module],
    loss: torch.Tensor,
    logits: torch.Tensor | None,
    batch: int,
    seq: int,
    fused: list[tuple[int, int]] | None = None,
    params: dict[int, ParamTensor] | None = None,
) -> Built:
    """The OpGraph of the recorded forward; ``params``: the parameter tensors by storage key,
    placed on the ops that read them (``_place_weights``).

    A storage saved only by nodes from which the loss cannot be reached (a dead branch: the
    values of DeepSeek-V3's group-limited top-k, of the aux loss's top-k) is left out: backward
    never runs those nodes, and they die -- with what they saved -- as soon as the forward drops
    its references to their outputs, which for the values of a top-k whose indices alone are
    used is when the function returns. Their bytes are reported (``dead_branch_bytes``), not
    counted; a tensor of such a branch that the model keeps past the forward would be missed.
    """
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
    dead = sum(rec.storages[key].nbytes for key in rec.saved if key not in owner)

    region = _core_region(nodes, n, frozenset(id(node) for node in rec.attention_inputs), fused)
    flops: dict[int, int] = {}
    for s, f in rec.flops:
        flops[s] = flops.get(s, 0) + f
    leftover: dict[int, int] = {}
    scopes: dict[int, list[Op]] = {k: [] for k in range(PROLOGUE, n + 1)}
    op_seqs: dict[int, list[int]] = {k: [] for k in range(PROLOGUE, n + 1)}
    core_inputs: dict[int, dict[str, Saved]] = {k: {} for k in range(n)}
    previous: dict[int, Component] = {}
    shared: dict[int, tuple[StorageRecord, Component]] = {}
    for x in nodes:
        comp = component_of(x.path, modules, x.scope, n) or previous.get(
            x.scope, Component.attention
        )
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
        op_seqs[x.scope].append(x.seq)
    _place_weights(scopes, op_seqs, _param_readers(nodes), params or {})
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

    graph_blocks = [
        Block(
            tuple(scopes[i]),
            rec.storage(rec.block_inputs[i]).saved(),
            tuple(core_inputs[i].values()),
            sum(p.numel() for p in blocks[i].parameters()),
        )
        for i in range(n)
    ]
    extra = tuple(
        rec.storage(t).saved() for key, t in rec.shared_inputs.items() if key not in owner
    )
    graph = OpGraph.from_layers(
        tuple(scopes[PROLOGUE]),
        graph_blocks,
        tuple(scopes[n]),
        checkpoint_extra_inputs=extra,
        logits=_logits(logits, nodes, n, batch, seq),
    )
    return Built(graph, dead)


def _params_read(node: Any) -> set[int]:
    """Storage keys of the parameters ``node`` reads, directly or through views and casts
    (``weight.t()``, autocast's copy of the weight): their ``AccumulateGrad`` nodes."""
    out: set[int] = set()
    for p, _ in node.next_functions:
        while p is not None and (type(p).__name__ in MOVEMENT or type(p).__name__ == "TBackward0"):
            p = p.next_functions[0][0] if p.next_functions else None
        if p is not None and type(p).__name__ == "AccumulateGrad":
            out.add(storage_key(p.variable))
    return out


def _param_readers(nodes: list[_Node]) -> dict[int, list[_Node]]:
    """Storage key of each trained parameter -> the nodes that read it, in forward order (views
    and casts are not readers: the node they feed is)."""
    readers: dict[int, list[_Node]] = {}
    for x in nodes:
        if x.kind in MOVEMENT or x.kind == "TBackward0":
            continue
        for key in _params_read(x.node):
            readers.setdefault(key, []).append(x)
    return readers


def _op_at(op_seqs: list[int], seq: int) -> int:
    """Index of the op whose backward runs first after that of the node ``seq`` (the last op
    made at or before it; the scope's first op when none is)."""
    i = bisect.bisect_right(op_seqs, seq) - 1
    return max(i, 0)


def _place_weights(
    scopes: dict[int, list[Op]],
    op_seqs: dict[int, list[int]],
    readers: dict[int, list[_Node]],
    params: dict[int, ParamTensor],
) -> None:
    """Give ops the weight gradients their backward writes (``Op.params``) and the parameter
    tensors they own (``Op.weights``).

    A parameter's gradient is allocated when the backward of its last reader in forward order
    -- the first to run in backward -- hands ``AccumulateGrad`` its gradient
    (``torch/csrc/autograd/functions/accumulate_grad.h`` ``accumulateGrad``: the first
    gradient becomes ``variable.grad``, later ones -- another reader, a later micro-batch --
    are added in place) and lives until the optimizer step / ``zero_grad``. A tied head's
    weight is owned by its first reader (the embedding) and written by the head, as the
    lowering places it (``graph/blocks/embedding.py``, ``linear.py``): the timeline adds the
    head's gradient for a tied weight. A reader that saves nothing has no op: the op whose
    backward runs next in its scope takes it. Frozen parameters have no ``AccumulateGrad``
    node, hence no readers here. Prologue ops (the embeddings) own their weights but write no
    ``params``, as lowered (``graph/blocks/embedding.py``): the timeline's embedding moment
    counts every gradient as written (``Timeline.embedding_moments``,
    ``gradients.at_embedding``); with them the peak of a 4-layer llama, bf16-mixed,
    optimizer=cpu, moved 2.4% off the lowering's (``test_traced_peak_equals_the_lowered_peak``)."""
    written: dict[tuple[int, int], int] = {}
    owned: dict[tuple[int, int], list[ParamTensor]] = {}
    for key, xs in readers.items():
        tensor = params.get(key)
        first, last = xs[0], xs[-1]
        if tensor is None or not scopes[first.scope] or not scopes[last.scope]:
            continue
        if last.scope != PROLOGUE:
            w = (last.scope, _op_at(op_seqs[last.scope], last.seq))
            written[w] = written.get(w, 0) + tensor.numel
        o = (first.scope, _op_at(op_seqs[first.scope], first.seq))
        owned.setdefault(o, []).append(tensor)
    for (scope, i), numel in written.items():
        scopes[scope][i] = replace(scopes[scope][i], params=scopes[scope][i].params + numel)
    for (scope, i), tensors in owned.items():
        op = scopes[scope][i]
        scopes[scope][i] = replace(op, weights=op.weights + tuple(tensors))


def component_of(
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
        if "norm" in cls or "norm" in name or LN_NAME.search(name):
            return Component.norm
        if "attn" in name or "attention" in name or "attention" in cls:
            return Component.attention
        if (
            "mlp" in cls
            or any(k in name for k in ("mlp", "ffn", "feed_forward", "expert"))
            or FC_NAME.match(name)
        ):
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
        return Saved("logits", logits.numel(), memcalc_dtype(logits.dtype))
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
                return Saved("logits", batch * seq * int(vocab), memcalc_dtype(m.dtype))
    return None
