"""The allocations and frees of one training step, in order, read from the op graph and the
activation plan: what the caching allocator sees.

One step after ``zero_grad(set_to_none=True)`` (no gradients at its start), as the step
timeline (``timeline.py``) describes it:
- forward: each layer's kept tensors (``Op.saves`` under the plan's choice for the layer:
  everything, all but the attention core, or the checkpoint's input), the loss' logits and
  fp32 copy, freed after the loss (with torch.autocast's cached weight casts of recomputed
  blocks);
- backward: the loss' two b*s*V fp32 gradients, then op by op from the last: the op's weight
  gradients (kept until ``zero_grad``), its activation gradients (``Op.grad_bytes``, one
  tensor, freed after the op), then the saved tensors it saved first; a layer's incoming
  gradient (its input's size) for the whole layer; a checkpoint's recompute rebuilds the
  segment's saved tensors at its first unpack (the attention core under selective recompute);
- the optimizer step's temporaries (one per parameter tensor with foreach, one at a time
  without), then ``zero_grad`` frees every gradient.
Persistent tensors (parameters, fp32 master weights, optimizer states) come before the first
step; the optimizer states are created by the first ``step()`` (torch ``_init_group``), so the
warm-up step allocates them before its temporaries.

The op graph gives one number per op for its activation gradients, so they are one tensor
here; forward tensors an op does not save (outputs consumed at once) are not in the graph and
not here. ``unmodelled`` names the setups whose timeline this does not replay (sharding,
pipelines, offload, accumulation).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from memcalc.frameworks import (
    GradientStore,
    OptimizerImpl,
    ShardingEngine,
    TensorParallel,
    Workspaces,
)
from memcalc.graph.ops import Block, Op, OpGraph, ParamTensor, Saved
from memcalc.params import ParamCounts
from memcalc.spec.parallel import DDP_BUCKET_BYTES
from memcalc.spec.training import DType, Loss, OptimizerKind, TrainingSetup
from memcalc.strategies.recompute import ActivationPlan, Recompute, Segments
from memcalc.strategies.residency.ddp import has_ddp_buckets

ALLOC, FREE = 0, 1

_STATES = {
    OptimizerKind.sgd: 0,
    OptimizerKind.sgd_momentum: 1,
    OptimizerKind.adam: 2,
    OptimizerKind.adamw: 2,
    OptimizerKind.lion: 1,
}
"""Optimizer state tensors per parameter tensor, each the parameter's shape (torch.optim
``_init_group``: exp_avg, exp_avg_sq; momentum_buffer; Lion's exp_avg)."""


@dataclass
class Trace:
    """Events as parallel lists: ``kinds[i]`` ALLOC or FREE of tensor ``ids[i]``,
    ``sizes[i]`` bytes; ``marks`` are (event index, label) where a phase begins."""

    kinds: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    marks: list[tuple[int, str]] = field(default_factory=list)
    _next: int = 0
    _size: dict[int, int] = field(default_factory=dict)

    def alloc(self, nbytes: int) -> int:
        """A new tensor of ``nbytes`` (0: none, as torch allocates nothing); its id."""
        tid = self._next
        self._next += 1
        if nbytes > 0:
            self.kinds.append(ALLOC)
            self.ids.append(tid)
            self.sizes.append(nbytes)
            self._size[tid] = nbytes
        return tid

    def free(self, tid: int) -> None:
        nbytes = self._size.pop(tid, 0)
        if nbytes:
            self.kinds.append(FREE)
            self.ids.append(tid)
            self.sizes.append(nbytes)

    def mark(self, label: str) -> None:
        self.marks.append((len(self.kinds), label))

    def __len__(self) -> int:
        return len(self.kinds)

    def live_peak(self, start: int = 0) -> tuple[int, int]:
        """(most bytes alive at once from event ``start`` on, counting what was alive before,
        the event index where that was first reached)."""
        live = 0
        for i in range(start):
            live += self.sizes[i] if self.kinds[i] == ALLOC else -self.sizes[i]
        best, at = live, start
        for i in range(start, len(self.kinds)):
            live += self.sizes[i] if self.kinds[i] == ALLOC else -self.sizes[i]
            if live > best:
                best, at = live, i
        return best, at

    def label_at(self, index: int) -> str:
        """The phase event ``index`` belongs to."""
        label = ""
        for i, text in self.marks:
            if i > index:
                break
            label = text
        return label


