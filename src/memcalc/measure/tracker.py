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
"""

from __future__ import annotations

import contextlib
import weakref
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storage_key(t: torch.Tensor) -> int | None:
    storage = t.untyped_storage()
    if storage.nbytes() == 0:
        return None
    return storage.data_ptr()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class SavedTensorRecorder:
    """Record the unique storages autograd saves for backward inside the context."""

    exclude: set[int] = field(default_factory=set)
    """Storage keys never counted (parameters)."""
    bytes_by_key: dict[int, int] = field(default_factory=dict)
    dtype_by_key: dict[int, str] = field(default_factory=dict)
    scope_by_key: dict[int, str] = field(default_factory=dict)
    scope: str = "<root>"
    """Set by the caller (e.g. a module pre-hook) to attribute storages to a block."""
    recording: bool = False
    """Inside ``hooks()``: a storage freed now was not held until backward."""
    freed_bytes: int = 0
    """Bytes saved and freed again while recording (dead branches)."""

    @classmethod
    def for_module(cls, module: torch.nn.Module) -> SavedTensorRecorder:
        keys = {_storage_key(p) for p in module.parameters()}
        keys |= {_storage_key(b) for b in module.buffers()}
        return cls(exclude={k for k in keys if k is not None})

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key is not None and key not in self.exclude and key not in self.bytes_by_key:
            self.bytes_by_key[key] = t.untyped_storage().nbytes()
            self.dtype_by_key[key] = _dtype_name(t.dtype)
            self.scope_by_key[key] = self.scope
            weakref.finalize(t.untyped_storage(), self._freed, key)
        return t

    def _freed(self, key: int) -> None:
        if self.recording and key in self.bytes_by_key:
            self.freed_bytes += self.bytes_by_key.pop(key)
            self.dtype_by_key.pop(key)
            self.scope_by_key.pop(key)

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

    def bytes_by_scope(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for key, nbytes in self.bytes_by_key.items():
            out[self.scope_by_key[key]] += nbytes
        return dict(out)

    def bytes_by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for key, nbytes in self.bytes_by_key.items():
            out[self.dtype_by_key[key]] += nbytes
        return dict(out)


class LiveMemoryTracker(TorchDispatchMode):
    """Live bytes of every storage created by an op inside the mode, and their peak.

    Storages that existed before the mode started (parameters, optimizer state, inputs) are
    added with ``register``; ``phase`` is a label the caller sets (forward/backward/step).
    """

    def __init__(self) -> None:
        super().__init__()
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
        storage = t.untyped_storage()
        key = storage.data_ptr()
        nbytes = storage.nbytes()
        if nbytes == 0 or key in self.live or t.device.type == "meta":
            return False
        self.live[key] = nbytes
        self.live_bytes += nbytes
        weakref.finalize(storage, self._free, key, nbytes)
        return True

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
        out = func(*args, **(kwargs or {}))
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
