"""Ring attention's scratch on one context-parallel rank, as torch's own CP runs it.

torch 2.13 ``torch/distributed/tensor/experimental/_context_parallel/_attention.py``:
``context_parallel`` routes SDPA's fused kernels (flash / efficient / cuDNN and their backwards,
``_sdpa_handler``) to ``_templated_ring_attention`` and ``_templated_ring_attention_backward``.
What autograd saves for backward is what the fused kernel saves without CP (this rank's q, k,
v, out, logsumexp: the attention block's rule, for s / cp tokens); what CP adds are
transients -- tensors alive only while the ring runs -- and those are what this module counts.

The rules are a line-by-line transcription of those two functions onto a heap that frees a
buffer when nothing references it any more (CPython's refcounting, which is when the caching
allocator gets it back): each Python name, rotater attribute and in-flight collective that
holds a buffer is a reference. The transcription is checked byte for byte against torch's
functions on CPU (gloo, 2 and 4 ranks) by ``benchmarks/cp_ring_memory.py``.

Where the CPU and CUDA paths differ: ``F.logsigmoid`` (``aten.log_sigmoid_forward``) returns
an input-sized ``buffer`` on CPU and an empty one on CUDA (``aten/src/ATen/native/cuda/
LogSigmoid.cu`` ``log_sigmoid_forward_cuda``); ``device="cuda"`` drops it. The fused kernels'
own workspace (CUDA flash backward's fp32 ``dq_accum``, ``flash_api.cpp`` ``mha_bwd``) is
allocated inside the kernel, outside what these functions hold, and is not counted here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import Enum

from memcalc.graph.ops import Saved
from memcalc.graph.scope import Dims


class RotateMethod(str, Enum):
    """``_RotateMethod``: how the K/V shards travel round the ring."""

    allgather = "allgather"
    """``_AllGatherRotater``: one ``all_gather_single`` of every rank's K/V at the first step,
    kept until the attention returns (the full sequence's K and V on every rank)."""
    alltoall = "alltoall"
    """``_AllToAllRotater``: ``permute_tensor`` sends this step's K/V to the next rank; one
    received buffer per step."""


DEFAULT_ROTATE = RotateMethod.allgather
"""``_ContextParallelOptions.rotate_method``'s default (``set_rotate_method`` changes it)."""


@dataclass(frozen=True)
class RingShape:
    """One rank's attention inputs, as SDPA sees them: (batch, heads, seq, dim) with ``seq``
    this rank's s / cp tokens; k and v have ``kv_heads`` heads."""

    batch: int
    heads: int
    kv_heads: int
    seq: int
    qk_dim: int
    v_dim: int
    itemsize: int
    """Bytes per element of q, k, v (and the kernel's out and gradients)."""
    lse_heads: int | None = None
    """Heads of the kernel's logsumexp (fp32, batch x heads x seq); None: ``heads``."""

    def numel(self, heads: int, dim: int) -> int:
        return self.batch * heads * self.seq * dim

    @property
    def q(self) -> int:
        return self.numel(self.heads, self.qk_dim)

    @property
    def k(self) -> int:
        return self.numel(self.kv_heads, self.qk_dim)

    @property
    def v(self) -> int:
        return self.numel(self.kv_heads, self.v_dim)

    @property
    def o(self) -> int:
        return self.numel(self.heads, self.v_dim)

    @property
    def lse(self) -> int:
        return self.batch * (self.lse_heads or self.heads) * self.seq


@dataclass(frozen=True)
class RingScratch:
    """Bytes above the inputs while the ring runs, and what each function returns."""

    forward_peak: int
    """``_templated_ring_attention``: most bytes alive beyond q, k, v."""
    forward_returned: int
    """Its out and logsumexp (what autograd then saves)."""
    backward_peak: int
    """``_templated_ring_attention_backward``: most bytes beyond q, k, v, out, lse, grad_out."""
    backward_returned: int
    """Its grad q, k, v."""


class _Heap:
    """Buffers with the names referencing them; the live total and its peak."""

    def __init__(self, cpu: bool = False) -> None:
        self.cpu = cpu
        """CPU kernels (``log_sigmoid_forward``'s input-sized buffer)."""
        self.refs: dict[int, set[str]] = {}
        self.size: dict[int, int] = {}
        self.names: dict[str, int] = {}
        self.live = self.peak = 0
        self._next = 0

    def alloc(self, nbytes: int, name: str) -> int:
        self._next += 1
        buf = self._next
        self.size[buf], self.refs[buf] = nbytes, set()
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        self.bind(name, buf)
        return buf

    def bind(self, name: str, buf: int | None) -> None:
        """``name = buf`` (None: the name is dropped); the old referent may die."""
        old = self.names.pop(name, None)
        if buf is not None:
            self.names[name] = buf
            self.refs[buf].add(name)
        if old is not None:
            self.refs[old].discard(name)
            if not self.refs[old]:
                self.live -= self.size.pop(old)
                del self.refs[old]

    def get(self, name: str) -> int | None:
        return self.names.get(name)

    def drop(self, *names: str) -> None:
        for name in names:
            self.bind(name, None)

    def held(self, *names: str) -> int:
        return sum(self.size[b] for b in {self.names[n] for n in names if n in self.names})


class _Rotater:
    """``_AllToAllRotater`` / ``_AllGatherRotater`` on the heap. A functional collective's
    input stays referenced by its in-flight work until ``wait_tensor`` (``_maybe_wait`` in
    ``next_buffer``): measured, the ``torch.cat`` buffer outlives the Python name."""

    def __init__(self, heap: _Heap, method: RotateMethod, cp: int, tag: str) -> None:
        self.h, self.method, self.cp, self.tag = heap, method, cp, tag
        self.gathered = False

    def exchange(self, src: str, nbytes: int) -> None:
        if self.method is RotateMethod.alltoall:  # ft_c.permute_tensor: a new receive buffer
            self.h.bind(f"{self.tag}.work", self.h.get(src))
            self.h.alloc(nbytes, f"{self.tag}._buffer")
        elif not self.gathered:  # all_gather_single once, of every rank's buffer
            self.gathered = True
            self.h.bind(f"{self.tag}.work", self.h.get(src))
            self.h.alloc(self.cp * nbytes, f"{self.tag}._buffer")

    def next_buffer(self, name: str) -> None:
        """``name = rotater.next_buffer()`` (a view of the receive / gathered buffer)."""
        self.h.drop(f"{self.tag}.work")
        self.h.bind(name, self.h.get(f"{self.tag}._buffer"))


def _merge(h: _Heap, shape: RingShape, partial: bool, first: bool) -> None:
    """``_SDPAMerger.step`` / ``_merge_one`` of the block out and lse (bound as ``m.block_out``,
    ``m.block_lse``, fp32). ``partial``: only the second half of the queries (``_partial_update``
    writes it into a full-size ``torch.cat``)."""
    if first:
        h.bind("m._lse", h.get("m.block_lse"))
        h.bind("m._out", h.get("m.block_out"))
        return
    div = 2 if partial else 1
    lse_b, out_b = 4 * shape.lse // div, 4 * shape.o // div  # fp32 (convert_to_f32)
    # out = out - F.sigmoid(block_lse - lse) * (out - block_out)
    h.alloc(lse_b, "t1")
    h.alloc(lse_b, "t2")
    h.drop("t1")
    h.alloc(out_b, "t3")
    h.alloc(out_b, "t4")
    h.drop("t2", "t3")
    h.alloc(out_b, "m.out")
    h.drop("t4")
    # lse = lse - F.logsigmoid(lse - block_lse): log_sigmoid_forward's output and buffer
    h.alloc(lse_b, "t6")
    h.alloc(lse_b, "t7")
    h.alloc(lse_b if h.cpu else 0, "t8")
    h.drop("t8", "t6")
    h.alloc(lse_b, "m.lse")
    h.drop("t7")
    if partial:
        h.alloc(4 * shape.lse, "cat")
        h.bind("m._lse", h.get("cat"))
        h.drop("cat")
        h.alloc(4 * shape.o, "cat")
        h.bind("m._out", h.get("cat"))
        h.drop("cat", "m.lse", "m.out")
    else:
        h.bind("m._lse", h.get("m.lse"))
        h.bind("m._out", h.get("m.out"))
        h.drop("m.lse", "m.out")


def _step_kind(i: int, rank: int, cp: int, causal: bool, balance: bool) -> str:
    """``_is_causal_behavior`` and the (if, elif, else) of the templates: 'full' (all local
    q and k), 'half_kv' (the first chunk of the received k, v), 'half_q' (the second chunk of
    the queries, ``partial``) or 'skip' (no load balance, keys from a later rank)."""
    if not causal or i == 0:
        return "full"
    if not balance:
        return "full" if (rank - i) % cp < rank else "skip"
    return "half_kv" if i <= rank else "half_q"


def _forward(
    shape: RingShape,
    cp: int,
    rank: int,
    method: RotateMethod,
    causal: bool,
    balance: bool,
    cpu: bool,
) -> tuple[int, int]:
    """``_templated_ring_attention``: (peak, returned) bytes beyond q, k, v."""
    h = _Heap(cpu)
    p, convert = shape.itemsize, shape.itemsize != 4  # _cp_options.convert_to_f32
    kv = (shape.k + shape.v) * p
    rot = _Rotater(h, method, cp, "rot")
    for i in range(cp):
        if i > 0:
            rot.next_buffer("next_kv")
            h.bind("key", h.get("next_kv"))
        if i < cp - 1:
            h.alloc(kv, "next_kv")  # torch.cat([key.flatten(), value.flatten()])
            rot.exchange("next_kv", kv)
            h.drop("next_kv")  # next_kv = rotater.exchange_buffers(next_kv): None
        kind = _step_kind(i, rank, cp, causal, balance)
        if kind == "skip":
            continue
        div = 2 if kind == "half_q" else 1
        # q, k, v, partial = (query, key[.chunk(2)[0]], ...): the local k holds the K/V
        # buffer of this step until the next step's assignment (measured: an all-to-all
        # receive buffer lives one step longer than ``key`` alone would keep it)
        h.bind("k", h.get("key"))
        h.alloc(shape.o * p // div, "new_out")  # op(q, k, v): out, logsumexp
        h.alloc(4 * shape.lse // div, "new_lse")
        h.bind("out", h.get("new_out"))
        h.bind("logsumexp", h.get("new_lse"))
        h.drop("new_out", "new_lse")
        if convert:  # _SDPAMerger.step: out.to(torch.float32)
            h.alloc(4 * shape.o // div, "m.block_out")
        else:
            h.bind("m.block_out", h.get("out"))
        h.bind("m.block_lse", h.get("logsumexp"))
        _merge(h, shape, kind == "half_q", first=h.get("m._out") is None)
        h.drop("m.block_out", "m.block_lse")
    if convert:  # results(): self._out.to(self._out_dtype)
        h.alloc(shape.o * p, "result_out")
    else:
        h.bind("result_out", h.get("m._out"))
    h.bind("result_lse", h.get("m._lse"))
    return h.peak, h.held("result_out", "result_lse")


def _backward(
    shape: RingShape, cp: int, rank: int, method: RotateMethod, causal: bool, balance: bool
) -> tuple[int, int]:
    """``_templated_ring_attention_backward``: (peak, returned) bytes beyond its inputs. The
    K/V go round by ``method``; their gradients always by all-to-all (``dkv_rotater``)."""
    h = _Heap()
    p, convert = shape.itemsize, shape.itemsize != 4
    gk_n = 4 * (shape.k + shape.v)  # accum_dtype = float32 (convert_to_f32)
    kv = (shape.k + shape.v) * p
    h.alloc(4 * shape.q, "grad_query")  # torch.zeros_like(..., dtype=accum_dtype)
    h.alloc(4 * shape.k, "grad_key")
    h.alloc(4 * shape.v, "grad_value")
    kv_rot = _Rotater(h, method, cp, "kv")
    dkv_rot = _Rotater(h, RotateMethod.alltoall, cp, "dkv")
    for i in range(cp):
        if i > 0:
            kv_rot.next_buffer("buffer")
            h.bind("key", h.get("buffer"))
        if i != cp - 1:
            h.alloc(kv, "next_kv")  # torch.cat([key.flatten(), value.flatten()]); kept
            kv_rot.exchange("next_kv", kv)
        kind = _step_kind(i, rank, cp, causal, balance)
        qd = 2 if kind == "half_q" else 1
        kd = 2 if kind == "half_kv" else 1
        if kind != "skip":  # q, k, v, out_, dout, lse = (...): k views this step's K/V
            if kind == "half_q":  # logsumexp.chunk(2, dim=seq_dim)[1].contiguous(): a copy
                h.alloc(4 * shape.lse // 2, "lse_copy")
            h.bind("k", h.get("key"))
            h.bind("lse", h.get("lse_copy"))
            h.drop("lse_copy")
        if kind == "skip":  # torch.zeros_like(query / key / value, dtype=accum_dtype)
            sizes = (4 * shape.q, 4 * shape.k, 4 * shape.v)
        else:  # the kernel's grad_q, grad_k, grad_v, in the input dtype
            sizes = (shape.q * p // qd, shape.k * p // kd, shape.v * p // kd)
        for j, n in enumerate(sizes):
            h.alloc(n, f"new{j}")
        for j, name in enumerate(("grad_query_", "grad_key_", "grad_value_")):
            h.bind(name, h.get(f"new{j}"))
            h.drop(f"new{j}")
        if i > 0:
            dkv_rot.next_buffer("next_grad_kv")
            h.bind("grad_key", h.get("next_grad_kv"))
            h.bind("grad_value", h.get("next_grad_kv"))
            if i <= rank and balance:  # _partial_update(..., add=True): a torch.cat each
                h.alloc(4 * shape.k, "grad_key")
                h.alloc(4 * shape.v, "grad_value")
        h.alloc(gk_n, "next_grad_kv")  # torch.cat([grad_key.flatten(), grad_value.flatten()])
        dkv_rot.exchange("next_grad_kv", gk_n)
        if not (i <= rank or not balance):  # _partial_update(grad_query, ...): a torch.cat
            h.alloc(4 * shape.q, "grad_query")
    if convert:  # grad_query.to(query.dtype)
        h.alloc(shape.q * p, "grad_query")
    dkv_rot.next_buffer("recv")
    if convert:  # dkv_rotater.next_buffer().to(key.dtype)
        h.alloc(kv, "next_grad_kv")
    else:
        h.bind("next_grad_kv", h.get("recv"))
    return h.peak, h.held("grad_query", "next_grad_kv")


def ring_scratch(
    shape: RingShape,
    cp: int,
    rotate: RotateMethod | str = DEFAULT_ROTATE,
    causal: bool = True,
    rank: int = 0,
    balance: bool | None = None,
    device: str = "cuda",
) -> RingScratch:
    """Rank ``rank``'s ring-attention transients. ``balance``: ``_cp_options.
    enable_load_balance`` (None: on for causal attention, as ``context_parallel`` leaves it --
    the templates refuse it for non-causal); ``device``: "cpu" for the CPU comparison."""
    method = RotateMethod(rotate)
    balance = causal if balance is None else balance
    fwd = _forward(shape, cp, rank, method, causal, balance, device == "cpu")
    bwd = _backward(shape, cp, rank, method, causal, balance)
    return RingScratch(fwd[0], fwd[1], bwd[0], bwd[1])


def sample_ranks(cp: int) -> tuple[int, ...]:
    """The ranks whose ring is walked for the worst one: all of them up to 16; beyond, the
    first four, the middle one and the last three. A rank's steps are full, then ``rank``
    first-half-K/V steps, then second-half-q steps (``_is_causal_behavior``), and a step's
    peak depends only on its kind, the previous step's kind and whether it is the last
    (its exchange): these ranks meet every such pair (checked against all ranks in
    tests/test_ring_attention.py)."""
    if cp <= 16:
        return tuple(range(cp))
    return (0, 1, 2, 3, cp // 2, cp - 3, cp - 2, cp - 1)


@functools.lru_cache(maxsize=256)
def worst_rank_scratch(
    shape: RingShape,
    cp: int,
    rotate: RotateMethod | str = DEFAULT_ROTATE,
    causal: bool = True,
    device: str = "cuda",
    balance: bool | None = None,
) -> RingScratch:
    """The largest forward and backward scratch over the ``cp`` ranks (the estimate reports
    the most loaded rank)."""
    ranks = [
        ring_scratch(shape, cp, rotate, causal, r, balance=balance, device=device)
        for r in sample_ranks(cp)
    ]
    return RingScratch(
        max(r.forward_peak for r in ranks),
        max(r.forward_returned for r in ranks),
        max(r.backward_peak for r in ranks),
        max(r.backward_returned for r in ranks),
    )


def ring_scratch_of(dims: Dims, q: Saved, k: Saved, v: Saved) -> tuple[int, int]:
    """(forward, backward) scratch of the fused SDPA kernel reading ``q``, ``k``, ``v`` under
    torch's context parallelism, on the most loaded rank: the ring's peak beyond the inputs,
    less what the op already counts (its saved out and logsumexp; its ``grad_bytes``: the
    input gradients). (0, 0) without CP, or when the framework's CP is not torch's."""
    if dims.cp == 1 or dims.cp_rotate is None:
        return 0, 0
    rows = dims.b * dims.s * dims.d
    shape = RingShape(
        batch=dims.b,
        heads=q.numel // rows,
        kv_heads=k.numel // rows,
        seq=dims.s,
        qk_dim=dims.d,
        v_dim=v.numel * dims.d // k.numel if k.numel else dims.d,
        itemsize=q.dtype.itemsize,
    )
    # context_parallel load-balances when seq % (2 cp) == 0 (_load_balancer.py
    # _create_default_load_balancer), i.e. when this rank's seq / cp tokens are even
    balance = dims.s % 2 == 0
    device = "cpu" if dims.cpu else "cuda"
    worst = worst_rank_scratch(shape, dims.cp, dims.cp_rotate, True, device, balance)
    return (
        max(worst.forward_peak - worst.forward_returned, 0),
        max(worst.backward_peak - worst.backward_returned, 0),
    )
