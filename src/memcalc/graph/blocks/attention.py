"""Self-attention: the q/k/v projections, q/k norms, rotary embedding, the attention core
(eager or a fused kernel) and the output projection.

Sources: HF ``eager_attention_forward`` / ``sdpa_attention_forward`` and the families' modeling
files (transformers 5.x); ``aten._scaled_dot_product_flash_attention`` for the fused kernel.
"""

from __future__ import annotations

from dataclasses import replace

from memcalc.graph.blocks.linear import linear
from memcalc.graph.blocks.norms import rms_norm
from memcalc.graph.ops import Component, Saved
from memcalc.graph.scope import Dims, Scope, dropout, matmul_flops, tensor, unique
from memcalc.spec.families.base import Implementation
from memcalc.spec.model import LayerType, ModelSpec, Norm, Positions, QkNorm
from memcalc.spec.training import Attention, DType

ATTN = Component.attention


def attention_core(
    sc: Scope,
    dims: Dims,
    q: Saved,
    k: Saved,
    v: Saved,
    dropout_p: float,
    attention: Attention,
    *,
    softmax_in_fp32: bool,
    prefix: str,
    probs_to: DType,
    softcap: float | None = None,
) -> Saved:
    """Attention from q, k, v to the merged (T x a*d) output that the out-projection saves.

    Eager (HF ``eager_attention_forward``): ``matmul(q, k^T)`` saves q and k; soft-capping
    (Gemma 2: ``tanh(w / cap) * cap``) saves the tanh result; ``softmax`` saves its output
    (b*a*s*s; Llama computes it in fp32 and keeps a p copy for ``matmul``); dropout saves a
    bool mask and the dropped probabilities feed ``matmul(probs, v)``, which saves both;
    ``transpose(1, 2).reshape`` copies to a contiguous T x a*d tensor.
    SDPA / flash (``aten._scaled_dot_product_flash_attention``): saves q, k, v, the output and
    the fp32 logsumexp (b*a*s); the output is laid out (b, s, a, d), so the reshape is a view and
    the out-projection saves the same storage. Dropout inside the kernel keeps no mask (Philox
    seed and offset are replayed).
    Under autocast each matmul (and SDPA) saves 16-bit casts of its fp32 inputs;
    ``probs_to`` is the dtype the probabilities are cast to after softmax (GPT-2: v's dtype,
    Llama: q's -- fp32 under autocast, so its AV matmul casts them again).
    """
    b, s, a, T = dims.b, dims.s, dims.a, dims.T
    scores = b * a * s * s
    qk_flops = matmul_flops(b * a * s, dims.d, s)
    p = dims.p.itemsize
    if attention is Attention.eager:
        # matmul(q, k^T) saves q for k's gradient and k for q's (a tensor that needs no grad
        # -- k from a frozen k_proj in a frozen-base model's first layer -- skips its partner)
        qk_saves = [sc.matmul_input(q, "qk")] if k.needs_grad else []
        qk_saves += [sc.matmul_input(k, "qk")] if q.needs_grad else []
        sc.add(
            f"{prefix}.qk_matmul",
            ATTN,
            unique(qk_saves),
            qk_flops,
            "aten.bmm (matmul q @ k^T): saves q and k",
            core=True,
            grads=scores * p + 2 * T * dims.q * p,
        )
        if softcap is not None:
            sc.add(
                f"{prefix}.softcap",
                ATTN,
                [Saved(f"{prefix}.softcap_tanh", scores, dims.p)],
                3 * scores,
                "aten.tanh (soft-capping): saves result",
                core=True,
                grads=2 * scores * p,
            )
        soft_dtype = DType.fp32 if softmax_in_fp32 else dims.p
        probs = Saved(f"{prefix}.softmax", scores, soft_dtype)
        # backward: the p gradient of the .to(p) copy, its fp32 cast, softmax's input gradient
        soft_grads = 2 * scores * soft_dtype.itemsize + (
            scores * p if soft_dtype is not probs_to else 0
        )
        sc.add(
            f"{prefix}.softmax",
            ATTN,
            [probs],
            5 * scores,
            "aten._softmax: saves result",
            True,
            grads=soft_grads,
        )
        if soft_dtype is not probs_to:
            probs = Saved(f"{prefix}.probs", scores, probs_to)  # .to() copy, saves nothing
        probs = dropout(sc, f"{prefix}.attn_dropout", ATTN, probs, dropout_p, core=True)
        sc.add(
            f"{prefix}.av_matmul",
            ATTN,
            [sc.matmul_input(probs, "av"), sc.matmul_input(v, "av")],
            qk_flops,
            "aten.bmm (matmul probs @ v): saves probs and v",
            core=True,
            grads=scores * p + 2 * T * dims.q * p,
        )
        return tensor(f"{prefix}.merged", T, dims.q, dims.p)
    lse = Saved(f"{prefix}.logsumexp", b * a * s, DType.fp32)
    out = tensor(f"{prefix}.merged", T, dims.q, dims.p)
    sc.add(
        f"{prefix}.sdpa",
        ATTN,
        unique([sc.matmul_input(t, "sdpa") for t in (q, k, v)] + [out, lse]),
        2 * qk_flops + 5 * scores,
        "aten._scaled_dot_product_flash_attention: saves q, k, v, out, logsumexp",
        grads=T * (dims.q + 2 * dims.kv) * p + out.nbytes,
    )
    return out


