"""Op graph types: ops with the storages they save for backward and their forward FLOPs.

A storage is identified by its name inside one scope (the prologue, one block, the epilogue):
two ops that save views of the same buffer (q and k of a fused qkv projection) name the same
storage, and it is counted once -- as autograd's saved tensors share one untyped storage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property

from memcalc.graph.layout import LayerLayout
from memcalc.spec.training import DType


class Component(str, Enum):
    """Where an op sits in the model, for the per-component breakdown."""

    embedding = "embedding"
    attention = "attention"
    mlp = "mlp"
    norm = "norm"
    output = "output"
    """Final projection to the vocabulary and the loss."""
    checkpoint = "checkpoint"
    """What recompute checkpoints keep: block inputs (and inputs shared by all blocks)."""


@dataclass(frozen=True)
class Saved:
    """One storage kept for backward: ``numel`` elements of ``dtype``."""

    name: str
    numel: int
    dtype: DType
    view_numel: int | None = None
    """Elements of the tensor an op sees when it is a broadcast view of this storage (an
    expanded k in MQA); a cast of the view materialises that many."""
    needs_grad: bool = field(default=True, compare=False)
    """The tensor requires grad (False before the first trainable op of a frozen base): ops
    save for its gradient only when it does."""

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor: its name, shape and the component it belongs to."""

    name: str
    shape: tuple[int, ...]
    component: str
    """One of memcalc.params.COMPONENTS: embedding, attention, mlp, norms, head."""
    trainable: bool = True
    """It has a gradient and optimizer state (False: a frozen base weight)."""
    dtype: DType | None = None
    """Its storage dtype when not the recipe's weight dtype (fp32 LoRA adapters, parameters
    upcast by PEFT's k-bit preparation)."""
    quant: str | None = None
    """Quantized storage (a ``Quantize`` value) of a frozen base linear weight."""
    active_numel: int | None = None
    """Elements one token uses when fewer than all (routed experts' weights: top_k of the E
    experts stacked along dim 0); None: all of them."""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def storage_bytes(self, weight_itemsize: int) -> int:
        """Bytes of the tensor on the device."""
        if self.quant is not None:
            from memcalc.spec.finetune import Quantize

            return Quantize(self.quant).storage_bytes(self.numel, self.shape[0])
        return self.numel * (self.dtype.itemsize if self.dtype else weight_itemsize)

    def grad_bytes(self, grad_itemsize: int) -> int:
        """Bytes of its gradient (its own dtype when that is fixed, e.g. fp32 adapters)."""
        if not self.trainable:
            return 0
        return self.numel * (self.dtype.itemsize if self.dtype else grad_itemsize)

    @property
    def active(self) -> int:
        return self.numel if self.active_numel is None else self.active_numel


@dataclass(frozen=True)
class Gemm:
    """The matrix multiply an op runs, as a kernel sees it: ``groups`` independent products of
    an (m x k) input with a (k x n) operand (a batched or grouped GEMM when ``groups`` > 1),
    inputs in ``dtype``. Its backward runs the input-gradient product (m x n) @ (n x k) when
    the input needs a gradient and the weight-gradient product (k x m) @ (m x n) when the
    second operand is trained -- the shapes the step-time model rates (``steptime/gemm.py``).

    >>> Gemm(8192, 4096, 1024, DType.bf16).flops
    68719476736
    """

    m: int
    k: int
    n: int
    dtype: DType
    groups: int = 1
    input_grad: bool = True
    weight_grad: bool = True

    @property
    def flops(self) -> int:
        """2 m k n per product (one multiply and one add per term)."""
        return 2 * self.groups * self.m * self.k * self.n


@dataclass(frozen=True)
class AttentionWork:
    """The problem a fused attention kernel (flash / cuDNN / memory-efficient) solves:
    ``heads`` (batch x query heads) of ``q_len`` queries against ``kv_len`` keys, with q/k of
    ``qk_dim`` and v of ``v_dim`` features; ``causal`` (a decoder's mask: the kernel skips the
    key blocks wholly above the diagonal) and ``window`` (sliding-window attention: keys older
    than the window are skipped too). As lowered, for this rank's queries and keys (under
    context parallelism the step-time model lets the queries meet every rank's keys)."""

    heads: int
    q_len: int
    kv_len: int
    qk_dim: int
    v_dim: int
    dtype: DType
    causal: bool = True
    window: int | None = None

    @property
    def dense_flops(self) -> int:
        """Forward FLOPs of the full (unmasked) score and value products."""
        return 2 * self.heads * self.q_len * self.kv_len * (self.qk_dim + self.v_dim)


