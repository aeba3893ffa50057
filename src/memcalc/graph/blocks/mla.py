"""Multi-head latent attention (DeepSeek-V2/V3; DeepSeek-AI 2024, sec. 2.1): low-rank q and kv
projections with their RMSNorms, rotary on decoupled dims only, keys and values expanded from
the latent, and the attention core (eager, a fused CUDA kernel, or CPU's math kernel).

Sources: HF ``DeepseekV3Attention.forward`` / ``expand_kv``, ``DeepseekV2Attention.forward``,
``apply_rotary_pos_emb_interleave`` / ``apply_rotary_emb`` (transformers 5.24);
``aten::_scaled_dot_product_attention_math`` and ``_scaled_dot_product_efficient_attention``.

Notation: a heads (keys and values have all of them), c = kv_lora_rank, r = qk_rope_head_dim,
n = qk_nope_head_dim, qk = n + r, dv = v_head_dim.
"""

from __future__ import annotations

from memcalc.graph.blocks.linear import linear
from memcalc.graph.blocks.norms import rms_norm
from memcalc.graph.ops import AttentionWork, Component, Gemm, Saved
from memcalc.graph.scope import Dims, Scope, dropout, matmul_flops, tensor, unique
from memcalc.spec.families.base import Implementation
from memcalc.spec.model import LayerType, ModelSpec, Norm
from memcalc.spec.training import Attention, DType

ATTN = Component.attention


def mla_attention(
    sc: Scope,
    spec: ModelSpec,
    impl: Implementation,
    dims: Dims,
    x: Saved,
    attention: Attention,
    layer_type: LayerType = LayerType.full,
) -> tuple[Saved, tuple[Saved, ...]]:
    """The MLA sublayer on its (normed) input ``x``: returns the output projection's output and
    the tensors its attention core reads (what a checkpoint around the core keeps). MLA has
    no sliding-window layers (``layer_type`` is taken for the same signature as
    ``self_attention``).

    Projections (each ``nn.Linear`` saves its input): ``q_proj`` (h -> a*qk), or ``q_a_proj``
    (h -> q_lora_rank), ``q_a_layernorm``, ``q_b_proj``; ``kv_a_proj_with_mqa`` (h -> c + r),
    ``kv_a_layernorm`` on its first c features (a slice: an fp32 model's norm saves the whole
    projection output, a 16-bit one its fp32 copy of the slice), ``kv_b_proj`` (c -> a*(n+dv)).
    Rotary touches q's last r dims and the one shared r-dim key: its muls save only the shared
    tables (V3: cos, sin; V2: a complex64 ``freqs_cis``, rotated through fp32 and cast back);
    ``cat(q_pass, q_rot)`` makes the query (a new a*qk storage, fp32 under autocast for V3
    whose cos/sin are fp32); ``expand_kv`` copies k_nope and the broadcast k_rot into a new key
    (a*qk) with ``new_empty`` + ``copy_``, and the value is a view of ``kv_b_proj``'s output.
    """
    mla = spec.mla
    assert mla is not None  # block.py lowers MLA only for specs with it
    T, h, p, a = dims.T, dims.h, dims.p, dims.a
    qk, n, r, dv, c = (
        mla.qk_head_dim,
        mla.qk_nope_head_dim,
        mla.qk_rope_head_dim,
        mla.v_head_dim,
        mla.kv_lora_rank,
    )
    names = impl.names
    variant = spec.norm if spec.norm is not Norm.layer_norm else Norm.rms_norm
    if mla.q_lora_rank is None:
        q = linear(sc, names["q"], ATTN, x, T, h, a * qk, p)
    else:
        rq = mla.q_lora_rank
        qa = linear(sc, names["q_a"], ATTN, x, T, h, rq, p, bias=spec.qkv_bias)
        qa = rms_norm(sc, names["q_a_norm"], qa, T, rq, variant)
        q = linear(sc, names["q_b"], ATTN, qa, T, rq, a * qk, p)
    ckv = linear(sc, names["kv_a"], ATTN, x, T, h, c + r, p, bias=spec.qkv_bias)
    kv_nope = Saved(f"{names['kv_a']}.kv_nope", T * c, ckv.dtype)
    kv_nope = rms_norm(sc, names["kv_a_norm"], kv_nope, T, c, variant, view_of=ckv)
    kv = linear(sc, names["kv_b"], ATTN, kv_nope, T, c, a * (n + dv), p)
    rotated = p if impl.complex_rotary else dims.r
    sc.add(
        names["rope"],
        ATTN,
        [],
        6 * T * (a + 1) * r,
        "aten.mul(q_rot, cos) ... (V2: complex mul by freqs_cis): saves the shared tables",
        grads=2 * T * (a + 1) * r * p.itemsize,
    )
    query_dtype = DType.fp32 if DType.fp32 in (q.dtype, rotated) else q.dtype
    query = Saved("attn.query", T * a * qk, query_dtype)  # cat(q_pass, q_rot)
    key = Saved("attn.key", T * a * qk, kv.dtype)  # new_empty + copy_(k_nope), copy_(k_rot)
    core = _Core(T, a, qk, dv, query, key, kv)
    if attention is Attention.eager:
        merged, inputs = _eager(sc, impl, dims, core, spec.attention_dropout)
    elif dims.cpu:
        merged, inputs = _math(sc, dims, core, spec.attention_dropout)
    else:
        merged, inputs = _fused(sc, dims, core), ()
    out = linear(
        sc, names["o"], ATTN, merged, T, a * dv, h, p, bias=spec.out_bias, out_tokens=dims.T_rep
    )
    return out, inputs