@dataclass(frozen=True)
class StepTrace:
    """The events of a steady-state replay: the persistent tensors, a warm-up step (which
    creates the optimizer states), and the measured step."""

    trace: Trace
    measured_from: int
    """Index of the measured step's first event (``reset_peak_memory_stats`` there)."""


def unmodelled(setup: TrainingSetup, *, offloaded: bool, device: str) -> str | None:
    """Why this setup's step is not replayed (None: it is)."""
    par = setup.parallel
    if device != "cuda":
        return "the allocator replay models a CUDA device"
    if par.dp > 1 and (par.zero > 0 or setup.sharding_engine is not ShardingEngine.torch):
        return "ZeRO / FSDP data parallelism is not in the event model yet (DDP is)"
    if par.dp > 1 and par.tp > 1:
        return "data parallelism beside tensor parallelism is not in the event model yet"
    if par.dp > 1 and par.bucket_view:
        return "DDP's gradient_as_bucket_view is not in the event model yet"
    if par.pp > 1 or par.cp > 1 or par.ep > 1:
        return "pipeline, context and expert parallelism are not in the event model yet"
    if par.tp > 1 and setup.framework_def.tensor_parallel is TensorParallel.dtensor:
        return "DTensor tensor parallelism is not in the event model yet"
    fw = setup.framework_def
    if (
        fw.gradients is not GradientStore.param_grads
        or fw.optimizer is not OptimizerImpl.torch
        or fw.workspaces is not Workspaces.none
    ):
        return (
            f"{fw.label}'s gradient buffer, fused optimizer and library workspaces are not in "
            "the event model yet"
        )
    if offloaded:
        return "offload is not in the event model yet"
    if setup.optimizer not in _STATES:
        return f"{setup.optimizer.value}'s per-tensor state is not in the event model yet"
    return None


# ---------------------------------------------------------------------------------------------
# What each layer keeps, by the plan


def _unique(blk: Block) -> dict[str, Saved]:
    out: dict[str, Saved] = {}
    for op in blk.ops:
        for s in op.saves:
            out.setdefault(s.name, s)
    return out


def _first_saved_ops(ops: Sequence[Op]) -> list[list[str]]:
    """Per op, the storages it saves first (freed after its backward:
    ``Node::release_variables``)."""
    seen: set[str] = set()
    out: list[list[str]] = []
    for op in ops:
        names = [s.name for s in op.saves if s.name not in seen]
        seen.update(names)
        out.append(names)
    return out


@dataclass(frozen=True)
class _Role:
    choice: Recompute
    """none, selective or full (the last layer of a checkpointed segment rebuilds it)."""
    start: int
    last: int
    """The checkpointed segment holding the layer (the layer itself outside Segments)."""


def _role(plan: ActivationPlan, i: int) -> _Role:
    stack = plan.stack
    if isinstance(stack, Segments):
        start = i - i % stack.k
        return _Role(Recompute.full, start, min(start + stack.k, stack.layout.n) - 1)
    return _Role(stack.choice[stack.layout.kind_at(i)], i, i)


def _kept(blk: Block, role: _Role, i: int) -> dict[str, Saved]:
    """Tensors layer ``i`` keeps from its forward to its backward."""
    saves = _unique(blk)
    if role.choice is Recompute.none:
        return saves
    if role.choice is Recompute.selective:
        core = blk.core_only_names
        if not core:
            return saves
        kept = {n: s for n, s in saves.items() if n not in core}
        kept.update({t.name: t for t in blk.core_inputs if t.name not in saves})
        return kept
    kept = {blk.input.name: blk.input} if i == role.start else {}
    # ctx attributes (bitsandbytes' int8 inputs) outlive the checkpoint (Block.attribute_held)
    kept.update({t.name: t for t in blk.attribute_held})
    return kept


def _weight_casts(blk: Block) -> list[Saved]:
    """torch.autocast's cached 16-bit casts of the block's weights."""
    return [s for n, s in _unique(blk).items() if n.endswith("weight_cast")]


