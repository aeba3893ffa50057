"""Storage dtypes and their sizes: the one vocabulary every layer (specs, GPU profiles, the op
graph) uses for "what a tensor is stored in"."""

from __future__ import annotations

from enum import Enum


class DType(str, Enum):
    """Storage dtypes, with their size in bytes."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int64 = "int64"
    int32 = "int32"
    int8 = "int8"
    bool = "bool"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]


_ITEMSIZE = {
    DType.fp32: 4,
    DType.bf16: 2,
    DType.fp16: 2,
    DType.fp8: 1,
    DType.int64: 8,
    DType.int32: 4,
    DType.int8: 1,
    DType.bool: 1,
}
