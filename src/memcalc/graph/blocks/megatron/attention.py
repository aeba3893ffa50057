"""Megatron-core ``SelfAttention`` with TE: ``linear_qkv`` (norm fused), the q/k/v split, q/k
norms, rope (fused or unfused) and ``TEDotProductAttention`` by backend, then ``linear_proj``.

The q, k, v split (``megatron/core/transformer/attention.py``
``SelfAttention.get_query_key_value_tensors``): the QKV output is viewed as
``[s, b, groups, (heads/group + 2) x d]`` and split along the last dim (views); the query is
``reshape``d to ``[s, b, heads, d]`` -- a view with one head per group (MHA), a copy otherwise
(its group and head dims do not merge). Rope makes q and k new tensors, v stays a view.
"""

from __future__ import annotations

from memcalc.graph.blocks.megatron.te_modules import (
    NormLinear,
    layernorm_linear,
    row_parallel_linear,
    te_norm,
)
from memcalc.graph.ops import AttentionWork, Component, Gemm, Saved
from memcalc.graph.scope import Dims, Scope, matmul_flops
from memcalc.spec.megatron import AttentionBackend
from memcalc.spec.model import ModelSpec, Positions, QkNorm
from memcalc.spec.training import DType

ATTN = Component.attention
PREFIX = "self_attention"


def self_attention(
    sc: Scope,
    spec: ModelSpec,
    dims: Dims,
    x: Saved,
    backend: AttentionBackend,
    rope_fused: bool,
    norm_linear: NormLinear = layernorm_linear,
    softmax_dtype: DType | None = None,
) -> tuple[Saved, tuple[Saved, ...]]:
    """The attention sublayer on the layer input ``x``: returns ``linear_proj``'s output and
    what the core attention reads (q, k, v: what a checkpoint around it keeps)."""
    T = dims.T
    mixed = norm_linear(
        sc,
        f"{PREFIX}.linear_qkv",
        ATTN,
        x,
        dims,
        dims.q + 2 * dims.kv,
        norm=spec.norm,
        bias=spec.qkv_bias,
    )
    q = mixed if dims.kv == dims.q else Saved(f"{PREFIX}.query", T * dims.q, dims.p)
    k = v = mixed
    if spec.qk_norm is QkNorm.per_head:
        q = te_norm(
            sc,
            f"{PREFIX}.q_layernorm",
            _contiguous(q, "q", T * dims.q),
            T * dims.a,
            dims.d,
            spec.norm,
        )
        k = te_norm(
            sc,
            f"{PREFIX}.k_layernorm",
            _contiguous(k, "k", T * dims.kv),
            T * dims.g,
            dims.d,
            spec.norm,
        )
    if spec.positions is Positions.rotary:
        q, k = _rope(sc, spec, dims, rope_fused)
    core_inputs = tuple({t.name: t for t in (q, k, v)}.values())
    core = CORE[backend]
    if softmax_dtype is not None and core is unfused_attention:
        merged = unfused_attention(sc, dims, q, k, v, mixed, spec.attention_dropout, softmax_dtype)
    else:
        merged = core(sc, dims, q, k, v, mixed, spec.attention_dropout)
    out = row_parallel_linear(
        sc, f"{PREFIX}.linear_proj", ATTN, merged, dims, dims.q, bias=spec.out_bias
    )
    return out, core_inputs


def _contiguous(t: Saved, role: str, numel: int) -> Saved:
    """``t`` itself when it is its own storage, else the contiguous copy of its view."""
    return t if t.numel == numel else Saved(f"{PREFIX}.{role}_contiguous", numel, t.dtype)


