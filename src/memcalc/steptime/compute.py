"""The kernel time of one micro-batch on one rank, op by op from the op graph: matmuls by their
GEMM shapes, fused attention by its own (masked) FLOPs, everything else by the HBM bytes it
moves (``kernels.py`` rates each).

Elementwise traffic, read from the graph. An unfused (eager) op reads its inputs and writes
its output in forward -- the sizes the graph records as the gradients its backward handles
(``Op.grad_bytes``: the output's gradient and the inputs') -- and in backward reads those
gradients' sources and its saved tensors and writes its input gradients: forward
``max(grad_bytes, 2 x saved)``, backward that plus the saved bytes. A fused runtime
(``Runtime.fused_elementwise``) runs each chain of elementwise ops between two matmuls or
attention kernels as one kernel: it moves only the chain's smallest op's worth (the chain's
input and output) in forward and twice that in backward.

fp8 linears (Transformer Engine, torchao float8) cast their input and, in backward, the
output's gradient to fp8, each with a transposed copy for the weight-gradient GEMM (read p,
write 2 bytes per element); eager casts also read the tensor once more for its amax. The
weight is cast once per micro-batch.

Context parallelism lowers each rank's s / cp tokens (what it stores); its attention queries
meet the keys of every rank (``kernels.attention_flops``), so the attention time is the
rank's share of the whole sequence's causal work, not (s / cp)^2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memcalc.graph.ops import AttentionWork, Block, Gemm, Op, OpGraph
from memcalc.profiles import GpuProfile
from memcalc.steptime.kernels import (
    attention_pass_seconds,
    gemm_pass_seconds,
    memory_seconds,
    runs_fp8,
)
from memcalc.strategies.recompute import ActivationPlan
from memcalc.strategies.runtime import Runtime


@dataclass(frozen=True)
class Pass:
    """Forward and backward seconds of some ops, by what bounds them."""

    matmul: tuple[float, float] = (0.0, 0.0)
    attention: tuple[float, float] = (0.0, 0.0)
    memory: tuple[float, float] = (0.0, 0.0)

    @property
    def forward(self) -> float:
        return self.matmul[0] + self.attention[0] + self.memory[0]

    @property
    def backward(self) -> float:
        return self.matmul[1] + self.attention[1] + self.memory[1]

    def __add__(self, other: Pass) -> Pass:
        return Pass(*(_add(a, b) for a, b in zip(self.parts, other.parts, strict=True)))

    def __mul__(self, times: float) -> Pass:
        return Pass(*((a * times, b * times) for a, b in self.parts))

    @property
    def parts(self) -> tuple[tuple[float, float], ...]:
        return (self.matmul, self.attention, self.memory)


def _add(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] + b[0], a[1] + b[1]


@dataclass(frozen=True)
class MicroBatch:
    """Kernel seconds of one micro-batch on one rank (no communication)."""

    total: Pass
    block_forward: tuple[float, ...]
    """Per block kind: one layer's forward (what full recompute replays)."""
    core_forward: tuple[float, ...]
    """Per block kind: its attention core's forward (what selective recompute replays)."""
    block_flops: tuple[int, ...]
    core_flops: tuple[int, ...]

    @property
    def forward_seconds(self) -> float:
        return self.total.forward

    @property
    def backward_seconds(self) -> float:
        return self.total.backward

    @property
    def seconds(self) -> float:
        return self.total.forward + self.total.backward

    def recompute_seconds(self, plan: ActivationPlan) -> float:
        """The forwards ``plan`` replays in backward: whole layers for the ones it recomputes
        fully, attention cores for the selective rest (their FLOPs at their kind's rate)."""
        full = plan.fully_recomputed or (0,) * len(self.block_forward)
        seconds = sum(n * t for n, t in zip(full, self.block_forward, strict=False))
        flops = sum(n * f for n, f in zip(full, self.block_flops, strict=False))
        rest = plan.extra_forward_flops - flops
        if rest > 0:
            rates = [t / f for t, f in zip(self.core_forward, self.core_flops, strict=True) if f]
            rates = rates or [
                t / f for t, f in zip(self.block_forward, self.block_flops, strict=True) if f
            ]
            seconds += rest * (sum(rates) / len(rates) if rates else 0.0)
        return seconds

    def seconds_per_recompute_flop(self) -> float:
        """The least seconds any recomputed forward FLOP costs here (a lower bound for
        ``plan``'s bounds)."""
        rates = [t / f for t, f in zip(self.block_forward, self.block_flops, strict=True) if f]
        rates += [t / f for t, f in zip(self.core_forward, self.core_flops, strict=True) if f]
        return min(rates, default=0.0)