MAX_GRAD_PIECES = 16
"""An op's activation gradients are cut into at most this many tensors."""


def grad_pieces(op: Op, nbytes: int) -> list[int]:
    """``nbytes`` of ``op``'s activation gradients as tensors: the op graph gives one number
    (its output's gradient plus its inputs'), and an input's gradient has that input's size,
    which the op saves: so, tensors the size of the largest storage it saves, and the rest as
    one more (a Linear: its input's and its output's gradients exactly; SwiGLU's product:
    three T x m). Without saves, or for more than ``MAX_GRAD_PIECES``, one tensor.

    >>> from memcalc.graph.ops import Component
    >>> x = Saved("x", 4 * 11008, DType.bf16)  # 4 tokens into Llama-2-7B's down_proj
    >>> op = Op("down_proj", Component.mlp, (x,), 0, "", grad_bytes=2 * (4 * 11008 + 4 * 4096))
    >>> grad_pieces(op, op.grad_bytes)
    [88064, 32768]
    """
    unit = max((s.nbytes for s in op.saves), default=0)
    if nbytes <= 0:
        return []
    if unit <= 0 or nbytes // unit > MAX_GRAD_PIECES:
        return [nbytes]
    whole, rest = divmod(nbytes, unit)
    return [unit] * whole + ([rest] if rest else [])


# ---------------------------------------------------------------------------------------------
# Parameters and optimizer state


def param_tensors(graph: OpGraph) -> Iterator[ParamTensor]:
    """Every parameter tensor in forward order (prologue, each layer, epilogue)."""
    for op in graph.prologue:
        yield from op.weights
    for i in range(graph.num_layers):
        for op in graph.block(i).ops:
            yield from op.weights
    for op in graph.epilogue:
        yield from op.weights


def _state_itemsize(w: ParamTensor, setup: TrainingSetup) -> int:
    return w.dtype.itemsize if w.dtype else setup.optimizer_dtype.itemsize


DDP_FIRST_BUCKET_BYTES = 2**20
"""``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``: DDP's first bucket closes at 1 MiB."""


def ddp_buckets(graph: OpGraph, g: int) -> list[int]:
    """Bytes of each DistributedDataParallel gradient bucket (``Reducer``'s
    ``bucket.gradients``, one flat tensor per bucket, ``torch/csrc/distributed/c10d/
    reducer.cpp`` ``initialize_buckets``) as rebuilt after the first iteration
    (``rebuild_buckets``): the trainable parameters in the order their gradients become
    ready -- backward, the reverse of forward -- cut by ``compute_bucket_assignment_by_size``
    (a bucket closes once its size reaches the limit: 1 MiB for the first, ``bucket_cap_mb``
    = 25 MiB after). One dtype, so one bucket stream; they sum to every gradient.

    >>> from memcalc.spec.presets import preset
    >>> from memcalc.graph.lower import lower
    >>> g = lower(preset("gpt2"), TrainingSetup(precision="fp32", batch=1, seq=128))
    >>> sizes = ddp_buckets(g, 4)
    >>> sum(sizes) == 4 * 124439808, sizes[0] < 25 * 2**20
    (True, True)
    """
    sizes: list[int] = []
    size, limit = 0, DDP_FIRST_BUCKET_BYTES
    for w in reversed(list(param_tensors(graph))):
        if not w.trainable:
            continue
        size += w.grad_bytes(g)
        if size >= limit:
            sizes.append(size)
            size, limit = 0, DDP_BUCKET_BYTES
    if size:
        sizes.append(size)
    return sizes


def persistent(tr: Trace, graph: OpGraph, setup: TrainingSetup) -> None:
    """Parameters as the model is built, DDP's gradient buckets as it wraps them (data
    parallel without ZeRO; NCCL's all-reduce runs in place on them and its own buffers are
    outside the caching allocator), then the fp32 master copies a -mixed recipe makes when
    its optimizer is built."""
    tr.mark("parameters")
    itemsize = setup.weight_dtype.itemsize
    for w in param_tensors(graph):
        tr.alloc(w.storage_bytes(itemsize))
    if has_ddp_buckets(setup, setup.parallel.zero):
        tr.mark("DDP buckets")
        for nbytes in ddp_buckets(graph, setup.gradient_dtype.itemsize):
            tr.alloc(nbytes)
    if setup.precision.is_mixed:
        for w in param_tensors(graph):
            if w.trainable and w.dtype is None:
                tr.alloc(4 * w.numel)