def _rope(sc: Scope, spec: ModelSpec, dims: Dims, fused: bool) -> tuple[Saved, Saved]:
    """Rotary embedding on q and k (``models/common/embeddings/rope_utils.py``
    ``apply_rotary_pos_emb``). Fused (``apply_rope_fusion``, TE ``attention/rope.py``
    ``FusedRoPEFunc.forward``): ``save_for_backward(freqs, cu_seqlens, start_positions)`` --
    the model's one fp32 frequency table (the prologue's); unfused
    (``_apply_rotary_pos_emb_bshd``): ``t * cos_ + rotate_half(t) * sin_`` with
    ``cos_``/``sin_`` made per call in the activation dtype, which the two ``mul`` s save
    (s x rotary dims each, for q and for k). Either way q and k come out new."""
    T, p = dims.T, dims.p
    tables = (
        []
        if fused
        else [
            Saved(f"{PREFIX}.rope.{t}_{role}", dims.s * spec.rotary_dim, p)
            for role in ("q", "k")
            for t in ("cos", "sin")
        ]
    )
    sc.add(
        f"{PREFIX}.rope",
        ATTN,
        tables,
        6 * T * (dims.q + dims.kv),
        "TE FusedRoPEFunc: saves freqs (shared)"
        if fused
        else "Megatron unfused rope: saves cos_, sin_",
        grads=2 * T * (dims.q + dims.kv) * p.itemsize,
    )
    return (
        Saved(f"{PREFIX}.rope.q", T * dims.q, p),
        Saved(f"{PREFIX}.rope.k", T * dims.kv, p),
    )


def _flops(dims: Dims) -> int:
    return 2 * matmul_flops(dims.b * dims.a * dims.s, dims.d, dims.s) + 5 * _scores(dims)


def _work(sc: Scope, dims: Dims) -> AttentionWork:
    """The fused attention kernel for the step-time model: every head's causal s x s."""
    return AttentionWork(dims.b * dims.a, dims.s, dims.s, dims.d, dims.d, sc.autocast or dims.p)


def _scores(dims: Dims) -> int:
    return dims.b * dims.a * dims.s * dims.s


def fused_attention(
    sc: Scope, dims: Dims, q: Saved, k: Saved, v: Saved, mixed: Saved, dropout: float
) -> Saved:
    """TE ``FusedAttention`` (cuDNN; ``attention/dot_product_attention/backends.py``
    ``FusedAttnFunc.forward``): saves q, k, v, out and ``aux_ctx_tensors`` -- the fp32 softmax
    statistics (b x a x s) and an int64[2] RNG state (dropout runs inside the kernel). q, k, v
    as ``utils.py`` ``get_qkv_layout`` leaves them: three views of the QKV output are one
    recognised layout (``sbh3d``) and that storage is saved; any other mix is made contiguous
    (``x.contiguous()`` of every view). The output is returned as a view, so ``linear_proj``
    saves the same storage."""
    T, p = dims.T, dims.p
    if q is mixed and k is mixed and v is mixed:
        qkv = [mixed]
    else:
        qkv = [
            t if t is not mixed else Saved(f"{PREFIX}.{role}_contiguous", T * w, p)
            for t, role, w in ((q, "q", dims.q), (k, "k", dims.kv), (v, "v", dims.kv))
        ]
    out = Saved(f"{PREFIX}.core_attention.out", T * dims.q, p)
    stats = Saved(f"{PREFIX}.core_attention.softmax_stats", dims.b * dims.a * dims.s, DType.fp32)
    rng = Saved(f"{PREFIX}.core_attention.rng_state", 2, DType.int64)
    sc.add(
        f"{PREFIX}.core_attention",
        ATTN,
        [*{t.name: t for t in qkv}.values(), out, stats, rng],
        _flops(dims),
        "TE FusedAttnFunc.forward: saves q, k, v, out, softmax stats, rng_state",
        core=True,
        grads=2 * T * (dims.q + 2 * dims.kv) * p.itemsize,
        work=_work(sc, dims),
    )
    return out