@dataclass(frozen=True)
class Op:
    """One forward op: what it saves for backward, and its forward FLOPs."""

    name: str
    component: Component
    saves: tuple[Saved, ...]
    flops: int
    source: str
    """The torch op (or paper) whose saved tensors this mirrors."""
    attention_core: bool = False
    """Part of the attention core (QK^T, softmax, dropout, AV) that selective recompute
    (Korthikanti et al. 2022, sec. 5) drops and replays."""
    grad_bytes: int = 0
    """Activation gradients alive while this op's backward runs: the gradient of its output
    and the gradients it writes for its inputs (weight gradients are counted as gradients)."""
    params: int = 0
    """Elements of the parameters whose gradients this op's backward writes."""
    weights: tuple[ParamTensor, ...] = ()
    """The parameter tensors this op owns (named inside its scope)."""
    recompute_freed: int = 0
    """Bytes of ``grad_bytes`` already freed when its block was rebuilt by a checkpoint's
    recompute (the backward of the ops after it ran before the recompute)."""
    work: Gemm | AttentionWork | None = None
    """The matmul or fused attention kernel this op runs (None: an elementwise / reduction op,
    bound by memory traffic) -- what the step-time model rates."""
    kernel: str = ""
    """The aten kernel this op is, where a save-list policy tells kernels apart (a
    ``memcalc.frameworks.features.Kernel`` value: mm, sdpa, ...; "" for the others)."""
    outputs: tuple[Saved, ...] = ()
    """What the op returns, where a policy keeps op outputs (op-level selective
    checkpointing caches them); empty for ops no such policy saves."""
    forward_scratch: int = 0
    """Bytes alive only while the op's forward runs, beyond what it saves (context
    parallelism's ring buffers: ``graph/blocks/ring_attention.py``)."""
    backward_scratch: int = 0
    """Bytes alive only while its backward runs, beyond ``grad_bytes``."""


def unique_saved(ops: tuple[Op, ...] | list[Op]) -> dict[str, Saved]:
    """Storages saved by ``ops``, each once (first saver wins), by name."""
    out: dict[str, Saved] = {}
    for op in ops:
        for saved in op.saves:
            out.setdefault(saved.name, saved)
    return out


def bytes_by_component(
    ops: tuple[Op, ...] | list[Op], exclude: frozenset[str] = frozenset()
) -> dict[Component, int]:
    """Bytes of the unique storages saved by ``ops`` (minus ``exclude``), by component."""
    out: dict[Component, int] = {}
    seen: set[str] = set(exclude)
    for op in ops:
        for s in op.saves:
            if s.name not in seen:
                seen.add(s.name)
                out[op.component] = out.get(op.component, 0) + s.nbytes
    return out


def saved_bytes(ops: tuple[Op, ...] | list[Op]) -> int:
    """Bytes of the unique storages saved by ``ops``."""
    return sum(s.nbytes for s in unique_saved(ops).values())