def _qk_norm(sc: Scope, spec: ModelSpec, dims: Dims, name: str, x: Saved, heads: int) -> Saved:
    """Qwen3 / Gemma 3 ``q_norm``/``k_norm`` over each head's d features (rows = T*heads), or
    OLMo 2's over the whole projection (rows = T)."""
    variant = spec.norm if spec.norm is not Norm.layer_norm else Norm.rms_norm
    if spec.qk_norm is QkNorm.per_head:
        return rms_norm(sc, name, x, dims.T * heads, dims.d, variant)
    return rms_norm(sc, name, x, dims.T, heads * dims.d, variant)


def self_attention(
    sc: Scope,
    spec: ModelSpec,
    impl: Implementation,
    dims: Dims,
    x: Saved,
    attention: Attention,
    layer_type: LayerType = LayerType.full,
) -> tuple[Saved, tuple[Saved, ...]]:
    """The attention sublayer on its (normed) input ``x``: returns the output projection's
    output and the tensors the attention core reads (what a checkpoint around it keeps).

    A sliding-window layer under SDPA whose window is shorter than the sequence gets HF's
    boolean (b, 1, s, s) mask (``masking_utils.create_sliding_window_causal_mask``), made once
    for all layers; with a mask HF repeats k and v to every head (``use_gqa_in_sdpa`` needs
    no mask) and the kernel saves the mask with q, k and v.
    """
    T, h, p = dims.T, dims.h, dims.p
    names = impl.names
    if spec.fused_qkv:
        # one projection; q, k and v are views of its output storage
        qkv = linear(sc, names["qkv"], ATTN, x, T, h, dims.q + 2 * dims.kv, p, bias=spec.qkv_bias)
        q = k = v = qkv
    else:
        q = linear(sc, names["q"], ATTN, x, T, h, dims.q, p, bias=spec.qkv_bias)
        k = linear(sc, names["k"], ATTN, x, T, h, dims.kv, p, bias=spec.qkv_bias)
        v = linear(sc, names["v"], ATTN, x, T, h, dims.kv, p, bias=spec.qkv_bias)
    if spec.qk_norm is not QkNorm.none:
        q = _qk_norm(sc, spec, dims, names["q_norm"], q, dims.a)
        k = _qk_norm(sc, spec, dims, names["k_norm"], k, dims.g)
    rotated = spec.positions is Positions.rotary
    if rotated:
        # apply_rotary_pos_emb: q*cos + rotate_half(q)*sin -- mul saves cos and sin (no grad),
        # shared by every layer and counted once in the prologue; q_embed and k_embed are new
        # tensors. q (p) * cos (stream dtype): under autocast the rotated q and k are fp32.
        sc.add(
            names["rope"],
            ATTN,
            [],
            6 * T * (dims.q + dims.kv),
            "aten.mul(q, cos): saves cos (and sin)",
            grads=2 * T * (dims.q + dims.kv) * p.itemsize,
        )
        q = Saved(f"{names['rope']}.q_embed", T * dims.q, dims.r, needs_grad=q.needs_grad)
        k = Saved(f"{names['rope']}.k_embed", T * dims.kv, dims.r, needs_grad=k.needs_grad)
    core_inputs = tuple(unique([q, k, v]))
    masked = (
        attention is not Attention.eager
        and layer_type.is_sliding
        and spec.sliding_window is not None
        and spec.sliding_window < dims.s
    )
    if masked:
        sc.share(Saved("sliding_window_mask", dims.b * dims.s * dims.s, DType.bool))
        if dims.kv != dims.q:
            k = Saved("attn.k_repeated", T * dims.q, k.dtype, needs_grad=k.needs_grad)
            v = Saved("attn.v_repeated", T * dims.q, v.dtype, needs_grad=v.needs_grad)
    if attention is Attention.eager and dims.kv != dims.q:
        if dims.g == 1 and dims.b == 1:
            # repeat_kv's reshape of the expanded tensor is a view: no copy, but an op that
            # casts it (autocast) materialises all heads.
            k = replace(k, view_numel=T * dims.q)
            v = replace(v, view_numel=T * dims.q)
        else:
            # repeat_kv: expand + reshape copies k and v to all heads for the eager matmuls.
            k = Saved("attn.k_repeated", T * dims.q, k.dtype, needs_grad=k.needs_grad)
            v = Saved("attn.v_repeated", T * dims.q, v.dtype, needs_grad=v.needs_grad)
    merged = attention_core(
        sc,
        dims,
        q,
        k,
        v,
        spec.attention_dropout,
        attention,
        # eager adds HF's causal mask in the stream dtype: under autocast that promotes bf16
        # scores to fp32 before a softmax written without dtype= (GPT-2).
        softmax_in_fp32=impl.softmax_in_fp32 or dims.r is DType.fp32,
        prefix="attn",
        probs_to=q.dtype if impl.probs_to_query_dtype else p,
        softcap=spec.attention_softcap,
    )
    out = linear(
        sc, names["o"], ATTN, merged, T, dims.q, h, p, bias=spec.out_bias, out_tokens=dims.T_rep
    )
    return out, core_inputs