def rank_forward_flops(graph: OpGraph, cp: int = 1) -> int:
    """Forward FLOPs one rank runs per micro-batch: the graph's, with each attention op's
    queries meeting the keys of all ``cp`` ranks (the lowering keeps only the rank's s / cp
    keys). Counted as the graph counts attention (every score, masked or not).

    >>> from memcalc.spec.presets import preset
    >>> from memcalc.spec.training import TrainingSetup
    >>> from memcalc.graph.lower import lower
    >>> from memcalc.spec.parallel import Parallelism
    >>> spec = preset("llama-3-8b")
    >>> g1 = lower(spec, TrainingSetup(seq=65536))
    >>> g8 = lower(spec, TrainingSetup(seq=65536, parallel=Parallelism(cp=8)))
    >>> def attn(g):
    ...     return g.over_layers(lambda b: sum(o.flops for o in b.ops if o.name == "attn.sdpa"))
    >>> attn(g1) == 64 * attn(g8)  # lowered at s / 8: (s / 8)^2 scores per rank
    True
    >>> rank_forward_flops(g8, 8) - g8.forward_flops == 7 * attn(g8)  # s / 8 x s per rank
    True
    """
    if cp == 1:
        return graph.forward_flops

    def attention(b: Block) -> int:
        return sum(op.flops for op in b.ops if isinstance(op.work, AttentionWork))

    return graph.forward_flops + (cp - 1) * graph.over_layers(attention)


_CACHE: dict[tuple[object, ...], tuple[OpGraph, MicroBatch]] = {}


def micro_batch(
    graph: OpGraph,
    gpu: GpuProfile,
    runtime: Runtime,
    *,
    cp: int = 1,
    flat_flops_per_s: float | None = None,
) -> MicroBatch:
    """The kernel time of one micro-batch of ``graph`` (one pipeline stage's) on ``gpu``;
    ``flat_flops_per_s``: the single-utilisation model instead (``--mfu``): every op's forward
    FLOPs at that rate, twice as many in backward, no kernel rules. Computed once
    per graph object (kept with the result, so its id is not reused)."""
    key = (id(graph), gpu, runtime, cp, flat_flops_per_s)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not graph:
        if len(_CACHE) > 4096:
            _CACHE.clear()
            _BY_PARTS.clear()
        # the pipeline stages of one lowering that hold the same block kinds, as many of each,
        # and the same prologue and epilogue have the same kernels
        parts = (graph.prologue, graph.epilogue, *graph.kinds)
        pkey = (tuple(id(x) for x in parts), graph.kind_counts, gpu, runtime, cp, flat_flops_per_s)
        same = _BY_PARTS.get(pkey)
        if same is None or any(a is not b for a, b in zip(same[0], parts, strict=True)):
            same = _BY_PARTS[pkey] = (
                parts,
                _micro_batch(graph, gpu, runtime, cp, flat_flops_per_s),
            )
        hit = _CACHE[key] = (graph, same[1])
    return hit[1]


_BY_PARTS: dict[tuple[object, ...], tuple[tuple[object, ...], MicroBatch]] = {}


def _micro_batch(
    graph: OpGraph, gpu: GpuProfile, runtime: Runtime, cp: int, flat: float | None
) -> MicroBatch:
    rate = _Rates(gpu, runtime, cp, flat)
    total = _scope_cached(rate, graph.prologue) + _scope_cached(rate, graph.epilogue)
    blocks, cores, bflops, cflops = [], [], [], []
    for blk, count in zip(graph.kinds, graph.kind_counts, strict=True):
        t, core = _block_cached(rate, blk)
        total = total + t * count
        blocks.append(t.forward)
        cores.append(core)
        bflops.append(blk.flops)
        cflops.append(blk.core_flops if blk.core_only_bytes else 0)
    return MicroBatch(total, tuple(blocks), tuple(cores), tuple(bflops), tuple(cflops))


_SCOPES: dict[tuple[object, ...], tuple[object, Pass, float]] = {}