class _Core:
    """What the attention core of one MLA layer reads."""

    def __init__(  # noqa: PLR0913
        self,
        T: int,  # noqa: N803 -- the paper's name for tokens
        a: int,
        qk: int,
        dv: int,
        query: Saved,
        key: Saved,
        kv: Saved,
    ) -> None:
        self.T, self.a, self.qk, self.dv = T, a, qk, dv
        self.query, self.key = query, key
        self.value = kv
        """The value is a (b, a, s, dv) view of kv_b_proj's output: its storage."""


def _eager(
    sc: Scope, impl: Implementation, dims: Dims, core: _Core, dropout_p: float
) -> tuple[Saved, tuple[Saved, ...]]:
    """HF ``eager_attention_forward`` (keys and values have every head: ``repeat_kv`` is a
    no-op): ``matmul(q, k^T)`` saves q and k; ``softmax(dtype=fp32)`` its result, cast to q's
    dtype (a copy unless q is fp32); dropout a bool mask; ``matmul(probs, v)`` saves the
    probabilities and a contiguous copy of v (the strided view does not fold into bmm's
    batch); ``transpose(1, 2).contiguous()`` copies the output for ``o_proj``."""
    b, s, a, T = dims.b, dims.s, core.a, core.T
    scores = b * a * s * s
    p = dims.p.itemsize
    sc.add(
        "attn.qk_matmul",
        ATTN,
        unique([sc.matmul_input(core.query, "qk"), sc.matmul_input(core.key, "qk")]),
        matmul_flops(b * a * s, core.qk, s),
        "aten.bmm (matmul q @ k^T): saves q and k",
        core=True,
        grads=scores * p + 2 * T * a * core.qk * p,
        work=Gemm(s, core.qk, s, sc.autocast or dims.p, b * a),
    )
    soft_dtype = DType.fp32 if impl.softmax_in_fp32 else dims.p
    probs = Saved("attn.softmax", scores, soft_dtype)
    # backward: softmax's output and input gradients, beside the v gradient the AV matmul's
    # backward wrote, waiting for kv_b_proj's (see ``attention.attention_core``)
    sc.add(
        "attn.softmax",
        ATTN,
        [probs],
        5 * scores,
        "aten._softmax: saves result",
        True,
        grads=2 * scores * soft_dtype.itemsize + T * a * core.dv * p,
    )
    probs_to = core.query.dtype if impl.probs_to_query_dtype else dims.p
    if probs_to is not soft_dtype:
        probs = Saved("attn.probs", scores, probs_to)  # .to() copy, saves nothing
    probs = dropout(sc, "attn.attn_dropout", ATTN, probs, dropout_p, core=True)
    # v is a (b, a, s, dv) slice of the (b, s, a, n + dv) projection: bmm's reshape to
    # (b*a, s, dv) copies it, unless b == 1, when it is a view of the whole projection
    v = sc.matmul_input(core.value, "av")
    if dims.b > 1 or v is not core.value:
        v = Saved("attn.v_copy", T * a * core.dv, v.dtype)
    sc.add(
        "attn.av_matmul",
        ATTN,
        [sc.matmul_input(probs, "av"), v],
        matmul_flops(b * a * s, s, core.dv),
        "aten.bmm (matmul probs @ v): saves probs and v (reshaped: a copy)",
        core=True,
        grads=scores * p + 2 * T * a * core.dv * p,
        work=Gemm(s, s, core.dv, sc.autocast or dims.p, b * a),
    )
    return tensor("attn.merged", T, a * core.dv, dims.p), (core.query, core.key, core.value)


