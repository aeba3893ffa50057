"""GEMM workspaces that libraries allocate through PyTorch's caching allocator: tensors as far
as ``torch.cuda.memory_allocated`` is concerned, made at the first GEMM and kept for the life
of the process (the CUDA context itself is not a tensor: the profile's runtime overhead).

- Transformer Engine (``transformer_engine/pytorch/cpp_extensions/gemm.py``):
  ``get_cublas_workspace`` (``functools.lru_cache``) allocates
  ``get_cublas_workspace_size_bytes()`` -- 32 MiB + 1 KiB on compute capability 9 and up,
  4 MiB below -- once, and for grouped GEMMs (MoE ``GroupedLinear``) one more per compute
  stream (``nvte_get_num_compute_streams``: 4, ``common/util/multi_stream.cpp``).
- PyTorch (``aten/src/ATen/cuda/CublasHandlePool.cpp`` ``setWorkspaceForHandle``): one
  workspace per (cuBLAS handle, stream), of ``CUBLAS_WORKSPACE_CONFIG``'s size
  (``parseChosenWorkspaceSize``; default 32 MiB on sm90, 8 MiB + 128 KiB otherwise). Handles
  are per thread: the forward runs on the main thread and the backward on the autograd
  engine's device thread, so a training step on the default stream makes two (Megatron's
  output layer and any torch matmul call cuBLAS in both).
"""

from __future__ import annotations

from dataclasses import dataclass

TE_WORKSPACE_HOPPER = 32 * 2**20 + 1024
"""``get_cublas_workspace_size_bytes`` on compute capability >= 9."""
TE_WORKSPACE_OLDER = 4 * 2**20
"""Below compute capability 9."""
TE_COMPUTE_STREAMS = 4
"""``multi_stream.cpp`` ``num_compute_streams``."""
TORCH_WORKSPACE_SM90 = 4096 * 8 * 1024
TORCH_WORKSPACE_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8
TORCH_BLAS_THREADS = 2
"""The threads that run torch GEMMs in a training step: the caller's and autograd's."""


@dataclass(frozen=True)
class Workspaces:
    """The workspaces a rank holds for the whole step (bytes), by library."""

    te_bytes: int = 0
    torch_bytes: int = 0

    @property
    def buffer_bytes(self) -> int:
        return self.te_bytes + self.torch_bytes

    @property
    def note(self) -> str:
        if not self.buffer_bytes:
            return ""
        return (
            f"GEMM workspaces through the caching allocator: Transformer Engine {self.te_bytes:,} "
            f"bytes, PyTorch cuBLAS {self.torch_bytes:,} bytes ({TORCH_BLAS_THREADS} handles: "
            "forward and autograd threads)"
        )


NO_WORKSPACES = Workspaces()


def te_cublas_workspaces(
    compute_capability: float | None,
    torch_workspace_bytes: int | None,
    grouped_gemm: bool,
    *,
    te_gemms: bool = True,
) -> Workspaces:
    """TE's and PyTorch's workspaces on a GPU of ``compute_capability`` (None: unknown, taken
    as the reference H100's 9.0); ``torch_workspace_bytes``: ``CUBLAS_WORKSPACE_CONFIG``'s size
    when set; ``te_gemms`` False: no GEMM runs through TE (Megatron's local spec), so its
    workspace is never made.

    >>> te_cublas_workspaces(9.0, None, False).buffer_bytes == 96 * 2**20 + 1024
    True
    >>> te_cublas_workspaces(8.0, 32 * 2**20, False).buffer_bytes == 68 * 2**20
    True
    """
    cc = 9.0 if compute_capability is None else compute_capability
    one = TE_WORKSPACE_HOPPER if cc >= 9 else TE_WORKSPACE_OLDER
    te = one * (1 + (TE_COMPUTE_STREAMS if grouped_gemm else 0)) if te_gemms else 0
    if torch_workspace_bytes is None:
        torch_workspace_bytes = TORCH_WORKSPACE_SM90 if cc == 9.0 else TORCH_WORKSPACE_OTHER
    return Workspaces(te, TORCH_BLAS_THREADS * torch_workspace_bytes)