@dataclass(frozen=True)
class Block:
    """One decoder block: its ops in forward order and its input (the residual stream)."""

    ops: tuple[Op, ...]
    input: Saved
    """The block input, which a checkpoint keeps when the block is recomputed."""
    core_inputs: tuple[Saved, ...] = ()
    """What the attention core reads (q, k, v before any GQA expansion): a checkpoint around
    the core keeps them, and selective recompute replays the core from them."""
    param_numel: int = 0
    """Elements of the block's parameters (its gradients appear during its backward)."""
    discarded: tuple[str, ...] = ()
    """Storages an output-discarding checkpoint frees although an op outside the replayed part
    saved them (Megatron ``CheckpointWithoutOutput``: the module's output, rebuilt in
    backward): selective recompute drops them too."""

    attribute_held: tuple[Saved, ...] = ()
    """Storages autograd Functions keep as ctx attributes (bitsandbytes' int8 matmul inputs,
    ``Scope.attribute_held``): a checkpoint keeps them beside the block input."""

    @cached_property
    def saved_bytes(self) -> int:
        return saved_bytes(self.ops)

    @cached_property
    def checkpoint_bytes(self) -> int:
        """What the block holds from forward to backward when it is recomputed in full: its
        input and what its Functions keep as ctx attributes."""
        held = {t.name: t for t in self.attribute_held if t.name != self.input.name}
        return self.input.nbytes + sum(t.nbytes for t in held.values())

    @cached_property
    def flops(self) -> int:
        return sum(op.flops for op in self.ops)

    @cached_property
    def core_only_names(self) -> set[str]:
        """Storages saved only by attention-core ops (what selective recompute frees)."""
        kept = {s.name for op in self.ops if not op.attention_core for s in op.saves}
        kept |= {s.name for s in self.core_inputs}
        core = {s.name for op in self.ops if op.attention_core for s in op.saves}
        return (core - kept) | (set(self.discarded) - {s.name for s in self.core_inputs})

    @cached_property
    def weight_cast_bytes(self) -> int:
        """16-bit copies of the weights saved by this block's matmuls under autocast."""
        return sum(
            s.nbytes for name, s in unique_saved(self.ops).items() if name.endswith("weight_cast")
        )

    @cached_property
    def core_only_bytes(self) -> int:
        """Bytes selective recompute drops in forward and rebuilds in backward."""
        core = self.core_only_names
        return sum(s.nbytes for name, s in unique_saved(self.ops).items() if name in core)

    @cached_property
    def selective_saved_bytes(self) -> int:
        """Saved bytes minus the core's own tensors, plus core inputs nothing else saved
        (e.g. k and v before ``repeat_kv``: the core's checkpoint keeps them)."""
        core = self.core_only_names
        if not core:  # nothing to drop (a fused SDPA kernel): no checkpoint, nothing kept extra
            return self.saved_bytes
        saved = unique_saved(self.ops)
        kept = sum(s.nbytes for name, s in saved.items() if name not in core)
        return kept + sum(s.nbytes for s in self.core_inputs if s.name not in saved)

    @cached_property
    def core_flops(self) -> int:
        return sum(op.flops for op in self.ops if op.attention_core)

    def bytes_by_component(self, exclude: frozenset[str] = frozenset()) -> dict[Component, int]:
        """Saved bytes by the component of the first op saving each storage."""
        return bytes_by_component(self.ops, exclude)

    def selective_bytes_by_component(self) -> dict[Component, int]:
        out = self.bytes_by_component(frozenset(self.core_only_names))
        if not self.core_only_names:
            return out
        saved = unique_saved(self.ops)
        extra = sum(s.nbytes for s in self.core_inputs if s.name not in saved)
        if extra:
            out[Component.attention] = out.get(Component.attention, 0) + extra
        return out

    def grad_bytes(self, grad_itemsize: int) -> int:
        """Bytes of the gradients this block's backward writes (trainable weights only)."""
        return sum(w.grad_bytes(grad_itemsize) for op in self.ops for w in op.weights)

    def signature(self) -> tuple[object, ...]:
        """Everything that sets the block's bytes and FLOPs, with storage names replaced by
        their order of appearance: two layers with equal signatures are one kind."""
        index: dict[str, int] = {}

        def canon(t: Saved) -> tuple[object, ...]:
            return (index.setdefault(t.name, len(index)), t.numel, t.dtype, t.view_numel)

        head = (canon(self.input), self.param_numel)
        ops = tuple(
            (
                op.name,
                op.component,
                tuple(canon(t) for t in op.saves),
                op.flops,
                op.attention_core,
                op.grad_bytes,
                op.params,
                op.recompute_freed,
                op.work,
                op.forward_scratch,
                op.backward_scratch,
            )
            for op in self.ops
        )
        discarded = tuple(index.get(n, -1) for n in self.discarded)
        return (head, ops, tuple(canon(t) for t in self.core_inputs), discarded)


@dataclass(frozen=True)
class SpanInput:
    """Bytes made once for the layers of ``kinds`` only (HF Gemma 2 / 3 pass each layer the
    mask and rotary tables of its own span: ``causal_mask_mapping[config.layer_types[i]]``).
    Whatever holds them -- the ops of those layers that save them, or the checkpoints whose
    closures keep their keywords -- lets go once the lowest such layer is through its
    backward: the layers below it run theirs without these bytes."""

    kinds: frozenset[int]
    nbytes: int
    checkpointed: bool
    """In ``checkpoint_extra_inputs`` (kept by checkpoints only), else in the prologue."""


@dataclass(frozen=True)
class LossPeaks:
    """Bytes beyond the stored activations at the loss's two moments, as its implementation
    allocates them (``None`` on an OpGraph: HF's ``ForCausalLMLoss``, the timeline's rule)."""

    forward_bytes: int
    """While the loss's forward runs: the logits and whatever copies it makes of them."""
    backward_bytes: int
    """While its backward runs: the gradients it writes for the logits."""
    forward_where: str = "loss: log_softmax"
    """The forward moment's name in the timeline."""
    backward_where: str = "loss: _log_softmax_backward_data"


