"""Exact byte accounting on any device, CPU included: saved tensors and live storages.

Two instruments, both deduplicating by untyped storage (views of one buffer count once):

* ``SavedTensorRecorder`` -- ``torch.autograd.graph.saved_tensors_hooks``: every tensor autograd
  saves for backward during the forward and still holds when the forward ends. Parameter storages
  are excluded (they are counted as parameters); a storage freed while recording (saved by a dead
  branch of the graph -- the values of a top-k whose indices alone are used -- whose node dies when
  the forward drops it) is forgotten, so its address may be counted again for whatever reuses it.
  Under ``torch.utils.checkpoint(use_reentrant=False)`` it sees what the checkpoint holds (its
  ``_NoopSaveInputs`` saves the block's positional tensor inputs through the outer hooks) and not
  what the checkpointed region saves (the checkpoint's own inner hooks take it).
* ``LiveMemoryTracker`` -- a ``TorchDispatchMode`` that registers every storage an op creates and
  forgets it when the storage is freed (``weakref.finalize``), so it knows the live bytes after
  every op and the peak, with the phase and the op that set it.

Both see the real storages under torch.distributed (as torch's own
``torch/distributed/_tools/mem_tracker.py`` does): a tensor subclass that wraps plain tensors
(a DTensor holds its ``_local_tensor``; FSDP2's sharded parameters, gradients and optimizer
states are DTensors) is counted by the storages of the tensors inside it; the tracker lets a
DTensor op run its local ops *under* the mode (``__torch_dispatch__`` returns NotImplemented for
subclass arguments), so DTensor's redistribute buffers and collectives' outputs are seen; and
``UntypedStorage.resize_`` -- how FSDP2 frees and re-allocates its unsharded parameters
(``_fsdp_param.py`` ``free_storage`` / ``alloc_storage``), invisible to a dispatch mode -- is
patched while the tracker is on.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._guards import active_fake_mode
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    is_traceable_wrapper_subclass,
    is_traceable_wrapper_subclass_type,
)
from torch.utils._pytree import tree_flatten


def real_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors that own ``t``'s memory: ``t`` itself, or for a wrapper subclass
    (DTensor, a functional collective's AsyncCollectiveTensor) the tensors it wraps, found
    with ``__tensor_flatten__`` (a DTensor's wrapper storage is a placeholder of the global
    size with no data)."""
    if not is_traceable_wrapper_subclass(t):
        return [t]
    names, _ = t.__tensor_flatten__()  # type: ignore[attr-defined]
    inner = (getattr(t, name) for name in names)
    return [x for i in inner if isinstance(i, torch.Tensor) for x in real_tensors(i)]


def _storage_key(t: torch.Tensor) -> int | None:
    """The key of a plain tensor's storage (its data pointer), None when it holds no bytes."""
    storage = t.untyped_storage()
    if storage.nbytes() == 0:
        return None
    return storage.data_ptr()


def storage_keys(t: torch.Tensor) -> list[int]:
    """The keys of the storages that hold ``t``'s bytes (one, or those of a subclass's inner
    tensors)."""
    return [k for x in real_tensors(t) if (k := _storage_key(x)) is not None]


def storage_identity(t: torch.Tensor) -> int:
    """The identity of a plain tensor's storage object, which outlives ``resize_`` (its data
    pointer does not)."""
    return int(t.untyped_storage()._cdata)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class SavedTensorRecorder:
    """Record the unique storages autograd saves for backward inside the context."""

    exclude: set[int] = field(default_factory=set)
    """Storage keys never counted (parameters)."""
    exclude_storages: set[int] = field(default_factory=set)
    """Storage identities (``storage_identity``) never counted: FSDP2's unsharded parameters,
    whose data pointer changes at every all-gather."""
    bytes_by_key: dict[int, int] = field(default_factory=dict)
    dtype_by_key: dict[int, str] = field(default_factory=dict)
    recording: bool = False
    """Inside ``hooks()``: a storage freed now was not held until backward."""
    freed_bytes: int = 0
    """Bytes saved and freed again while recording (dead branches)."""

    @classmethod
    def for_module(cls, module: torch.nn.Module) -> SavedTensorRecorder:
        keys = {k for p in module.parameters() for k in storage_keys(p)}
        keys |= {k for b in module.buffers() for k in storage_keys(b)}
        return cls(exclude=keys)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        for x in real_tensors(t):
            key = _storage_key(x)
            if key is None or key in self.exclude or key in self.bytes_by_key:
                continue
            if self.exclude_storages and storage_identity(x) in self.exclude_storages:
                continue
            self.bytes_by_key[key] = x.untyped_storage().nbytes()
            self.dtype_by_key[key] = _dtype_name(x.dtype)
            weakref.finalize(t.untyped_storage(), self._freed, key)
        return t

    def _freed(self, key: int) -> None:
        if self.recording and key in self.bytes_by_key:
            self.freed_bytes += self.bytes_by_key.pop(key)
            self.dtype_by_key.pop(key)

    @contextlib.contextmanager
    def hooks(self) -> Iterator[None]:
        """Record what the forward inside saves (and still holds at the exit)."""
        self.recording = True
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
                yield
        finally:
            self.recording = False

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_key.values())

    def bytes_by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for key, nbytes in self.bytes_by_key.items():
            out[self.dtype_by_key[key]] += nbytes
        return dict(out)


