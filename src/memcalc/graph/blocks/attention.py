"""Self-attention: the q/k/v projections, q/k norms, rotary embedding, the attention core
(eager or a fused kernel) and the output projection.

Sources: HF ``eager_attention_forward`` / ``sdpa_attention_forward`` and the families' modeling
files (transformers 5.x); ``aten._scaled_dot_product_flash_attention`` for the fused kernel.
"""

from __future__ import annotations

from dataclasses import replace

from memcalc.frameworks.features import Kernel, SdpaGqa
from memcalc.graph.blocks.linear import linear
from memcalc.graph.blocks.norms import norm
from memcalc.graph.blocks.ring_attention import ring_scratch_of
from memcalc.graph.ops import AttentionWork, Component, Gemm, Saved
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
    mask: Saved | None = None,
    window: int | None = None,
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
    seed and offset are replayed). A ``mask`` (the additive sliding-window mask SDPA made from
    HF's boolean one) is saved with them.
    Under autocast each matmul (and SDPA) saves 16-bit casts of its fp32 inputs;
    ``probs_to`` is the dtype the probabilities are cast to after softmax (GPT-2: v's dtype,
    Llama: q's -- fp32 under autocast, so its AV matmul casts them again).
    """
    if not (q.needs_grad or k.needs_grad or v.needs_grad):
        return _core_without_grad(sc, dims, prefix)
    if attention is Attention.eager:
        return _eager_attention(
            sc,
            dims,
            q,
            k,
            v,
            dropout_p,
            softmax_in_fp32=softmax_in_fp32,
            prefix=prefix,
            probs_to=probs_to,
            softcap=softcap,
        )
    if dims.cpu_dropout_sdpa and dropout_p > 0:
        return _cpu_math_sdpa(sc, dims, q, k, v, dropout_p, prefix=prefix)
    return _fused_attention(sc, dims, q, k, v, attention, prefix=prefix, mask=mask, window=window)


def _eager_attention(
    sc: Scope,
    dims: Dims,
    q: Saved,
    k: Saved,
    v: Saved,
    dropout_p: float,
    *,
    softmax_in_fp32: bool,
    prefix: str,
    probs_to: DType,
    softcap: float | None,
) -> Saved:
    """HF's ``eager_attention_forward`` (``attention_core``'s docstring): q @ k^T, the
    optional soft-cap, softmax, dropout and probs @ v, each op's saved tensors."""
    b, s, a, T = dims.b, dims.s, dims.a, dims.T
    # the eager core's two batched matmuls, b*a of them each (the causal mask is added to
    # full s x s scores: nothing is skipped)
    mm_dtype = sc.autocast or dims.p
    qk_gemm = Gemm(s, dims.d, s, mm_dtype, b * a, q.needs_grad, k.needs_grad)
    av_gemm = Gemm(s, s, dims.d, mm_dtype, b * a, True, v.needs_grad)
    # The gradient ``matmul(probs, v)``'s backward writes for v waits in the input buffer
    # of v's producer (``repeat_kv`` / the v projection, earlier in forward, so later in
    # backward: the engine runs nodes by decreasing sequence number, ``engine.cpp``
    # ``CompareNodeTaskTime``) through the backward of the dropout, softmax, soft-cap and
    # q @ k^T ops (measured: one T x a*d tensor more at ``_softmax_backward_data``).
    v_grad = T * dims.q * dims.p.itemsize
    _qk_matmul(sc, dims, q, k, qk_gemm, v_grad, prefix)
    if softcap is not None:
        _softcap(sc, dims, v_grad, prefix)
    probs = _softmax(
        sc, dims, v_grad, softmax_in_fp32=softmax_in_fp32, probs_to=probs_to, prefix=prefix
    )
    before = len(sc.ops)
    probs = dropout(sc, f"{prefix}.attn_dropout", ATTN, probs, dropout_p, core=True)
    if len(sc.ops) > before:
        sc.ops[-1] = replace(sc.ops[-1], grad_bytes=sc.ops[-1].grad_bytes + v_grad)
    _av_matmul(sc, dims, probs, v, av_gemm, prefix)
    return tensor(f"{prefix}.merged", T, dims.q, sc.autocast or dims.p)


def _qk_matmul(
    sc: Scope, dims: Dims, q: Saved, k: Saved, gemm: Gemm, v_grad: int, prefix: str
) -> None:
    """``torch.matmul(query, key_states.transpose(2, 3))`` (HF ``eager_attention_forward``):
    a bmm over the b*a heads that saves q and k."""
    scores = dims.b * dims.a * dims.s * dims.s
    p = dims.p.itemsize
    # matmul(q, k^T) saves q for k's gradient and k for q's (a tensor that needs no grad
    # -- k from a frozen k_proj in a frozen-base model's first layer -- skips its partner)
    qk_saves = [sc.matmul_input(q, "qk", "q")] if k.needs_grad else []
    qk_saves += [sc.matmul_input(k, "qk", "k")] if q.needs_grad else []
    sc.add(
        f"{prefix}.qk_matmul",
        ATTN,
        unique(qk_saves),
        matmul_flops(dims.b * dims.a * dims.s, dims.d, dims.s),
        "aten.bmm (matmul q @ k^T): saves q and k",
        core=True,
        grads=scores * p + 2 * dims.T * dims.q * p + v_grad,
        work=gemm,
    )


def _softcap(sc: Scope, dims: Dims, v_grad: int, prefix: str) -> None:
    """Gemma 2's soft-capping of the scores, ``tanh(w / cap) * cap``: tanh saves its result."""
    scores = dims.b * dims.a * dims.s * dims.s
    sc.add(
        f"{prefix}.softcap",
        ATTN,
        [Saved(f"{prefix}.softcap_tanh", scores, dims.p)],
        3 * scores,
        "aten.tanh (soft-capping): saves result",
        core=True,
        grads=2 * scores * dims.p.itemsize + v_grad,
    )


def _softmax(
    sc: Scope, dims: Dims, v_grad: int, *, softmax_in_fp32: bool, probs_to: DType, prefix: str
) -> Saved:
    """``softmax`` over the scores (fp32 where the family computes it so) saves its output;
    returns the probabilities as ``probs_to`` (a ``.to()`` copy, which saves nothing, when
    the dtypes differ)."""
    scores = dims.b * dims.a * dims.s * dims.s
    soft_dtype = DType.fp32 if softmax_in_fp32 else dims.p
    probs = Saved(f"{prefix}.softmax", scores, soft_dtype)
    # backward: softmax's output gradient and its input gradient (``_softmax_backward_data``
    # writes a new tensor). With a ``.to(p)`` copy after it, the p gradient of the copy is
    # freed once ``ToCopyBackward0`` has cast it (the engine drops a node's input buffer
    # after it runs, ``engine.cpp`` ``evaluate_function``): p + fp32 alive there, two
    # fp32 here -- the larger moment (measured: CPU tracker, Llama bf16 eager).
    soft_grads = 2 * scores * soft_dtype.itemsize + v_grad
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
    return probs


def _av_matmul(sc: Scope, dims: Dims, probs: Saved, v: Saved, gemm: Gemm, prefix: str) -> None:
    """``torch.matmul(attn_weights, value_states)``: a bmm that saves the (dropped-out)
    probabilities and v."""
    scores = dims.b * dims.a * dims.s * dims.s
    p = dims.p.itemsize
    sc.add(
        f"{prefix}.av_matmul",
        ATTN,
        [sc.matmul_input(probs, "av"), sc.matmul_input(v, "av")],
        matmul_flops(dims.b * dims.a * dims.s, dims.d, dims.s),
        "aten.bmm (matmul probs @ v): saves probs and v",
        core=True,
        grads=scores * p + 2 * dims.T * dims.q * p,
        work=gemm,
    )


def _core_without_grad(sc: Scope, dims: Dims, prefix: str) -> Saved:
    """The attention core of a layer whose q, k and v all need no grad (a frozen base's first
    layer with no trained module above its attention: MLP-only LoRA targets, no input
    grads): autograd records no node for an op none of whose inputs requires grad
    (``torch/csrc/autograd/function.h`` ``compute_requires_grad``; ``collect_next_edges``), so
    neither the kernel nor the eager matmuls and softmax save anything, and the merged output
    needs no grad either."""
    b, s, a, T = dims.b, dims.s, dims.a, dims.T
    sc.add(
        f"{prefix}.core_no_grad",
        ATTN,
        [],
        2 * matmul_flops(b * a * s, dims.d, s) + 5 * b * a * s * s,
        "attention on q, k, v that need no grad: no autograd node, nothing saved",
    )
    return Saved(f"{prefix}.merged", T * dims.q, sc.autocast or dims.p, needs_grad=False)


def _fused_attention(
    sc: Scope,
    dims: Dims,
    q: Saved,
    k: Saved,
    v: Saved,
    attention: Attention,
    *,
    prefix: str,
    mask: Saved | None,
    window: int | None = None,
) -> Saved:
    """A fused kernel (SDPA, flash-attention 2, FlexAttention): it saves q, k, v, its output
    and the fp32 logsumexp (b*a*s), and FlexAttention also its fp32 row maxima
    (``torch/_higher_order_ops/flex_attention.py`` ``FlexAttentionAutogradOp.forward``:
    ``save_values_for_backward(query, key, value, out, logsumexp, max_scores, *block_mask)``;
    the block mask is made once per step, see ``lower``). The output is laid out (b, s, a, d)
    (flex: ``_permute_strides`` follows q's), so the reshape to (b, s, a*d) is a view and the
    out-projection saves the same storage.

    >>> sc = Scope()
    >>> dims = Dims(b=1, s=128, h=64, a=4, d=16, g=2, m=128, V=256, p=DType.bf16,
    ...             r=DType.bf16, stat_dtype=DType.fp32)
    >>> q = Saved("q", 128 * 64, DType.bf16); kv = Saved("kv", 128 * 32, DType.bf16)
    >>> _ = _fused_attention(sc, dims, q, kv, kv, Attention.flex, prefix="attn", mask=None)
    >>> sum(t.nbytes for t in sc.ops[0].saves)  # q + k(=v) + out (bf16) + lse + max (fp32)
    45056
    """
    b, s, a, T, p = dims.b, dims.s, dims.a, dims.T, dims.p
    scores = b * a * s * s
    lse = Saved(f"{prefix}.logsumexp", b * a * s, DType.fp32)
    # (under autocast the kernel runs, and returns, 16 bits whatever the stream's dtype)
    out = tensor(f"{prefix}.merged", T, dims.q, sc.autocast or p)
    stats = [lse]
    if attention is Attention.flex:
        stats.append(Saved(f"{prefix}.max_scores", b * a * s, DType.fp32))
        kernel, source = Kernel.flex, "flex_attention: saves q, k, v, out, logsumexp, max_scores"
    else:
        kernel = Kernel.sdpa_cpu if dims.cpu else Kernel.sdpa
        source = "aten._scaled_dot_product_flash_attention: saves q, k, v, out, logsumexp" + (
            " (_efficient_attention: and the mask)" if mask is not None else ""
        )
    sc.add(
        f"{prefix}.{'flex' if attention is Attention.flex else 'sdpa'}",
        ATTN,
        unique(
            [sc.matmul_input(t, "sdpa", r) for t, r in zip((q, k, v), "qkv", strict=True)]
            + [out, *stats]
        )
        + ([mask] if mask is not None else []),
        2 * matmul_flops(b * a * s, dims.d, s) + 5 * scores,
        source,
        grads=T * (dims.q + 2 * dims.kv) * p.itemsize + out.nbytes,
        work=AttentionWork(b * a, s, s, dims.d, dims.d, sc.autocast or p, True, window),
        kernel=kernel.value,
        outputs=(out, *stats),
        # the kernel's inputs (autocast's 16-bit casts under amp) go round the ring
        scratch=(0, 0)
        if attention is Attention.flex
        else ring_scratch_of(
            dims, *(sc.matmul_input(t, "sdpa", r) for t, r in zip((q, k, v), "qkv", strict=True))
        ),
    )
    return out


def _cpu_math_sdpa(
    sc: Scope, dims: Dims, q: Saved, k: Saved, v: Saved, dropout_p: float, *, prefix: str
) -> Saved:
    """CPU SDPA with dropout: the CPU flash kernel refuses dropout (``sdp_utils_cpp.cpp``
    ``check_for_dropout``), so ``aten::_scaled_dot_product_attention_math``
    (``aten/src/ATen/native/transformers/attention.cpp``; also what
    ``torch/_decomp/decompositions.py`` lowers ``_scaled_dot_product_flash_attention_for_cpu``
    to) runs, composite, in fp32 whatever the inputs: ``q.float() * sqrt(scale)`` and
    ``k.float()`` (repeated to every head under ``enable_gqa``) ``.transpose * sqrt(scale)``
    -- new fp32 tensors the QK bmm saves; ``_safe_softmax`` saves its fp32 result (the s x s
    scores); dropout is CPU ``at::dropout``, a multiply by fp32 bernoulli noise, which it saves;
    the PV bmm saves the dropped fp32 probabilities and an fp32 v; then ``.to(dtype)`` and the
    model's ``transpose(1, 2).contiguous()`` copy for the out-projection. Verified op by op with
    a dispatch mode and saved-tensor hooks on torch 2.13 (CPU). A GPU runs a fused kernel that
    stores none of the s x s tensors; ``lower(device="cuda")`` never takes this path. Still one
    SDPA call: selective recompute has no core to drop here.

    v is saved as it is only when it is already fp32 (no autocast cast), torch does not repeat
    it (no GQA left to do), and bmm's reshape of it to (b*a, s, d) is a view: b == 1, or v is a
    contiguous head-major copy (HF ``repeat_kv``). Otherwise ``v.float()`` / the repeat / the
    reshape makes a new fp32 (T x a*d) tensor.
    """
    b, s, a, T = dims.b, dims.s, dims.a, dims.T
    scores = b * a * s * s
    fp32 = DType.fp32
    # composite ops record what each input's gradient needs: the QK bmm saves q for k's
    # gradient and k for q's; softmax and the dropout multiply only when q or k needs one;
    # the PV bmm the probabilities for v's gradient and v for theirs (the first layer of a
    # frozen base with only some projections adapted)
    qk = q.needs_grad or k.needs_grad
    q_s = Saved(f"{prefix}.q_scaled", T * dims.q, fp32)
    k_s = Saved(f"{prefix}.k_scaled", T * dims.q, fp32)
    sc.add(
        f"{prefix}.qk_matmul",
        ATTN,
        [t for t, other in ((q_s, k), (k_s, q)) if other.needs_grad],
        matmul_flops(b * a * s, dims.d, s),
        "aten.bmm (CPU math SDPA, fp32): saves the scaled q and k",
        grads=scores * 4 + 2 * T * dims.q * 4,
        work=Gemm(s, dims.d, s, fp32, b * a),
    )
    sc.add(
        f"{prefix}.softmax",
        ATTN,
        [Saved(f"{prefix}.softmax", scores, fp32)] if qk else [],
        5 * scores,
        "aten._safe_softmax: saves result",
        grads=2 * scores * 4,
    )
    sc.add(
        f"{prefix}.attn_dropout",
        ATTN,
        [Saved(f"{prefix}.dropout_noise", scores, fp32)] if qk else [],
        2 * scores,
        "aten.mul(attn, noise) (CPU at::dropout): saves the fp32 noise",
        grads=2 * scores * 4,
    )
    probs = Saved(f"{prefix}.dropped", scores, fp32)
    repeated = v.name.endswith("_repeated")
    torch_repeats = dims.kv != dims.q and not repeated
    as_is = v.dtype is fp32 and sc.autocast is None and not torch_repeats
    if not (as_is and (b == 1 or repeated)):
        v = Saved(f"{prefix}.v_fp32", T * dims.q, fp32, needs_grad=v.needs_grad)
    sc.add(
        f"{prefix}.av_matmul",
        ATTN,
        ([probs] if v.needs_grad else []) + ([v] if qk else []),
        matmul_flops(b * a * s, s, dims.d),
        "aten.bmm (CPU math SDPA, fp32): saves the dropped probs and an fp32 v",
        grads=scores * 4 + 2 * T * dims.q * 4,
        work=Gemm(s, s, dims.d, fp32, b * a),
    )
    return tensor(f"{prefix}.merged", T, dims.q, sc.autocast or dims.p)


SDPA_GQA_MAX_HEAD_DIM = 256
"""HF passes ``enable_gqa`` to SDPA only for head dims up to this (``use_gqa_in_sdpa``)."""


def sliding_mask(spec: ModelSpec, s: int, layer_type: LayerType) -> bool:
    """Whether HF builds a sliding-window mask for a layer of ``layer_type`` at sequence ``s``:
    for SDPA only when the window can cut something off (``_ignore_causal_mask_sdpa``:
    ``kv_length >= local_attention_size`` keeps the mask); a ``flash`` kernel takes the
    window as an argument and gets no mask at all."""
    window = spec.sliding_window
    return layer_type.is_sliding and window is not None and s >= window


def _sdpa_gqa(dims: Dims, mask: Saved | None) -> bool:
    """``use_gqa_in_sdpa``: SDPA reads the unrepeated k and v (``enable_gqa``) only without a
    mask and for head dims up to 256; otherwise HF's ``repeat_kv`` copies them."""
    return mask is None and dims.d <= SDPA_GQA_MAX_HEAD_DIM


def _qk_norm(
    sc: Scope,
    spec: ModelSpec,
    impl: Implementation,
    dims: Dims,
    name: str,
    x: Saved,
    heads: int,
) -> Saved:
    """Qwen3 / Gemma 3 ``q_norm``/``k_norm`` over each head's d features (rows = T*heads), or
    OLMo 2's over the whole projection (rows = T), run by the implementation's norm kernel."""
    variant = spec.norm if spec.norm is not Norm.layer_norm else Norm.rms_norm
    per_head = spec.qk_norm is QkNorm.per_head
    rows, width = (dims.T * heads, dims.d) if per_head else (dims.T, heads * dims.d)
    return norm(
        sc, name, x, rows, width, variant, dims.stat_dtype, kernel=impl.norm_kernel, cpu=dims.cpu
    )


def _project(
    sc: Scope, spec: ModelSpec, impl: Implementation, dims: Dims, x: Saved
) -> tuple[Saved, Saved, Saved]:
    """q, k and v from the normed input: three projections; or one fused projection whose
    views they are (HF ``qkv_proj``); or one whose output is split and copied into
    contiguous q, k and v (``impl.qkv_copies``: torchtitan 0.3 ``FusedQKVLinear.forward``,
    ``xq/xk/xv.reshape(...).contiguous()`` -- the copy's backward concatenates the three
    gradients into one buffer for the projection)."""
    T, h, p, names = dims.T, dims.h, dims.p, impl.names
    if not (spec.fused_qkv or impl.qkv_copies):
        return (
            linear(sc, names["q"], ATTN, x, T, h, dims.q, p, bias=spec.qkv_bias),
            linear(sc, names["k"], ATTN, x, T, h, dims.kv, p, bias=spec.qkv_bias),
            linear(sc, names["v"], ATTN, x, T, h, dims.kv, p, bias=spec.qkv_bias),
        )
    width = dims.q + 2 * dims.kv
    qkv = linear(sc, names["qkv"], ATTN, x, T, h, width, p, bias=spec.qkv_bias)
    if not impl.qkv_copies:
        # one storage: q, k and v are views of it (a cast of one -- autocast's, when the
        # projection returns fp32 -- copies the view's elements only)
        return (
            replace(qkv, view_numel=T * dims.q),
            replace(qkv, view_numel=T * dims.kv),
            replace(qkv, view_numel=T * dims.kv),
        )
    sc.add(
        "attn.qkv_split",
        ATTN,
        [],
        0,
        "aten.split + contiguous (copies): saves nothing",
        grads=2 * T * width * p.itemsize,
    )
    return (
        Saved("attn.q", T * dims.q, p, needs_grad=qkv.needs_grad),
        Saved("attn.k", T * dims.kv, p, needs_grad=qkv.needs_grad),
        Saved("attn.v", T * dims.kv, p, needs_grad=qkv.needs_grad),
    )


def _rotate(
    sc: Scope, spec: ModelSpec, impl: Implementation, dims: Dims, q: Saved, k: Saved
) -> tuple[Saved, Saved]:
    """RoPE on q and k. HF ``apply_rotary_pos_emb``: q*cos + rotate_half(q)*sin -- mul saves
    cos and sin (no grad), made once by the model and counted in the prologue; q_embed and
    k_embed are new tensors (partial rotary: cat of the rotated and the passed-through dims,
    new too). Their dtype: q (p) times the tables (stream dtype; fp32 under autocast, or always
    when the rotary module keeps them fp32), unless RoPE casts back to q's dtype.
    ``impl.rotary_gathered`` (torchtitan with per-sequence positions, ``_reshape_for_broadcast``
    ``torch.gather``): each layer's multiplies save the layer's own gathered table, (b, s, 1,
    d/2) complex64 or (b, s, 1, 2d) fp32 cos | sin."""
    T, p, name = dims.T, dims.p, impl.names["rope"]
    tables = DType.fp32 if impl.rotary_tables_fp32 else dims.r
    rotated = p if impl.rotary_keeps_q_dtype or tables is p else DType.fp32
    gathered = []
    if impl.rotary_gathered:
        width = dims.d if impl.complex_rotary else 2 * dims.d  # fp32 elements per token
        gathered = [Saved(f"{name}.gathered_table", T * width, DType.fp32)]
    sc.add(
        name,
        ATTN,
        gathered,
        6 * T * (dims.q + dims.kv),
        "aten.mul(q, cos): saves cos (and sin)",
        grads=2 * T * (dims.q + dims.kv) * p.itemsize,
    )
    return (
        Saved(f"{name}.q_embed", T * dims.q, rotated, needs_grad=q.needs_grad),
        Saved(f"{name}.k_embed", T * dims.kv, rotated, needs_grad=k.needs_grad),
    )


def _kernel_kv(
    impl: Implementation,
    dims: Dims,
    attention: Attention,
    q: Saved,
    k: Saved,
    v: Saved,
    mask: Saved | None,
) -> tuple[Saved, Saved]:
    """k and v as the attention kernel reads them: repeated to every head where SDPA gets no
    ``enable_gqa`` (``impl.sdpa_gqa``) or eager attention runs ``repeat_kv``; a contiguous copy
    of a strided v for eager's matmul."""
    T = dims.T
    if attention is not Attention.eager:
        rule = impl.sdpa_gqa
        repeat = (rule is SdpaGqa.repeat_kv and attention is not Attention.flex) or (
            rule is SdpaGqa.hf and attention is Attention.sdpa and not _sdpa_gqa(dims, mask)
        )
        if dims.kv != dims.q and repeat:
            # sdpa_attention_forward: without enable_gqa, repeat_kv copies k and v to all heads
            k = Saved("attn.k_repeated", T * dims.q, k.dtype, needs_grad=k.needs_grad)
            v = Saved("attn.v_repeated", T * dims.q, v.dtype, needs_grad=v.needs_grad)
        return k, v
    if dims.kv == dims.q and v.name != q.name and dims.b > 1 and v.numel != T * dims.kv:
        # v is a strided view of the fused qkv output (q and k were rebuilt by RoPE):
        # matmul(probs, v) folds (b, a) with a reshape, which copies it -- the buffer
        # itself is not kept (with b == 1 the fold is a view and the buffer is saved)
        v = Saved("attn.v_contiguous", T * dims.kv, v.dtype, needs_grad=v.needs_grad)
    if dims.kv != dims.q:
        if dims.g == 1 and dims.b == 1:
            # repeat_kv's reshape of the expanded tensor is a view: no copy, but an op that
            # casts it (autocast) materialises all heads.
            k = replace(k, view_numel=T * dims.q)
            v = replace(v, view_numel=T * dims.q)
        else:
            # repeat_kv: expand + reshape copies k and v to all heads for the eager matmuls.
            k = Saved("attn.k_repeated", T * dims.q, k.dtype, needs_grad=k.needs_grad)
            v = Saved("attn.v_repeated", T * dims.q, v.dtype, needs_grad=v.needs_grad)
    return k, v


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

    A sliding-window layer under SDPA whose window does not cover the sequence gets HF's
    boolean (b, 1, s, s) mask (``masking_utils.create_sliding_window_causal_mask``; one (s, s)
    storage expanded over the batch, made once for all layers and not saved: a checkpoint's
    extra input, see ``lower``); with a mask HF repeats k and v to every head
    (``use_gqa_in_sdpa`` needs no mask) and SDPA saves its own additive copy of the mask.
    ``flash`` (HF flash_attention_2) takes the window and GQA in the kernel: no mask, no copy.
    """
    T, h, p = dims.T, dims.h, dims.p
    names = impl.names
    q, k, v = _project(sc, spec, impl, dims, x)
    if spec.qk_norm is not QkNorm.none:
        q = _qk_norm(sc, spec, impl, dims, names["q_norm"], q, dims.a)
        k = _qk_norm(sc, spec, impl, dims, names["k_norm"], k, dims.g)
    if spec.positions is Positions.rotary:
        q, k = _rotate(sc, spec, impl, dims, q, k)
    core_inputs = tuple(unique([q, k, v]))
    mask = None
    if attention is Attention.sdpa and sliding_mask(spec, dims.s, layer_type):
        # SDPA converts the boolean mask to an additive one in q's dtype, (b, 1, s, s)
        # (convert_boolean_attn_mask: zeros_like of the batch-expanded mask, then
        # masked_fill_), and the kernel saves it: a new tensor in every layer. (CUDA's
        # memory-efficient kernel, which takes masks, pads its last dim to a multiple of 16.)
        mask = Saved("attn.sdpa_mask", dims.b * dims.s * dims.s, p)
    k, v = _kernel_kv(impl, dims, attention, q, k, v, mask)
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
        mask=mask,
        window=spec.sliding_window if layer_type.is_sliding else None,
    )
    if (
        attention is not Attention.eager
        and impl.rotary_concat
        and spec.positions is Positions.rotary
    ):
        # the kernel's output follows q's head-major layout: the (b, s, a*d) view the output
        # projection needs is a copy
        merged = Saved(
            "attn.merged_contiguous", T * dims.q, merged.dtype, needs_grad=merged.needs_grad
        )
    out = linear(
        sc, names["o"], ATTN, merged, T, dims.q, h, p, bias=spec.out_bias, out_tokens=dims.T_rep
    )
    return out, core_inputs
