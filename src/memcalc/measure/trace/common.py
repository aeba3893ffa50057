"""Constants and the Trace result shared by the tracer modules."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from memcalc.graph.ops import OpGraph
from memcalc.params import ParamCounts
from memcalc.spec.training import DType

PROLOGUE = -1
"""Scope of everything before the first block (the epilogue is ``len(blocks)``)."""

TORCH_TO_DTYPE = {
    torch.float32: DType.fp32,
    torch.bfloat16: DType.bf16,
    torch.float16: DType.fp16,
    torch.int64: DType.int64,
    torch.int32: DType.int32,
    torch.int8: DType.int8,
    torch.bool: DType.bool,
    torch.float8_e4m3fn: DType.fp8,
    torch.float8_e5m2: DType.fp8,
}
BY_ITEMSIZE = {1: DType.int8, 2: DType.fp16, 4: DType.fp32, 8: DType.int64}
"""Dtypes memcalc has no name for (int32, uint8, float64...) are recorded by element size, so
their bytes stay exact."""

LN_NAME = re.compile(r"(^|_)ln(_|\d|$)")
FC_NAME = re.compile(r"^fc(\d|_in|_out)?$")
"""MLP projections that sit directly in the block, not in an MLP module (OPT ``fc1``/``fc2``)."""


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
    dead_branch_bytes: int = 0
    """Saved bytes that no node reachable from the loss claims: dead branches, freed before
    backward, left out of the graph."""
    notes: tuple[str, ...] = ()

    @property
    def num_ops(self) -> int:
        g = self.graph
        return len(g.prologue) + len(g.epilogue) + g.over_layers(lambda b: len(b.ops))