def _math(sc: Scope, dims: Dims, core: _Core, dropout_p: float) -> tuple[Saved, tuple[Saved, ...]]:
    """``aten::_scaled_dot_product_attention_math`` -- what CPU SDPA runs when q/k and v head
    dims differ -- computes in fp32 whatever the inputs: ``q.float() * sqrt(scale)`` and
    ``k.float().transpose * sqrt(scale)`` (new fp32 tensors the QK bmm saves), ``_safe_softmax``
    (saves its fp32 result, the s x s scores), dropout (CPU ``at::dropout``: a multiply by fp32
    noise, which it saves), the PV bmm (saves the probabilities and an fp32 contiguous v), then
    ``.to(dtype)`` and HF's ``transpose(1, 2).contiguous()``. A GPU runs a fused kernel instead
    (``_fused``). Still one SDPA call: selective recompute has no core to drop here."""
    b, s, a, T = dims.b, dims.s, core.a, core.T
    scores = b * a * s * s
    q_s = Saved("attn.q_scaled", T * a * core.qk, DType.fp32)
    k_s = Saved("attn.k_scaled", T * a * core.qk, DType.fp32)
    sc.add(
        "attn.qk_matmul",
        ATTN,
        [q_s, k_s],
        matmul_flops(b * a * s, core.qk, s),
        "aten.bmm (math SDPA, fp32): saves the scaled q and k",
        grads=scores * 4 + 2 * T * a * core.qk * 4,
        work=Gemm(s, core.qk, s, DType.fp32, b * a),
    )
    probs = Saved("attn.softmax", scores, DType.fp32)
    sc.add(
        "attn.softmax",
        ATTN,
        [probs],
        5 * scores,
        "aten._safe_softmax: saves result",
        grads=2 * scores * 4 + T * a * core.dv * 4,  # as eager's (``_eager``)
    )
    if dropout_p > 0:
        # at::dropout on CPU: input * bernoulli noise / (1 - p), the mul saves the fp32 noise
        sc.add(
            "attn.attn_dropout",
            ATTN,
            [Saved("attn.dropout_noise", scores, DType.fp32)],
            2 * scores,
            "aten.mul(attn, noise) (CPU at::dropout): saves the fp32 noise",
            grads=2 * scores * 4,
        )
        probs = Saved("attn.dropped", scores, DType.fp32)
    # v.float() of the strided slice is a contiguous copy; an fp32 v is the slice itself,
    # which bmm's reshape copies -- unless b == 1, when it is a view of the projection
    v = Saved("attn.v_fp32", T * a * core.dv, DType.fp32)
    if core.value.dtype is DType.fp32 and dims.b == 1:
        v = core.value
    sc.add(
        "attn.av_matmul",
        ATTN,
        [probs, v],
        matmul_flops(b * a * s, s, core.dv),
        "aten.bmm (math SDPA, fp32): saves probs and an fp32 v",
        grads=scores * 4 + 2 * T * a * core.dv * 4,
        work=Gemm(s, s, core.dv, DType.fp32, b * a),
    )
    return tensor("attn.merged", T, a * core.dv, dims.p), ()


def _fused(sc: Scope, dims: Dims, core: _Core) -> Saved:
    """A fused CUDA kernel (``_scaled_dot_product_efficient_attention``: flash needs equal head
    dims, mem-efficient does not): saves q, k, v (the view pins kv_b_proj's whole output), the
    output (laid out (b, s, a, dv), so ``o_proj`` saves the same storage) and the fp32
    logsumexp. Dropout inside the kernel keeps no mask. Not measured here (no GPU): inferred
    from the kernels' autograd formulas."""
    b, s, a, T = dims.b, dims.s, core.a, core.T
    out = tensor("attn.merged", T, a * core.dv, dims.p)
    lse = Saved("attn.logsumexp", b * a * s, DType.fp32)
    saved = [sc.matmul_input(t, "sdpa") for t in (core.query, core.key, core.value)]
    sc.add(
        "attn.sdpa",
        ATTN,
        unique(saved + [out, lse]),
        matmul_flops(b * a * s, core.qk, s) + matmul_flops(b * a * s, s, core.dv),
        "aten._scaled_dot_product_efficient_attention: saves q, k, v, out, logsumexp",
        grads=T * a * (2 * core.qk + core.dv) * dims.p.itemsize + out.nbytes,
        work=AttentionWork(b * a, s, s, core.qk, core.dv, sc.autocast or dims.p),
    )
    return out