def optimizer_state(tr: Trace, graph: OpGraph, setup: TrainingSetup) -> None:
    """torch.optim ``_init_group`` at the first ``step()``: per parameter, in order, its state
    tensors (``zeros_like``); the ``step`` scalars live on the device only for fused Adam."""
    states = _STATES[setup.optimizer]
    step_on_device = setup.optimizer_fused and setup.optimizer in (
        OptimizerKind.adam,
        OptimizerKind.adamw,
    )
    for w in param_tensors(graph):
        if not w.trainable:
            continue
        if step_on_device:
            tr.alloc(4)
        for _ in range(states):
            tr.alloc(w.numel * _state_itemsize(w, setup))


def optimizer_temporaries(tr: Trace, graph: OpGraph, setup: TrainingSetup) -> None:
    """Adam/AdamW ``step()``: ``_multi_tensor_adam`` (foreach) makes ``exp_avg_sq.sqrt()`` of
    every parameter at once (``torch._foreach_sqrt``); the per-tensor loop one at a time; a
    fused step none (``optimizer.py`` ``_step_temporaries``)."""
    if setup.optimizer not in (OptimizerKind.adam, OptimizerKind.adamw) or setup.optimizer_fused:
        return
    trained = [w for w in param_tensors(graph) if w.trainable]
    if setup.optimizer_foreach:
        temps = [tr.alloc(w.numel * _state_itemsize(w, setup)) for w in trained]
        for tid in temps:
            tr.free(tid)
        return
    for w in trained:
        tr.free(tr.alloc(w.numel * setup.optimizer_dtype.itemsize))


# ---------------------------------------------------------------------------------------------
# One step


REPLAYED_MICROBATCHES = 3
"""Micro-batches replayed per step: every one after the first makes the same events from the
same live tensors (all gradients there), so the third stands for the rest (the allocator's
blocks after it are those after any later one: ``tests/test_accumulation.py`` checks the
reserved peak is the same replaying 3 and 8); ``--microbatches 1000`` replays in
milliseconds."""


