"""Op graph types: ops with the storages they save for backward and their forward FLOPs.

A storage is identified by its name inside one scope (the prologue, one block, the epilogue):
two ops that save views of the same buffer (q and k of a fused qkv projection) name the same
storage, and it is counted once -- as autograd's saved tensors share one untyped storage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

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

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


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

    @property
    def saved_bytes(self) -> int:
        return saved_bytes(self.ops)

    @property
    def flops(self) -> int:
        return sum(op.flops for op in self.ops)

    @property
    def core_only_names(self) -> set[str]:
        """Storages saved only by attention-core ops (what selective recompute frees)."""
        kept = {s.name for op in self.ops if not op.attention_core for s in op.saves}
        kept |= {s.name for s in self.core_inputs}
        return {s.name for op in self.ops if op.attention_core for s in op.saves} - kept

    @property
    def weight_cast_bytes(self) -> int:
        """16-bit copies of the weights saved by this block's matmuls under autocast."""
        return sum(
            s.nbytes for name, s in unique_saved(self.ops).items() if name.endswith("weight_cast")
        )

    @property
    def core_only_bytes(self) -> int:
        """Bytes selective recompute drops in forward and rebuilds in backward."""
        core = self.core_only_names
        return sum(s.nbytes for name, s in unique_saved(self.ops).items() if name in core)

    @property
    def selective_saved_bytes(self) -> int:
        """Saved bytes minus the core's own tensors, plus core inputs nothing else saved
        (e.g. k and v before ``repeat_kv``: the core's checkpoint keeps them)."""
        core = self.core_only_names
        if not core:  # nothing to drop (a fused SDPA kernel): no checkpoint, nothing kept extra
            return self.saved_bytes
        saved = unique_saved(self.ops)
        kept = sum(s.nbytes for name, s in saved.items() if name not in core)
        return kept + sum(s.nbytes for s in self.core_inputs if s.name not in saved)

    @property
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


@dataclass(frozen=True)
class OpGraph:
    """A training step's forward as prologue (embeddings), blocks, epilogue (head + loss)."""

    prologue: tuple[Op, ...]
    blocks: tuple[Block, ...]
    epilogue: tuple[Op, ...]
    checkpoint_extra_inputs: tuple[Saved, ...] = field(default=())
    """Tensors besides the hidden state that a per-block checkpoint keeps once (e.g. HF GPT-2
    passes its materialised eager attention mask positionally, so the checkpoint saves it)."""
    logits: Saved | None = None
    """The logits tensor (transient: the loss saves its own fp32 copy or nothing)."""
    loss_transient: tuple[Saved, ...] = field(default=())
    """Tensors that exist only around the loss (fp32 copy of logits, their gradients)."""

    @property
    def prologue_saved_bytes(self) -> int:
        return saved_bytes(self.prologue)

    @property
    def epilogue_saved_bytes(self) -> int:
        return saved_bytes(self.epilogue)

    @property
    def block_saved_bytes(self) -> int:
        return sum(b.saved_bytes for b in self.blocks)

    @property
    def saved_bytes(self) -> int:
        """All activations saved for backward with no recompute."""
        return self.prologue_saved_bytes + self.block_saved_bytes + self.epilogue_saved_bytes

    @property
    def forward_flops(self) -> int:
        ops = self.prologue + self.epilogue
        return sum(op.flops for op in ops) + sum(b.flops for b in self.blocks)