@dataclass(frozen=True)
class OpGraph:
    """A training step's forward as prologue (embeddings), the decoder stack, epilogue (head +
    loss). The stack holds each distinct block kind once and a ``LayerLayout`` saying which kind
    each layer is, so nothing here costs more for a deeper model."""

    prologue: tuple[Op, ...]
    kinds: tuple[Block, ...]
    """Each distinct decoder block once."""
    layout: LayerLayout
    """Which of ``kinds`` each layer is."""
    epilogue: tuple[Op, ...]
    checkpoint_extra_inputs: tuple[Saved, ...] = field(default=())
    """Tensors besides the hidden state that a per-block checkpoint keeps once (e.g. HF GPT-2
    passes its materialised eager attention mask positionally, so the checkpoint saves it)."""
    logits: Saved | None = None
    """The logits tensor (transient: the loss saves its own fp32 copy or nothing)."""
    loss_transient: tuple[Saved, ...] = field(default=())
    """Tensors that exist only around the loss (fp32 copy of logits, their gradients)."""
    span_inputs: tuple[SpanInput, ...] = field(default=())
    buffer_bytes_per_layer: int = 0
    """Module buffers each layer keeps on the device for the whole step (torchtitan 0.3's
    per-attention RoPE cache)."""
    buffer_bytes_shared: int = 0
    """Module buffers of the whole model (torchtitan 0.2.2's ``freqs_cis``)."""

    @property
    def buffer_bytes(self) -> int:
        """Module buffers on the device for the whole step."""
        return self.buffer_bytes_shared + self.buffer_bytes_per_layer * self.num_layers

    """Tensors of the prologue or ``checkpoint_extra_inputs`` that only the layers of some
    kinds read (one attention span's mask or rotary tables, when the model has two spans)."""
    loss_peaks: LossPeaks | None = None
    """What the loss allocates at its moments (None: HF's ForCausalLMLoss, see timeline)."""
    persistent: tuple[Saved, ...] = field(default=())
    """Buffers the model code allocates once and keeps for good (Megatron's
    ``GlobalMemoryBuffer``): on the GPU through every step and between them."""
    param_order: tuple[tuple[str, ...], ...] = field(default=())
    """Per block kind, its weights' names in the order the framework's module registers them
    (``model.parameters()``: HF's Llama layer registers its attention and MLP before its
    norms); empty: the ops' forward order. What a flat parameter buffer follows (DeepSpeed
    ZeRO-1/2's partitions)."""

    @classmethod
    def from_layers(
        cls,
        prologue: tuple[Op, ...],
        blocks: Sequence[Block],
        epilogue: tuple[Op, ...],
        *,
        checkpoint_extra_inputs: tuple[Saved, ...] = (),
        logits: Saved | None = None,
        loss_transient: tuple[Saved, ...] = (),
    ) -> OpGraph:
        """An OpGraph from one Block per layer (a traced model): layers with equal signatures
        become one kind (the first of them stands for all)."""
        kinds: list[Block] = []
        index: dict[tuple[object, ...], int] = {}
        per_layer = []
        for blk in blocks:
            sig = blk.signature()
            if sig not in index:
                index[sig] = len(kinds)
                kinds.append(blk)
            per_layer.append(index[sig])
        return cls(
            prologue,
            tuple(kinds),
            LayerLayout.from_kinds(per_layer),
            epilogue,
            checkpoint_extra_inputs,
            logits,
            loss_transient,
        )

    @property
    def num_layers(self) -> int:
        return self.layout.n

    @cached_property
    def kind_counts(self) -> tuple[int, ...]:
        """How many layers of each kind."""
        return self.layout.counts(len(self.kinds))

    def over_layers(self, value: Callable[[Block], int]) -> int:
        """Sum of ``value(block)`` over every layer: per kind, times its count."""
        return sum(c * value(b) for b, c in zip(self.kinds, self.kind_counts, strict=True) if c)

    def block(self, i: int) -> Block:
        """The block of layer ``i``."""
        return self.kinds[self.layout.kind_at(i)]

    def per_layer(self) -> tuple[Block, ...]:
        """One Block per layer -- O(layers): for tests and comparisons, not the estimate."""
        return tuple(self.block(i) for i in range(self.num_layers))

    @property
    def prologue_saved_bytes(self) -> int:
        return saved_bytes(self.prologue)

    @property
    def epilogue_saved_bytes(self) -> int:
        return saved_bytes(self.epilogue)

    @property
    def block_saved_bytes(self) -> int:
        return self.over_layers(lambda b: b.saved_bytes)

    @property
    def saved_bytes(self) -> int:
        """All activations saved for backward with no recompute."""
        return self.prologue_saved_bytes + self.block_saved_bytes + self.epilogue_saved_bytes

    @cached_property
    def forward_flops(self) -> int:
        ops = self.prologue + self.epilogue
        return sum(op.flops for op in ops) + self.over_layers(lambda b: b.flops)
