"""How long one kernel takes on one GPU: a matmul by its shape, a fused attention kernel by its
own FLOPs, an elementwise op by the bytes it moves.

Matmuls (NVIDIA, *Matrix Multiplication Background User's Guide*, DU-09799-001, ch. 2-3):
a GEMM of m x k by k x n computes its output in tiles, one tile per SM at a time; the tiles run
in waves of ``sm_count``, so a GEMM whose tiles fill the last wave partly pays for the whole
wave (wave quantization), and one whose m or n is not a multiple of the tile computes the
padding (tile quantization). The library picks the tile (``TILES``) that wastes least; a
GEMM with fewer tiles than SMs splits its k dimension over them (split-K). At best a matmul
runs at the GPU's measured maximum achievable matmul FLOPS (``GpuProfile.matmul_efficiency``:
brute-force searched best shapes, stas00/ml-engineering); at worst it is bound by reading
its inputs and writing its output from HBM (the roofline, Williams et al. 2009). Each tile
also pays a fixed cost that a short k cannot amortise (``TILE_OVERHEAD_RIDGES``). A
tensor-parallel split divides n (column-parallel) or k (row-parallel) by tp: thinner GEMMs
fill fewer tiles per wave and shorter ones amortise less.

    t = max(2 m k n / (peak x ceiling x utilisation x k / (k + k0)),
            bytes / (HBM x HBM_EFFICIENCY))

Fused attention (FlashAttention-2, Dao 2023; FlashAttention-3, Shah et al. 2024): the kernel
tiles the s x s scores and, with a causal mask, skips the key blocks wholly above the
diagonal -- half the square, plus the diagonal blocks (``causal_fraction``); a sliding window
skips the keys older than the window too. Eager attention computes every score (its two
batched matmuls are GEMMs above). The backward recomputes the scores and runs four more
products: 2.5 x the forward's FLOPs (Dao 2023, sec. 3.1.2). Each kernel reaches its own
measured fraction of the 16-bit peak per GPU generation (``ATTENTION_EFFICIENCY``).

Elementwise and reduction ops are bound by HBM traffic at ``HBM_EFFICIENCY`` of the profile's
memory bandwidth (``compute.py`` counts their bytes).
"""

from __future__ import annotations

import math

from memcalc.graph.ops import AttentionWork, Gemm
from memcalc.profiles import GpuProfile
from memcalc.spec.training import DType
from memcalc.strategies.runtime import AttentionKernel

TILES = ((128, 128), (128, 256), (256, 128))
"""Output tiles cuBLAS / CUTLASS pick among for large 16-bit and fp8 GEMMs on Ampere and
later (the guide's "Typical tile dimensions in cuBLAS", sec. 2.3)."""
SPLIT_K_MIN = 256
"""Shortest slice of k a split-K GEMM gives each SM (a slice is several k-blocks of 64)."""
TILE_OVERHEAD_RIDGES = 1.214
"""A GEMM tile's fixed cost (filling its load pipeline, writing its output), as k elements of
its main loop, in units of the GPU's ridge point (peak FLOP/s / HBM bytes/s): a GEMM of depth k
runs at k / (k + k0) of its deep-k rate, k0 = 1.214 x ridge. Fitted to DeepGEMM's FP8 GEMMs
on H800 (= H100 SXM tensor cores and HBM3; deepseek-ai/DeepGEMM README @ a6d97a1, "Normal
GEMMs for dense models", M = 4096 with N of 7168 and more): k = 512, 1536, 2048, 7168, 16384 run
at 30, 50, 52, 66, 69% of peak; 0.72 x k / (k + 717) gives 30, 49, 53, 66, 69%. 717 = 1.214 x
the fp8 ridge (1978.9e12 / 3.35e12 = 591 FLOP/byte): the overhead is time, so in 16-bit, whose
main loop is twice as slow per element, it is 358 elements of k -- the same multiple of its
ridge. A tensor-parallel row-parallel GEMM (k = h / tp) is where it bites."""
HBM_EFFICIENCY = 0.90
"""Fraction of the datasheet memory bandwidth a streaming kernel reaches: a GH200 96 GB
(4.0 TB/s HBM3) read 3614.6 GB/s and wrote 3704.8 GB/s coalesced (OpenCL-Benchmark,
mredenti/PowerCapping ``configuration/OpenCL_benchmark.md``), 90-93%."""
ATTENTION_BACKWARD_FLOPS = 2.5
"""A flash backward's FLOPs over its forward's: it recomputes S = QK^T and runs dP, dV, dQ,
dK -- five products to the forward's two (Dao 2023, sec. 3.1.2)."""
ATTENTION_TILE = 128
"""Query / key block of the flash kernels: a causal kernel computes the diagonal blocks in
full."""