@dataclass
class _Step:
    """Builds one step's events into ``tr``; ``live`` maps (scope, storage name) to the id of
    a tensor kept for backward."""

    graph: OpGraph
    plan: ActivationPlan
    setup: TrainingSetup
    counts: ParamCounts
    tr: Trace
    live: dict[tuple[object, str], int] = field(default_factory=dict)
    grads: list[int] = field(default_factory=list)
    """Gradients alive (zero_grad frees them)."""
    tied_buffer: int | None = None
    """A tied LM head's gradient, held in the embedding's autograd input buffer."""
    accumulating: bool = False
    """A later micro-batch: every ``.grad`` exists, so each new weight gradient is a temporary
    that AccumulateGrad adds in place and drops (``torch/csrc/autograd/functions/
    accumulate_grad.h`` ``accumulateGrad``: ``variable_grad += new_grad`` when the gradient
    is defined and grad mode is off)."""
    temporaries: list[int] = field(default_factory=list)
    """New weight gradients of the op at hand under accumulation, dropped after it."""

    @property
    def g(self) -> int:
        return self.setup.gradient_dtype.itemsize

    @property
    def tied(self) -> bool:
        """The LM head shares the trained embedding's weight (``timeline.py``'s rule)."""
        trains = any(w.trainable for op in self.graph.prologue for w in op.weights)
        return self.counts.head == 0 and trains

    @property
    def has_loss(self) -> bool:
        return self.setup.loss is Loss.standard and self.graph.logits is not None

    def keep(self, scope: object, s: Saved) -> None:
        if (scope, s.name) not in self.live:
            self.live[(scope, s.name)] = self.tr.alloc(s.nbytes)

    def drop(self, scope: object, name: str) -> None:
        tid = self.live.pop((scope, name), None)
        if tid is not None:
            self.tr.free(tid)

    # -- forward ---------------------------------------------------------------------------

    def forward(self) -> None:
        tr, graph = self.tr, self.graph
        tr.mark("forward")
        for op in graph.prologue:
            for s in op.saves:
                self.keep("pro", s)
        if self.plan.stack.extra:
            for s in graph.checkpoint_extra_inputs:
                self.keep("extra", s)
        cache: list[int] = []  # torch.autocast's weight casts of recomputed layers
        for i in range(graph.num_layers):
            blk, role = graph.block(i), _role(self.plan, i)
            for s in _kept(blk, role, i).values():
                self.keep(i, s)
            if role.choice is Recompute.full:
                cache += [tr.alloc(s.nbytes) for s in _weight_casts(blk)]
        tr.mark("forward: head and loss")
        transient: list[int] = []
        for op in graph.epilogue:
            if self.has_loss and not transient and op.name.startswith("loss."):
                logits = graph.logits
                assert logits is not None
                transient.append(tr.alloc(logits.nbytes))
                if self.setup.activation_dtype is not DType.fp32:
                    transient.append(tr.alloc(logits.numel * 4))  # logits.float()
            for s in op.saves:
                self.keep("epi", s)
        # the fp32 copy goes with the loss, the logits after it (HF Trainer), the autocast
        # cache when the autocast region ends
        for tid in (*reversed(transient), *cache):
            tr.free(tid)

    # -- backward --------------------------------------------------------------------------

    def new_grad(self, nbytes: int) -> None:
        """A weight gradient the backward writes: the first micro-batch's becomes ``.grad``
        (AccumulateGrad steals it), a later one's is added in place and dropped after the op
        (``accumulating``)."""
        tid = self.tr.alloc(nbytes)
        (self.temporaries if self.accumulating else self.grads).append(tid)

    def drop_temporaries(self) -> None:
        for tid in self.temporaries:
            self.tr.free(tid)
        self.temporaries.clear()

    def weight_grads_of(self, op: Op, skip: ParamTensor | None = None) -> None:
        """The gradients ``op``'s backward writes for its trainable weights (AccumulateGrad:
        the first write allocates ``.grad``)."""
        for w in op.weights:
            if w.trainable and w is not skip:
                self.new_grad(w.grad_bytes(self.g))

    def op_backward(self, op: Op, scope: object, first: list[str], rf: bool) -> None:
        """One op: its weight gradients, its activation gradients (freed after it), then the
        storages it saved first."""
        self.weight_grads_of(op)
        grad = op.grad_bytes - (op.recompute_freed if rf else 0)
        pieces = [self.tr.alloc(n) for n in grad_pieces(op, grad)]
        for tid in pieces:
            self.tr.free(tid)
        self.drop_temporaries()
        for name in first:
            self.drop(scope, name)

    def loss_backward(self) -> int | None:
        """nll_loss_backward's and _log_softmax_backward_data's b*s*V fp32 gradients alive
        together; then the loss' saved tensors go, and ``logits.float()``'s backward casts
        the gradient to the logits' dtype (the same tensor in fp32). Returns the logits'
        gradient, which the head's backward consumes."""
        tr, graph = self.tr, self.graph
        tr.mark("backward: loss")
        grads = []
        if self.has_loss:
            numel = graph.logits.numel  # type: ignore[union-attr]
            grads = [tr.alloc(numel * 4), tr.alloc(numel * 4)]
        for op in graph.epilogue:
            if op.name.startswith("loss."):
                for s in op.saves:
                    self.drop("epi", s.name)
        if not grads:
            return None
        tr.free(grads[0])
        if self.setup.activation_dtype is DType.fp32:
            return grads[1]
        logits_grad = tr.alloc(graph.logits.nbytes)  # type: ignore[union-attr]
        tr.free(grads[1])
        return logits_grad

    def head_backward(self, logits_grad: int | None) -> None:
        """The ops after the blocks, from the last: a tied head's gradient goes to the
        embedding's input buffer (``timeline.py``: three V x h tensors at the embedding). The
        head's activation gradients (``Op.grad_bytes``) are its output's -- the logits'
        gradient, already made by the loss' backward, freed after the head -- and its
        input's; under a fused linear cross-entropy there are no logits, so only the input's.
        The timeline lists no moment here (it is below the loss' or the last layer's in every
        case of ``tests/test_allocator_events.py`` but a fused loss)."""
        ops = [op for op in self.graph.epilogue if not op.name.startswith("loss.")]
        first = _first_saved_ops(ops)
        head = max((j for j, op in enumerate(ops) if not op.name.startswith("logits.")), default=-1)
        self.tr.mark("backward: head")
        logits = self.graph.logits.nbytes if self.graph.logits is not None else 0
        for j in range(len(ops) - 1, -1, -1):
            op = ops[j]
            if j == head:
                if self.tied:
                    self.tied_buffer = self.tr.alloc(self.counts.lm_head_numel * self.g)
                if logits_grad is not None or self.setup.loss is Loss.fused:
                    op = replace(op, grad_bytes=max(0, op.grad_bytes - logits))
            self.op_backward(op, "epi", first[j], rf=False)
            if j == head and logits_grad is not None:
                self.tr.free(logits_grad)
                logits_grad = None
        if logits_grad is not None:
            self.tr.free(logits_grad)

    def rebuild(self, role: _Role) -> None:
        """A checkpoint's recompute, at its segment's first unpack: every layer of the
        segment saves again what it saved in forward (the segment's input is still kept)."""
        self.tr.mark(f"backward: recompute layers {role.start}-{role.last}")
        for j in range(role.start, role.last + 1):
            for s in _unique(self.graph.block(j)).values():
                self.keep(j, s)

    def layer_backward(self, i: int, blk: Block, role: _Role) -> None:
        """Layer ``i``'s ops from the last, with its incoming gradient (its input's size)
        alive throughout. Selective recompute rebuilds the attention core before the core's
        last op, with a second copy of ``repeat_kv``'s k (``timeline.py`` ``_coarse``); the
        checkpoint's own inputs go when the core is done."""
        tr = self.tr
        tr.mark(f"backward: layer {i}")
        incoming = tr.alloc(blk.input.nbytes)
        first = _first_saved_ops(blk.ops)
        core = [j for j, op in enumerate(blk.ops) if op.attention_core]
        selective = role.choice is Recompute.selective and bool(core) and bool(blk.core_only_names)
        full = role.choice is Recompute.full and i == role.last
        saves = _unique(blk)
        copy = None
        for j in range(len(blk.ops) - 1, -1, -1):
            if selective and j == core[-1]:
                # in forward order (a set's order would change with the process's hash seed)
                for name, t in saves.items():
                    if name in blk.core_only_names:
                        self.keep(i, t)
                copy = tr.alloc(
                    sum(
                        s.nbytes
                        for s in blk.ops[core[0]].saves
                        if s.name in blk.core_only_names and s.name.endswith("k_repeated")
                    )
                )
            self.op_backward(blk.ops[j], i, first[j], rf=full)
            if selective and j == core[0]:
                tr.free(copy)  # type: ignore[arg-type]
                for t in blk.core_inputs:
                    if t.name not in saves:
                        self.drop(i, t.name)
        tr.free(incoming)

    def blocks_backward(self) -> None:
        graph, plan = self.graph, self.plan
        spans = _span_tensors(graph, plan)
        for i in range(graph.num_layers - 1, -1, -1):
            blk, role = graph.block(i), _role(plan, i)
            reach = role.last if isinstance(plan.stack, Segments) else i
            for first_layer, keys in list(spans.items()):
                if reach < first_layer:
                    for key in keys:
                        self.drop(*key)
                    del spans[first_layer]
            if role.choice is Recompute.full and i == role.last:
                self.rebuild(role)
            self.layer_backward(i, blk, role)
            if role.choice is Recompute.full and i == role.start:
                self.drop(i, blk.input.name)  # the checkpoint's input, unless an op freed it
        for s in graph.checkpoint_extra_inputs:
            self.drop("extra", s.name)

    def embedding_backward(self) -> None:
        """The prologue's ops from the last; its saved tensors are held until the embedding's
        backward is done (``timeline.py``'s last moment). A tied weight's two gradients are
        summed into a third (``timeline.py``: three V x h tensors)."""
        tr, ops = self.tr, self.graph.prologue
        tr.mark("backward: embedding")
        for j in range(len(ops) - 1, -1, -1):
            op = ops[j]
            shared = [w for w in op.weights if w.trainable and w.numel == self.counts.lm_head_numel]
            if self.tied_buffer is not None and shared:
                own = tr.alloc(shared[0].grad_bytes(self.g))
                self.new_grad(shared[0].grad_bytes(self.g))  # the sum
                tr.free(self.tied_buffer)
                tr.free(own)
                self.tied_buffer = None
                self.weight_grads_of(op, skip=shared[0])
                tr.free(tr.alloc(op.grad_bytes))
                self.drop_temporaries()
            else:
                self.op_backward(op, "pro", [], rf=False)
        for key in [k for k in self.live if k[0] == "pro"]:
            self.drop(*key)

    def run(self, first_step: bool) -> None:
        """One optimizer step: each micro-batch's forward and backward (later ones
        ``accumulating``), then the optimizer step and ``zero_grad``."""
        k = self.setup.parallel.microbatches
        shown = min(k, REPLAYED_MICROBATCHES)
        for m in range(shown):
            self.accumulating = m > 0
            if k > 1:
                self.tr.mark(
                    f"micro-batch {m + 1} of {k}" if m + 1 < shown else f"micro-batches {m + 1}-{k}"
                )
            self.forward()
            self.head_backward(self.loss_backward())
            self.blocks_backward()
            self.embedding_backward()
            assert not self.live, f"left alive after backward: {sorted(map(str, self.live))[:5]}"
        self.tr.mark("optimizer step")
        if first_step:
            optimizer_state(self.tr, self.graph, self.setup)
        optimizer_temporaries(self.tr, self.graph, self.setup)
        self.tr.mark("zero_grad")
        for tid in self.grads:
            self.tr.free(tid)
        self.grads.clear()