class _Packed:
    """What a saved-tensor pack hook returns: the tensor, in an object autograd drops when the
    node that saved it has run its backward."""

    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


@dataclass
class HeldSavedRecorder(SavedTensorRecorder):
    """A SavedTensorRecorder that also knows when autograd lets go of what it saved, so it
    knows the most bytes of saved tensors held at once -- several micro-batches' under a
    pipeline schedule, where forwards and backwards interleave."""

    held_bytes: int = 0
    peak_held_bytes: int = 0
    refs: dict[int, int] = field(default_factory=dict)

    def _pack(self, t: torch.Tensor) -> _Packed:  # type: ignore[override]
        super()._pack(t)
        keys = []
        for x in real_tensors(t):
            key = _storage_key(x)
            if key is None or key in self.exclude:
                continue
            if self.exclude_storages and storage_identity(x) in self.exclude_storages:
                continue
            keys.append((key, x.untyped_storage().nbytes()))
        packed = _Packed(t)
        for key, nbytes in keys:
            self.refs[key] = self.refs.get(key, 0) + 1
            if self.refs[key] == 1:
                self.held_bytes += nbytes
        self.peak_held_bytes = max(self.peak_held_bytes, self.held_bytes)
        weakref.finalize(packed, self._release, keys)
        return packed

    def _release(self, keys: list[tuple[int, int]]) -> None:
        for key, nbytes in keys:
            self.refs[key] -= 1
            if not self.refs[key]:
                del self.refs[key]
                self.held_bytes -= nbytes

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda p: p.tensor)


class LiveMemoryTracker(TorchDispatchMode):
    """Live bytes of every storage created by an op inside the mode, and their peak.

    Storages that existed before the mode started (parameters, optimizer state, inputs) are
    added with ``register``; ``phase`` is a label the caller sets (forward/backward/step).
    """

    def __init__(self) -> None:
        super().__init__()
        self._resize = torch.UntypedStorage.resize_
        self._fake_on_entry: object = None
        self.live: dict[int, int] = {}
        self.live_bytes = 0
        self.peak_bytes = 0
        self.peak_phase = ""
        self.peak_op = ""
        self.phase = ""
        self.phase_peaks: dict[str, int] = defaultdict(int)

    def register(self, tensors: Any) -> None:
        """Count storages that already exist (they are freed like any other)."""
        flat, _ = tree_flatten(tensors)
        for t in flat:
            if isinstance(t, torch.Tensor):
                self._track(t)

    def _track(self, t: torch.Tensor) -> bool:
        if t.device.type == "meta":
            return False
        grew = False
        for x in real_tensors(t):
            grew |= self._track_storage(x.untyped_storage())
        return grew

    def _track_storage(self, storage: torch.UntypedStorage) -> bool:
        nbytes = storage.nbytes()
        if nbytes == 0 or storage.device.type == "meta":
            return False
        key = storage.data_ptr()
        if key in self.live:
            return False
        self.live[key] = nbytes
        self.live_bytes += nbytes
        weakref.finalize(storage, self._free, key, nbytes)
        return True

    def _resized(self, storage: torch.UntypedStorage, size: int) -> None:
        """``UntypedStorage.resize_`` while tracking: the old bytes are freed, the new ones
        (a new allocation) are live."""
        key, nbytes = storage.data_ptr(), storage.nbytes()
        self._resize(storage, size)
        if nbytes and self.live.get(key) == nbytes:
            del self.live[key]
            self.live_bytes -= nbytes
        if self._track_storage(storage):
            self._note_peak("resize_")

    def __enter__(self) -> LiveMemoryTracker:
        self._fake_on_entry = active_fake_mode()
        tracker = self

        def resize_(storage: torch.UntypedStorage, size: int) -> None:
            tracker._resized(storage, size)

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign, assignment]
        super().__enter__()
        return self

    def __exit__(self, *args: Any) -> None:
        torch.UntypedStorage.resize_ = self._resize  # type: ignore[method-assign]
        super().__exit__(*args)

    def _free(self, key: int, nbytes: int) -> None:
        if self.live.get(key) == nbytes:
            del self.live[key]
            self.live_bytes -= nbytes

    def _note_peak(self, op_name: str) -> None:
        if self.live_bytes > self.phase_peaks[self.phase]:
            self.phase_peaks[self.phase] = self.live_bytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.peak_phase = self.phase
            self.peak_op = op_name

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if any(is_traceable_wrapper_subclass_type(t) for t in types):
            # let the subclass (DTensor) run first: its local ops come back here as plain ops
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        if active_fake_mode() is not self._fake_on_entry:
            return out  # DTensor's sharding propagation on fake tensors: no memory
        flat, _ = tree_flatten(out)
        grew = False
        for t in flat:
            if isinstance(t, torch.Tensor):
                grew |= self._track(t)
        if grew:
            self._note_peak(func.__name__.split(".")[0])
        return out

    def reset_peak(self) -> None:
        self.peak_bytes = self.live_bytes
        self.peak_phase = self.phase
        self.peak_op = ""
        self.phase_peaks = defaultdict(int)