def _block_cached(rate: _Rates, blk: Block) -> tuple[Pass, float]:
    """A block kind's pass and its attention core's forward, once per block object (the
    pipeline stages of one lowering share their block kinds)."""
    key = (id(blk), rate)
    hit = _SCOPES.get(key)
    if hit is None or hit[0] is not blk:
        if len(_SCOPES) > 8192:
            _SCOPES.clear()
        core = rate.scope([op for op in blk.ops if op.attention_core]).forward
        hit = _SCOPES[key] = (blk, rate.scope(blk.ops), core)
    return hit[1], hit[2]


def _scope_cached(rate: _Rates, ops: tuple[Op, ...]) -> Pass:
    key = (id(ops), rate)
    hit = _SCOPES.get(key)
    if hit is None or hit[0] is not ops:
        if len(_SCOPES) > 8192:
            _SCOPES.clear()
        hit = _SCOPES[key] = (ops, rate.scope(ops), 0.0)
    return hit[1]


@dataclass(frozen=True)
class _Rates:
    gpu: GpuProfile
    runtime: Runtime
    cp: int
    flat: float | None
    """The single-utilisation rate (FLOP/s), or None: the kernel rules."""

    def scope(self, ops: Sequence[Op]) -> Pass:
        """The ops of one scope (prologue, one layer, epilogue), in order: each matmul and
        attention kernel alone, the elementwise ops between them one by one (eager) or as one
        kernel per chain (fused)."""
        if self.flat is not None:
            return self._flat(ops)
        out = Pass()
        chain: list[Op] = []
        for op in ops:
            if op.work is None:
                chain.append(op)
                continue
            out = out + self._chain(chain) + self._work(op)
            chain = []
        return out + self._chain(chain)

    def _flat(self, ops: Sequence[Op]) -> Pass:
        """Every op's forward FLOPs (an attention op's queries against every rank's keys)
        at one rate, 2x in backward: 3 x forward FLOPs / (MFU x peak)."""
        assert self.flat is not None
        out = Pass()
        for op in ops:
            cp = self.cp if isinstance(op.work, AttentionWork) else 1
            t = op.flops * cp / self.flat
            if isinstance(op.work, Gemm):
                out = out + Pass(matmul=(t, 2 * t))
            elif isinstance(op.work, AttentionWork):
                out = out + Pass(attention=(t, 2 * t))
            else:
                out = out + Pass(memory=(t, 2 * t))
        return out

    def _work(self, op: Op) -> Pass:
        work = op.work
        if isinstance(work, Gemm):
            casts = self._fp8_casts(work) if runs_fp8(work.dtype, self.gpu) else (0.0, 0.0)
            return Pass(matmul=gemm_pass_seconds(work, self.gpu), memory=casts)
        assert isinstance(work, AttentionWork)
        return Pass(
            attention=attention_pass_seconds(work, self.gpu, self.runtime.attention, self.cp)
        )

    def _fp8_casts(self, g: Gemm) -> tuple[float, float]:
        """HBM seconds of an fp8 GEMM's casts: input (+ transposed copy) in forward, the
        output gradient's in backward, the weight's once per micro-batch (16-bit inputs)."""
        per_element = 2 + 2 + (0 if self.runtime.fused_elementwise else 2)  # read, 2 writes, amax
        fwd = g.groups * (g.m * g.k + g.k * g.n) * per_element
        bwd = g.groups * g.m * g.n * per_element if (g.input_grad or g.weight_grad) else 0
        return memory_seconds(fwd, self.gpu), memory_seconds(bwd, self.gpu)

    def _chain(self, chain: list[Op]) -> Pass:
        if not chain:
            return Pass()
        if self.runtime.fused_elementwise:
            sizes = [op.grad_bytes for op in chain if op.grad_bytes > 0]
            fwd = float(min(sizes, default=0))
            return Pass(memory=(memory_seconds(fwd, self.gpu), memory_seconds(2 * fwd, self.gpu)))
        fwd_bytes = bwd_bytes = 0.0
        for op in chain:
            saved = sum(s.nbytes for s in op.saves)
            moved = max(op.grad_bytes, 2 * saved)
            fwd_bytes += moved
            bwd_bytes += moved + saved
        return Pass(
            memory=(memory_seconds(fwd_bytes, self.gpu), memory_seconds(bwd_bytes, self.gpu))
        )
