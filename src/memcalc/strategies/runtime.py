"""The software a step runs on, as far as its time is concerned: which kernels (fused or
eager elementwise ops, which attention kernel) and which collectives the framework overlaps
with compute. One ``Runtime`` per framework as its performance configurations run it; the
layout and the GPU are the estimate's.

``runtime_of`` picks one from the setup's ``--framework``: ``megatron`` runs Megatron-core with
Transformer Engine as NVIDIA's performance recipes (NeMo / Megatron-Bridge) configure it;
``hf`` and ``reference`` run PyTorch's own parallelism, timed as torchtitan's defaults (eager
ops, SDPA's flash kernel, FSDP2 prefetch). A setup that names no framework is timed as
``megatron`` whatever its layout, so that ``plan`` compares layouts under one runtime (the
memory side's default framework depends on tp and pp). The published throughput points
(``benchmarks/throughput.py``) name the runtime their source ran.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from memcalc.frameworks import FrameworkName
from memcalc.spec.training import Attention, TrainingSetup
from memcalc.strategies.comms import Overlaps


class AttentionKernel(str, Enum):
    """The kernel that runs a fused attention op (``graph.ops.AttentionWork``)."""

    flash2 = "flash2"
    """FlashAttention-2 (Dao 2023): HF ``flash_attention_2`` and torch SDPA's flash backend."""
    cudnn = "cudnn"
    """cuDNN fused attention (Transformer Engine's default on Hopper and Blackwell) and
    FlashAttention-3 (Shah et al. 2024), the Hopper-native kernels."""
    flash1_triton = "flash1-triton"
    """FlashAttention's 2022 Triton kernel (Dao-AILab/flash-attention
    ``flash_attn/flash_attn_triton.py``, on the pre-MLIR Triton ``triton-pre-mlir``): what
    MPT's ``attn_impl: triton`` runs, the only MPT kernel with an ALiBi bias before
    FlashAttention 2.4."""


@dataclass(frozen=True)
class Runtime:
    """What a framework runs a step with (time only; memory follows ``--parallel-impl``)."""

    name: str
    fused_elementwise: bool
    """Chains of elementwise ops run as one kernel each (Transformer Engine's fused norms,
    SwiGLU, RoPE and bias-dropout-add; torch.compile), so they read and write HBM once per
    chain instead of once per op."""
    attention: AttentionKernel
    """The fused attention kernel (eager attention runs its batched matmuls and softmax)."""
    overlaps: Overlaps
    """Which collectives run behind compute."""

    def with_(self, **changes: object) -> Runtime:
        return replace(self, **changes)  # type: ignore[arg-type]


MEGATRON_CORE = Runtime(
    "megatron-core",
    fused_elementwise=True,
    attention=AttentionKernel.cudnn,
    overlaps=Overlaps(tp=True, grad_reduce=True, param_gather=True),
)
"""Megatron-core + Transformer Engine as NeMo / Megatron-Bridge's performance recipes run it:
``tp_comm_overlap``, ``overlap_grad_reduce``, ``overlap_param_gather``, TE's fused kernels and
cuDNN attention."""
MEGATRON_LM = Runtime(
    "megatron-lm",
    fused_elementwise=True,
    attention=AttentionKernel.cudnn,
    overlaps=Overlaps(tp=False, grad_reduce=True, param_gather=True),
)
"""Megatron-LM's own scripts with TE (its functional tests): the gradient and parameter
overlaps, no TP communication overlap (``--tp-comm-overlap`` is off by default)."""
MEGATRON_2021 = Runtime(
    "megatron-2021",
    fused_elementwise=True,
    attention=AttentionKernel.flash2,
    overlaps=Overlaps(tp=False, grad_reduce=False, param_gather=False),
)
"""Megatron-LM of Narayanan et al. 2021 / Korthikanti et al. 2022: fused bias-GeLU, softmax
and layer-norm kernels, eager attention (``--attention eager``), no communication overlap
(the data-parallel all-reduce ran after the backward)."""
TORCHTITAN = Runtime(
    "torchtitan",
    fused_elementwise=False,
    attention=AttentionKernel.flash2,
    overlaps=Overlaps(tp=False, grad_reduce=True, param_gather=True),
)
"""torchtitan's defaults: eager PyTorch ops, SDPA's flash kernel, FSDP2 prefetching, vanilla
(not async) tensor parallelism."""
TORCHTITAN_COMPILE = TORCHTITAN.with_(name="torchtitan-compile", fused_elementwise=True)
"""torchtitan with ``--training.compile``: Inductor fuses the elementwise chains."""
TORCHTITAN_COMPILE_ASYNC_TP = TORCHTITAN_COMPILE.with_(
    name="torchtitan-compile-asynctp", overlaps=Overlaps(tp=True)
)
"""... and ``--experimental.enable_async_tensor_parallel``: the TP all-gathers and
reduce-scatters run as micro-pipelined collective matmuls (torch ``_micro_pipeline_tp``)."""
LLM_FOUNDRY = TORCHTITAN.with_(name="llm-foundry", attention=AttentionKernel.flash1_triton)
"""MosaicML llm-foundry / Composer as its published MPT benchmark tables ran it: FSDP (one)
with prefetch, eager PyTorch ops, and the Triton FlashAttention kernel -- the sweep that
produced the A100 (2023-05) and H100 (2023-10) tables defaults to ``--attn_impl triton``
(mosaicml/llm-foundry ``scripts/train/benchmarking/submit_benchmarks.py`` @ 300cc5c and
@ b2a43a1; ``sweep.sh`` does not override it; ``yamls/pretrain/mpt-13b.yaml`` @ b2a43a1 sets
``attn_impl: triton``); the default became ``flash`` only in 2024-03 (@ 7f0fdae)."""

RUNTIMES = {
    r.name: r
    for r in (
        MEGATRON_CORE,
        MEGATRON_LM,
        MEGATRON_2021,
        TORCHTITAN,
        TORCHTITAN_COMPILE,
        TORCHTITAN_COMPILE_ASYNC_TP,
        LLM_FOUNDRY,
    )
}


def runtime_of(setup: TrainingSetup) -> Runtime:
    """The runtime an estimate's time assumes: Megatron-core's performance recipes for
    ``--framework megatron`` or none, torchtitan's defaults for PyTorch's own parallelism
    (``hf``, ``reference``); HF's flash-attention-2 (``--attention flash``) runs
    FlashAttention-2 whatever the framework."""
    named = setup.framework
    base = (
        TORCHTITAN if named is not None and named is not FrameworkName.megatron else MEGATRON_CORE
    )
    if setup.attention is Attention.flash:
        return base.with_(attention=AttentionKernel.flash2)
    return base