ATTENTION_EFFICIENCY: dict[tuple[AttentionKernel, str], tuple[float, float]] = {
    # FlashAttention-2 on A100: forward 50-73% of peak, forward + backward up to ~63% at head
    # dim 128 (Dao 2023, arXiv:2307.08691, abstract and sec. 4.1) -> forward 0.70, backward
    # 0.60 (5.56 = 1/0.70 + 2.5/0.60 over 3.5 FLOP units: 63%)
    (AttentionKernel.flash2, "ampere"): (0.70, 0.60),
    # FlashAttention-2 on H100: "only 35% utilization" (Shah et al. 2024, arXiv:2407.08608,
    # abstract): it uses Ampere's mma.sync, not Hopper's wgmma / TMA
    (AttentionKernel.flash2, "hopper"): (0.35, 0.35),
    # FlashAttention-3 / cuDNN on H100, head dim 128, bf16: forward 614-621 TFLOP/s at
    # 8-16K tokens (pytorch/benchmark ff65cb6, flash_v3, 0.62 of 989); backward 1.5-1.75x
    # FlashAttention-2's (Shah et al. 2024, sec. 4.1) -> 0.50
    (AttentionKernel.cudnn, "hopper"): (0.62, 0.50),
    # ASSUMPTION: Blackwell's cuDNN / FlashAttention-4 kernels at Hopper's fractions; the
    # Ampere-era FlashAttention-2 code as on Hopper
    (AttentionKernel.cudnn, "blackwell"): (0.62, 0.50),
    (AttentionKernel.flash2, "blackwell"): (0.35, 0.35),
    # FlashAttention's Triton kernel (MPT's attn_impl: triton) on A100: the Triton fused
    # attention kernel's regression figures on A100, causal, FLOPs counted as here (half the
    # square, backward 2.5x): forward 0.37, backward 0.25 of the tensor-core peak
    # (triton-lang/triton python/test/regression/test_performance.py @ 00693c1,
    # flash_attention_data). Together 3.5 / (1/0.37 + 2.5/0.25) = 28% of peak, inside the
    # 25-40% Dao 2023 gives FlashAttention-1 (arXiv:2307.08691, abstract), which the Triton
    # port matches: "Overall Triton forward + backward is slightly slower than CUDA forward +
    # backward" (Dao-AILab/flash-attention flash_attn/flash_attn_triton.py, docstring).
    (AttentionKernel.flash1_triton, "ampere"): (0.37, 0.25),
    # ASSUMPTION: on Hopper the same Ampere-era mma.sync code loses what FlashAttention-2
    # (also mma.sync) loses there: x 0.35 / 0.70 forward, x 0.35 / 0.60 backward
    (AttentionKernel.flash1_triton, "hopper"): (0.37 * 0.35 / 0.70, 0.25 * 0.35 / 0.60),
    # ASSUMPTION: CDNA3's CK flash kernels at FlashAttention-2-on-Hopper's fraction
    (AttentionKernel.flash2, "cdna3"): (0.35, 0.35),
    (AttentionKernel.cudnn, "cdna3"): (0.35, 0.35),
}
"""(forward, backward) fraction of the 16-bit dense peak a fused attention kernel reaches.
Generations not listed (volta, turing, ampere's cuDNN, ada, cdna2) use FlashAttention-2's
Ampere figures: the kernel was written for that generation of mma instructions."""


def attention_efficiency(kernel: AttentionKernel, architecture: str) -> tuple[float, float]:
    """(forward, backward) fraction of peak of ``kernel`` on ``architecture``.

    >>> attention_efficiency(AttentionKernel.cudnn, "ampere")
    (0.7, 0.6)
    """
    hit = ATTENTION_EFFICIENCY.get((kernel, architecture))
    return hit if hit is not None else ATTENTION_EFFICIENCY[(AttentionKernel.flash2, "ampere")]