def _span_tensors(graph: OpGraph, plan: ActivationPlan) -> dict[int, list[tuple[object, str]]]:
    """``OpGraph.span_inputs`` as the kept tensors they are, by the lowest layer that reads
    them (``timeline.py`` ``span_inputs_freed``): a span's mask is a checkpoint's extra input
    (only kept under a checkpoint), its rotary pair the prologue's ``rope.cos.k`` /
    ``rope.sin.k`` (the pairs are of one size, so which pair stands for which span does not
    change a byte)."""
    out: dict[int, list[tuple[object, str]]] = {}
    masks = [
        s.name
        for s in graph.checkpoint_extra_inputs
        if s.name.endswith(("_sliding_mask", "_causal_mask"))
    ]
    pair = 0
    for span in graph.span_inputs:
        first = min(graph.layout.index_of_occurrence(k, 0) for k in span.kinds)
        if span.checkpointed:
            name = masks.pop(0)
            if plan.stack.extra:
                out.setdefault(first, []).append(("extra", name))
        else:
            out.setdefault(first, []).extend(
                [("pro", f"rope.cos.{pair}"), ("pro", f"rope.sin.{pair}")]
            )
            pair += 1
    return out


def step_trace(
    graph: OpGraph, plan: ActivationPlan, setup: TrainingSetup, counts: ParamCounts
) -> StepTrace:
    """The persistent tensors, a warm-up step and the measured step of ``memcalc measure``'s
    protocol (``measure/runner.py``: step 1 creates the optimizer state, step 2 is measured).

    GPT-2 small in fp32: its parameters are its 124,439,808 elements (tied embedding once).

    >>> from memcalc.spec.presets import preset
    >>> from memcalc.graph.lower import lower
    >>> from memcalc.params import graph_param_counts
    >>> from memcalc.strategies.recompute import keep_all
    >>> setup = TrainingSetup(precision="fp32", batch=1, seq=128)
    >>> g = lower(preset("gpt2"), setup)
    >>> st = step_trace(g, keep_all(g), setup, graph_param_counts(g, lm_head_numel=50257 * 768))
    >>> st.trace.live_peak(0)[0] >= 4 * 124439808 * 4  # weights, grads, two Adam states
    True
    """
    tr = Trace()
    persistent(tr, graph, setup)
    _Step(graph, plan, setup, counts, tr).run(first_step=True)
    measured_from = len(tr)
    tr.mark("measured step")
    _Step(graph, plan, setup, counts, tr).run(first_step=False)
    return StepTrace(tr, measured_from)