def flash_attention(
    sc: Scope, dims: Dims, q: Saved, k: Saved, v: Saved, mixed: Saved, dropout: float
) -> Saved:
    """TE ``FlashAttention`` (``backends.py`` ``FlashAttention.forward``): sbhd q, k, v are
    copied to contiguous bshd (``x.transpose(0, 1).contiguous()``, or ``_PrepareQKVForFA``),
    which flash-attn saves with its bshd output and the fp32 ``softmax_lse`` (b x a x s) and
    RNG state; the output is returned as ``output.view(...).transpose(0, 1).contiguous()`` --
    a second copy, the one ``linear_proj`` saves."""
    T, p = dims.T, dims.p
    saves = [
        Saved(f"{PREFIX}.core_attention.{role}_bshd", T * w, p)
        for role, w in (("q", dims.q), ("k", dims.kv), ("v", dims.kv), ("out", dims.q))
    ]
    saves += [
        Saved(f"{PREFIX}.core_attention.softmax_lse", dims.b * dims.a * dims.s, DType.fp32),
        Saved(f"{PREFIX}.core_attention.rng_state", 2, DType.int64),
    ]
    sc.add(
        f"{PREFIX}.core_attention",
        ATTN,
        saves,
        _flops(dims),
        "TE FlashAttention.forward: saves bshd q, k, v, out, softmax_lse, rng_state",
        core=True,
        grads=2 * T * (dims.q + 2 * dims.kv) * p.itemsize,
        work=_work(sc, dims),
    )
    return Saved(f"{PREFIX}.core_attention.out_sbhd", T * dims.q, p)


def unfused_attention(
    sc: Scope,
    dims: Dims,
    q: Saved,
    k: Saved,
    v: Saved,
    mixed: Saved,
    dropout: float,
    softmax_dtype: DType | None = None,
) -> Saved:
    """TE ``UnfusedDotProductAttention.forward`` (Megatron's local ``DotProductAttention`` is
    the same ops): with fewer kv heads, k and v are ``repeat_interleave``d to every head (new
    tensors); ``baddbmm`` saves q and k (views: the QKV output stays alive through them);
    ``FusedScaleMaskSoftmax`` saves its output (the b x a x s x s probabilities in the
    activation dtype); dropout saves a bool mask and its output, which the ``bmm`` with v
    saves (5 bytes a score with dropout, 2 without). Without the fused softmax kernels (the
    local spec without apex: ``fusions/fused_softmax.py`` ``forward_torch_softmax``) and with
    ``--attention-softmax-in-fp32`` the scores are upcast and ``torch.softmax`` saves its fp32
    output (``softmax_dtype``), cast back before dropout; the context is
    ``permute(2, 0, 1, 3).contiguous()`` -- a new (T x a*d) tensor, saved by ``linear_proj``."""
    T, p, scores = dims.T, dims.p, _scores(dims)
    if dims.kv != dims.q:
        k = Saved(f"{PREFIX}.core_attention.key_repeated", T * dims.q, p)
        v = Saved(f"{PREFIX}.core_attention.value_repeated", T * dims.q, p)
    probs = [Saved(f"{PREFIX}.core_attention.softmax", scores, softmax_dtype or p)]
    if dropout > 0:
        probs += [
            Saved(f"{PREFIX}.core_attention.dropout_mask", scores, DType.bool),
            Saved(f"{PREFIX}.core_attention.dropped", scores, p),
        ]
    sc.add(
        f"{PREFIX}.core_attention",
        ATTN,
        [*{t.name: t for t in (q, k, v)}.values(), *probs],
        _flops(dims),
        "TE UnfusedDotProductAttention: saves q, k, softmax out, dropout mask + out, v",
        core=True,
        grads=2 * scores * p.itemsize + 2 * T * (dims.q + 2 * dims.kv) * p.itemsize,
        # baddbmm (q k^T) and bmm (probs v): 2 b a batched products of 2 s^2 d FLOPs each, as
        # GEMMs; the fused softmax between them is not rated (one op carries one kernel)
        work=Gemm(dims.s, dims.d, dims.s, sc.autocast or p, 2 * dims.b * dims.a, True, True),
    )
    return Saved(f"{PREFIX}.core_attention.context", T * dims.q, p)


CORE = {
    AttentionBackend.fused: fused_attention,
    AttentionBackend.flash: flash_attention,
    AttentionBackend.unfused: unfused_attention,
    AttentionBackend.local: unfused_attention,
    AttentionBackend.auto: fused_attention,
}
"""The core attention of each backend (``auto`` here only when no GPU resolved it: counting
parameters; ``estimate`` resolves it for the GPU first, ``spec.megatron.resolve_backend``)."""