def tile_utilisation(m: int, n: int, k: int, groups: int, sm_count: int) -> float:
    """Useful fraction of the tile-waves a GEMM occupies, for the best of ``TILES``
    (tile and wave quantization; split-K when the tiles do not fill the SMs).

    4096 x 4096 outputs on 132 SMs in 128 x 256 tiles: 512 tiles, 4 waves (528 slots): 0.97.

    >>> round(tile_utilisation(4096, 4096, 4096, 1, 132), 4)
    0.9697
    >>> round(tile_utilisation(8192, 1280, 8192, 1, 132), 4)  # a tp-8 70B QKV: 5 waves
    0.9697
    """
    best = 0.0
    for tm, tn in TILES:
        tiles = groups * math.ceil(m / tm) * math.ceil(n / tn)
        splits = 1
        if tiles < sm_count:
            splits = max(1, min(sm_count // tiles, k // SPLIT_K_MIN))
        slots = math.ceil(tiles * splits / sm_count) * sm_count
        useful = groups * m * n / (tm * tn)  # tiles' worth of real output
        best = max(best, useful * splits / slots)
    return min(1.0, best)


def gemm_seconds(
    m: int, k: int, n: int, groups: int, dtype: DType, gpu: GpuProfile, out_bytes: int = 2
) -> float:
    """One GEMM: the slower of its compute at the shape's utilisation and its HBM traffic
    (inputs in ``dtype``, output of ``out_bytes`` per element).

    Llama-3-70B's MLP up-projection at tp 8 (8192 tokens x 8192 -> 7168) on an H100 SXM runs
    at its compute bound: 0.803 (the measured ceiling) x 0.970 (7168 = 28 x 256: 64 x 28 =
    1792 tiles in 14 waves of 132) x 8192 / (8192 + 358) (k = 8192 against the tile overhead):

    >>> from memcalc.profiles import load_profile
    >>> h100 = load_profile("h100")
    >>> t = gemm_seconds(8192, 8192, 7168, 1, DType.bf16, h100)
    >>> round(2 * 8192 * 8192 * 7168 / t / 989.4e12, 3)  # fraction of the dense peak
    0.746
    """
    if min(m, k, n, groups) <= 0:
        return 0.0
    flops = 2 * groups * m * k * n
    peak = gpu.matmul_flops_per_s(dtype)
    k0 = TILE_OVERHEAD_RIDGES * peak / gpu.memory_bandwidth_bytes_per_s
    utilisation = tile_utilisation(m, n, k, groups, gpu.sm_count) * k / (k + k0)
    compute = flops / (peak * gpu.matmul_efficiency(dtype) * utilisation)
    moved = groups * ((m * k + k * n) * dtype.itemsize + m * n * out_bytes)
    memory = moved / (gpu.memory_bandwidth_bytes_per_s * HBM_EFFICIENCY)
    return max(compute, memory)


def runs_fp8(dtype: DType, gpu: GpuProfile) -> bool:
    """Whether an fp8 GEMM runs in fp8 on ``gpu``: only where the GPU has fp8 tensor cores
    (Ada, Hopper and later). Transformer Engine and torchao's float8 refuse older GPUs; the
    estimate keeps fp8-mixed's memory and times its GEMMs at the 16-bit rate there."""
    return dtype is DType.fp8 and gpu.fp8_flops_per_s > 0


def gemm_pass_seconds(g: Gemm, gpu: GpuProfile) -> tuple[float, float]:
    """(forward, backward) seconds of an op's matmul: the forward product; in backward the
    input gradient (m x n) @ (n x k) and the weight gradient (k x m) @ (m x n), each when
    needed (a frozen weight has none)."""
    dtype = DType.bf16 if g.dtype is DType.fp8 and not runs_fp8(g.dtype, gpu) else g.dtype
    fwd = gemm_seconds(g.m, g.k, g.n, g.groups, dtype, gpu)
    bwd = 0.0
    if g.input_grad:
        bwd += gemm_seconds(g.m, g.n, g.k, g.groups, dtype, gpu)
    if g.weight_grad:
        bwd += gemm_seconds(g.k, g.m, g.n, g.groups, dtype, gpu)
    return fwd, bwd


def causal_fraction(work: AttentionWork, kv_len: int) -> float:
    """Fraction of the q_len x kv_len score rectangle a masked kernel computes.

    Causal, one rank's queries against all keys: half, plus half a block on the diagonal
    per query block (under context parallelism with causal load balancing every rank holds
    two of 2 cp chunks, i and 2cp-1-i, and so computes exactly its 1/cp share of the causal
    triangle: half its rectangle as well). A sliding window w keeps w keys per query.

    >>> w = AttentionWork(32, 8192, 8192, 128, 128, DType.bf16)
    >>> causal_fraction(w, 8192)
    0.5078125
    >>> causal_fraction(AttentionWork(32, 8192, 8192, 128, 128, DType.bf16, True, 4096), 8192)
    0.3828125
    """
    if not work.causal:
        return 1.0
    frac = 0.5 + ATTENTION_TILE / 2 / work.q_len
    if work.window is not None and work.window < kv_len:
        w = work.window
        frac = (w * kv_len - w * w / 2) / (kv_len * kv_len) + ATTENTION_TILE / 2 / work.q_len
    return min(1.0, frac)


def attention_flops(work: AttentionWork, cp: int = 1) -> float:
    """Forward FLOPs of a fused attention kernel on one rank: its queries against the keys of
    all ``cp`` ranks (ring / all-gather context parallelism), masked as the kernel masks."""
    kv = work.kv_len * cp
    return 2 * work.heads * work.q_len * kv * (work.qk_dim + work.v_dim) * causal_fraction(work, kv)


def attention_pass_seconds(
    work: AttentionWork, gpu: GpuProfile, kernel: AttentionKernel, cp: int = 1
) -> tuple[float, float]:
    """(forward, backward) seconds of a fused attention op on one rank."""
    flops = attention_flops(work, cp)
    fwd_eff, bwd_eff = attention_efficiency(kernel, gpu.architecture)
    peak = gpu.matmul_flops_per_s(work.dtype)
    return flops / (peak * fwd_eff), ATTENTION_BACKWARD_FLOPS * flops / (peak * bwd_eff)


def memory_seconds(num_bytes: float, gpu: GpuProfile) -> float:
    """Seconds of HBM traffic at the achievable streaming rate."""
    return num_bytes / (gpu.memory_bandwidth_bytes_per_s * HBM_EFFICIENCY)
