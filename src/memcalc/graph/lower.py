"""Lower a ModelSpec + TrainingSetup into the op graph of one training step.

Each helper below mirrors one torch op (or one short Python sequence of ops in the Hugging Face
implementation) and declares exactly the tensors autograd saves for it, with their dtype.
The sources are the autograd formulas in PyTorch's ``tools/autograd/derivatives.yaml`` and the
HF modeling files (``modeling_gpt2.py``, ``modeling_llama.py``, transformers 5.x); the GPT-2
lowering reproduces the reference measurements in ``shared/reference`` to the byte.

Notation: b batch, s sequence, T = b*s tokens, h hidden, a heads, d head dim, m MLP width,
V vocabulary, p the activation dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from memcalc.graph.layout import Layout
from memcalc.graph.ops import Block, Component, Op, OpGraph, Saved
from memcalc.params import count_params
from memcalc.spec.model import Activation, ModelSpec
from memcalc.spec.training import Attention, DType, Loss, Precision, TrainingSetup

ATTN, MLP, NORM, OUT = Component.attention, Component.mlp, Component.norm, Component.output


@dataclass
class _Scope:
    """Collects the ops of one scope (prologue, a block, epilogue)."""

    fp8_linears: bool = False
    autocast: DType | None = None
    """Under torch.autocast: the 16-bit dtype matmuls cast their inputs and weights to."""
    ops: list[Op] = field(default_factory=list)

    def matmul_input(self, x: Saved, op: str) -> Saved:
        """What a matmul saves of its activation input: ``x`` itself, or under autocast a
        16-bit cast of an fp32 ``x`` -- made by each matmul anew (autocast caches only casts
        of leaf tensors, the weights), so three projections of one input save three copies."""
        if self.autocast is None or x.dtype is self.autocast:
            return x
        return Saved(f"{op}.{x.name}.cast", x.view_numel or x.numel, self.autocast)

    def add(
        self,
        name: str,
        component: Component,
        saves: list[Saved],
        flops: int,
        source: str,
        core: bool = False,
        grads: int = 0,
        params: int = 0,
    ) -> None:
        """Append an op; ``grads`` = bytes of its output gradient + its input gradients,
        ``params`` = elements of the weights whose gradients its backward writes."""
        self.ops.append(Op(name, component, tuple(saves), flops, source, core, grads, params))


WEIGHT_CAST = "weight_cast"
"""Name suffix of an autocast weight copy (counted by ``Block.weight_cast_bytes``)."""


def matmul_flops(m: int, k: int, n: int) -> int:
    """2*m*k*n: one multiply and one add per term (Kaplan et al. 2020, sec. 2.1)."""
    return 2 * m * k * n


def layer_norm(sc: _Scope, prefix: str, x: Saved, rows: int, stat_dtype: DType) -> Saved:
    """``aten.native_layer_norm`` saves its input, mean and rstd (one per row, fp32 on CUDA).

    Returns the output (which the next op may save).
    """
    sc.add(
        f"{prefix}.layer_norm",
        NORM,
        [x, Saved(f"{prefix}.mean", rows, stat_dtype), Saved(f"{prefix}.rstd", rows, stat_dtype)],
        8 * x.numel,
        "aten.native_layer_norm: saves input, mean, rstd",
        grads=2 * x.nbytes,
        params=2 * (x.numel // rows),  # weight and bias
    )
    return Saved(f"{prefix}.out", x.numel, x.dtype)


def _t(name: str, rows: int, cols: int, dtype: DType) -> Saved:
    """A (rows x cols) tensor."""
    return Saved(name, rows * cols, dtype)


def rms_norm(sc: _Scope, prefix: str, x: Saved, tokens: int, width: int) -> Saved:
    """HF LlamaRMSNorm: ``x.to(fp32); x * rsqrt(x.pow(2).mean(-1) + eps); w * y.to(p)``.

    Saved (derivatives.yaml): ``pow`` saves its fp32 input (a copy when p != fp32), ``rsqrt``
    its output (one fp32 per row), ``mul(x, r)`` both (already saved), ``mul(w, y)`` saves y in
    p -- when p is fp32, y is the product itself (``.to`` is a no-op); otherwise its p copy.
    """
    x32 = x if x.dtype is DType.fp32 else Saved(f"{prefix}.in_fp32", x.numel, DType.fp32)
    rstd = Saved(f"{prefix}.rstd", tokens, DType.fp32)
    normed = Saved(f"{prefix}.normed", x.numel, x.dtype)
    g32 = 2 * x.numel * 4  # fp32 gradient in and out
    sc.add(
        f"{prefix}.pow", NORM, [x32], 2 * x.numel, "aten.pow.Tensor_Scalar: saves self", grads=g32
    )
    sc.add(f"{prefix}.rsqrt", NORM, [rstd], 2 * tokens, "aten.rsqrt: saves result")
    sc.add(
        f"{prefix}.mul_rstd",
        NORM,
        [x32, rstd],
        x.numel,
        "aten.mul.Tensor: saves self, other",
        grads=g32,
    )
    sc.add(
        f"{prefix}.mul_weight",
        NORM,
        [normed],
        x.numel,
        "aten.mul.Tensor(weight, y): saves y (weight is a parameter)",
        grads=2 * x.nbytes + x.numel * 4,
        params=width,
    )
    return _t(f"{prefix}.out", tokens, width, x.dtype)


def linear(
    sc: _Scope,
    name: str,
    comp: Component,
    x: Saved,
    tokens: int,
    n_in: int,
    n_out: int,
    out_dtype: DType,
) -> Saved:
    """``aten.addmm`` / ``aten.mm`` (nn.Linear, HF Conv1D): saves the input (mat1) for the
    weight gradient; the weight (mat2) is a parameter and not an activation.

    Under fp8 training (Transformer Engine ``te.Linear``), the saved input is its fp8 cast
    (1 byte per element) instead; the name keeps the casts of one input shared.
    Under torch.autocast (``autocast_mode.cpp``: linear/addmm/mm are lower-precision ops), the
    input and the weight are cast to 16 bits and both casts are saved: the weight's cast is an
    activation of n_in x n_out 16-bit elements, held until this op's backward.
    """
    if sc.fp8_linears:
        saved = [Saved(f"{x.name}.fp8", x.numel, DType.fp8)]
    else:
        saved = [sc.matmul_input(x, name)]
    if sc.autocast is not None:
        saved.append(Saved(f"{name}.{WEIGHT_CAST}", n_in * n_out, sc.autocast))
    sc.add(
        name,
        comp,
        saved,
        matmul_flops(tokens, n_in, n_out),
        "aten.addmm/mm: saves mat1 (input) and mat2 (weight, a parameter)",
        grads=tokens * (n_in + n_out) * out_dtype.itemsize,
        params=n_in * n_out,
    )
    return _t(f"{name}.out", tokens, n_out, out_dtype)


def dropout(
    sc: _Scope,
    name: str,
    comp: Component,
    x: Saved,
    p: float,
    *,
    core: bool = False,
    keep_output_name: str | None = None,
) -> Saved:
    """``aten.native_dropout`` (CUDA): saves a 1-byte bool mask; the output is a new tensor.

    With p == 0, ``F.dropout`` returns its input: no mask, no copy.
    """
    if p <= 0:
        return x
    sc.add(
        name,
        comp,
        [Saved(f"{name}.mask", x.numel, DType.bool)],
        2 * x.numel,
        "aten.native_dropout: saves the bool mask",
        core,
        grads=2 * x.nbytes,
    )
    return Saved(keep_output_name or f"{name}.out", x.numel, x.dtype)


def gelu_mlp_activation(
    sc: _Scope, prefix: str, x: Saved, act: Activation, *, pow_in_fp32: bool = False
) -> Saved:
    """The GPT-2 MLP activation; what it saves depends on how it is written.

    ``gelu_new`` (HF NewGELUActivation) is Python ops:
    ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x.pow(3))))``: ``pow`` saves x, ``tanh``
    saves its result, the final ``mul`` saves both factors (0.5*x and 1+tanh): x plus 3 new
    tensors of the MLP width. ``gelu``/``gelu_pytorch_tanh`` (``aten.gelu``) save their input
    only; ``relu`` (``aten.threshold_backward``) saves its result.
    ``pow_in_fp32``: CUDA autocast runs ``pow`` in fp32 (an fp32-list op in autocast_mode.cpp),
    so ``pow`` saves an fp32 copy of x and the tanh branch, 1 + tanh and the output are fp32
    (only 0.5*x stays 16-bit); CPU autocast has no such rule.
    """
    n, g = x.numel, x.nbytes
    if act is Activation.gelu_new:
        branch = DType.fp32 if pow_in_fp32 else x.dtype
        pow_in = Saved(f"{prefix}.x_fp32", n, DType.fp32) if pow_in_fp32 else x
        sc.add(
            f"{prefix}.pow",
            MLP,
            [pow_in],
            2 * n,
            "aten.pow.Tensor_Scalar: saves self",
            grads=2 * pow_in.nbytes,
        )
        sc.add(
            f"{prefix}.tanh",
            MLP,
            [Saved(f"{prefix}.tanh", n, branch)],
            4 * n,
            "aten.tanh: saves result",
            grads=2 * g,
        )
        sc.add(
            f"{prefix}.mul",
            MLP,
            [Saved(f"{prefix}.half_x", n, x.dtype), Saved(f"{prefix}.one_plus_tanh", n, branch)],
            4 * n,
            "aten.mul.Tensor: saves self and other",
            grads=3 * n * branch.itemsize,
        )
        return Saved(f"{prefix}.out", n, branch)
    elif act is Activation.relu:
        sc.add(
            f"{prefix}.relu",
            MLP,
            [Saved(f"{prefix}.relu", n, x.dtype)],
            n,
            "aten.relu: saves result",
            grads=2 * g,
        )
        return Saved(f"{prefix}.relu", n, x.dtype)
    else:
        sc.add(
            f"{prefix}.{act.value}",
            MLP,
            [x],
            8 * n,
            f"aten.{act.value.split('_')[0]}: saves self",
            grads=2 * g,
        )
    return Saved(f"{prefix}.out", n, x.dtype)


@dataclass(frozen=True)
class _Dims:
    b: int
    s: int
    h: int
    a: int
    d: int
    kv: int
    m: int
    V: int
    p: DType
    """Activation dtype: what matmuls output."""
    r: DType
    """Residual-stream dtype: p, or fp32 under autocast (fp32 weights, fp32 embeddings)."""
    pow_in_fp32: bool = False
    """CUDA autocast runs pow in fp32 (HF gelu_new)."""

    @property
    def T(self) -> int:  # noqa: N802 -- T is the paper's name for tokens
        return self.b * self.s


def _attention_core(
    sc: _Scope,
    dims: _Dims,
    q: Saved,
    k: Saved,
    v: Saved,
    dropout_p: float,
    attention: Attention,
    softmax_in_fp32: bool,
    prefix: str,
    probs_to: DType,
) -> Saved:
    """Attention from q, k, v to the merged (T x h) output that the out-projection saves.

    Eager (HF ``eager_attention_forward``): ``matmul(q, k^T)`` saves q and k; ``softmax``
    saves its output (b*a*s*s; Llama computes it in fp32 and keeps a p copy for ``matmul``);
    dropout saves a bool mask and the dropped probabilities feed ``matmul(probs, v)``, which
    saves both; ``transpose(1, 2).reshape`` copies to a contiguous T x h tensor.
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
        sc.add(
            f"{prefix}.qk_matmul",
            ATTN,
            unique([sc.matmul_input(q, "qk"), sc.matmul_input(k, "qk")]),
            qk_flops,
            "aten.bmm (matmul q @ k^T): saves q and k",
            core=True,
            grads=scores * p + 2 * T * dims.h * p,
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
            grads=scores * p + 2 * T * dims.h * p,
        )
        return _t(f"{prefix}.merged", T, dims.h, dims.p)
    lse = Saved(f"{prefix}.logsumexp", b * a * s, DType.fp32)
    out = _t(f"{prefix}.merged", T, dims.h, dims.p)
    sc.add(
        f"{prefix}.sdpa",
        ATTN,
        unique([sc.matmul_input(t, "sdpa") for t in (q, k, v)] + [out, lse]),
        2 * qk_flops + 5 * scores,
        "aten._scaled_dot_product_flash_attention: saves q, k, v, out, logsumexp",
        grads=T * (dims.h + 2 * dims.kv) * p + out.nbytes,
    )
    return out


def unique(saved: list[Saved]) -> list[Saved]:
    """``saved`` without repeated storages (q, k, v of a fused projection are one storage)."""
    out: dict[str, Saved] = {}
    for t in saved:
        out.setdefault(t.name, t)
    return list(out.values())


def _scope(setup: TrainingSetup) -> _Scope:
    """A scope whose linears follow the precision recipe (fp8 saved inputs, autocast casts)."""
    autocast = setup.activation_dtype if setup.precision.is_amp else None
    return _Scope(fp8_linears=setup.precision is Precision.fp8_mixed, autocast=autocast)


def _gpt2_block(spec: ModelSpec, setup: TrainingSetup, dims: _Dims, stat_dtype: DType) -> Block:
    """HF GPT2Block: ln_1, c_attn (fused qkv), attention, c_proj, dropout, residual,
    ln_2, c_fc, activation, c_proj, dropout, residual."""
    sc = _scope(setup)
    T, h, m, p = dims.T, dims.h, dims.m, dims.p
    x = _t("block.in", T, h, dims.r)
    ln1 = layer_norm(sc, "ln_1", x, T, stat_dtype)
    qkv = linear(sc, "attn.c_attn", ATTN, ln1, T, h, 3 * h, p)  # q, k, v are views of this
    merged = _attention_core(
        sc,
        dims,
        qkv,
        qkv,
        qkv,
        spec.attention_dropout,
        setup.attention,
        # eager adds HF's causal mask, in the stream dtype: under autocast that promotes the
        # bf16 scores to fp32 before softmax; ``.type(value.dtype)`` casts them back.
        softmax_in_fp32=dims.r is DType.fp32,
        prefix="attn",
        probs_to=p,
    )
    proj = linear(sc, "attn.c_proj", ATTN, merged, T, h, h, p)
    dropout(sc, "attn.resid_dropout", ATTN, proj, spec.residual_dropout)
    resid = _t("resid_mid", T, h, dims.r)
    sc.add("attn.residual_add", ATTN, [], T * h, "aten.add: saves nothing")
    ln2 = layer_norm(sc, "ln_2", resid, T, stat_dtype)
    fc = linear(sc, "mlp.c_fc", MLP, ln2, T, h, m, p)
    act = gelu_mlp_activation(sc, "mlp.act", fc, spec.act, pow_in_fp32=dims.pow_in_fp32)
    out = linear(sc, "mlp.c_proj", MLP, act, T, m, h, p)
    dropout(sc, "mlp.dropout", MLP, out, spec.residual_dropout)
    sc.add("mlp.residual_add", MLP, [], T * h, "aten.add: saves nothing")
    return Block(tuple(sc.ops), x, (qkv,), count_params(spec).per_block)


def _llama_block(spec: ModelSpec, setup: TrainingSetup, dims: _Dims) -> Block:
    """HF LlamaDecoderLayer: RMSNorm, q/k/v proj, RoPE, attention, o_proj, residual,
    RMSNorm, gate/up proj, SiLU, gate*up, down proj, residual."""
    sc = _scope(setup)
    T, h, kv, m, p = dims.T, dims.h, dims.kv, dims.m, dims.p
    x = _t("block.in", T, h, dims.r)
    n1 = rms_norm(sc, "input_layernorm", x, T, h)
    linear(sc, "attn.q_proj", ATTN, n1, T, h, h, p)
    linear(sc, "attn.k_proj", ATTN, n1, T, h, kv, p)
    linear(sc, "attn.v_proj", ATTN, n1, T, h, kv, p)
    v = Saved("attn.v_proj.out", T * kv, p)
    # apply_rotary_pos_emb: q*cos + rotate_half(q)*sin -- mul saves cos and sin (no grad),
    # shared by every layer and counted once in the prologue; q_embed and k_embed are new
    # tensors.
    sc.add(
        "attn.rope",
        ATTN,
        [],
        6 * T * (h + kv),
        "aten.mul(q, cos): saves cos (and sin)",
        grads=2 * T * (h + kv) * p.itemsize,
    )
    # q (p) * cos (stream dtype): under autocast the rotated q and k are fp32.
    q = Saved("attn.q_embed", T * h, dims.r)
    k = k_embed = Saved("attn.k_embed", T * kv, dims.r)
    v_proj = v
    if setup.attention is Attention.eager and kv != h:
        if spec.kv_heads == 1 and dims.b == 1:
            # repeat_kv's reshape of the expanded tensor is a view: no copy, but an op that
            # casts it (autocast) materialises all heads.
            k = replace(k, view_numel=T * h)
            v = replace(v, view_numel=T * h)
        else:
            # repeat_kv: expand + reshape copies k and v to all heads for the eager matmuls.
            k = Saved("attn.k_repeated", T * h, k.dtype)
            v = Saved("attn.v_repeated", T * h, v.dtype)
    merged = _attention_core(
        sc,
        dims,
        q,
        k,
        v,
        spec.attention_dropout,
        setup.attention,
        softmax_in_fp32=True,
        prefix="attn",
        probs_to=q.dtype,
    )
    linear(sc, "attn.o_proj", ATTN, merged, T, h, h, p)
    sc.add("attn.residual_add", ATTN, [], T * h, "aten.add: saves nothing")
    resid = _t("resid_mid", T, h, dims.r)
    n2 = rms_norm(sc, "post_attention_layernorm", resid, T, h)
    gate = linear(sc, "mlp.gate_proj", MLP, n2, T, h, m, p)
    up = linear(sc, "mlp.up_proj", MLP, n2, T, h, m, p)
    sc.add("mlp.act", MLP, [gate], 5 * T * m, "aten.silu: saves self", grads=2 * gate.nbytes)
    act = Saved("mlp.act.out", T * m, p)
    sc.add(
        "mlp.gate_mul_up",
        MLP,
        [act, up],
        T * m,
        "aten.mul.Tensor: saves self and other",
        grads=3 * gate.nbytes,
    )
    prod = Saved("mlp.product", T * m, p)
    linear(sc, "mlp.down_proj", MLP, prod, T, m, h, p)
    sc.add("mlp.residual_add", MLP, [], T * h, "aten.add: saves nothing")
    return Block(tuple(sc.ops), x, (q, k_embed, v_proj), count_params(spec).per_block)


def _loss(sc: _Scope, setup: TrainingSetup, dims: _Dims) -> tuple[Saved, tuple[Saved, ...]]:
    """HF ForCausalLMLoss: ``logits.float()``, then ``cross_entropy`` = ``log_softmax`` (saves
    its fp32 output, b*s*V) + ``nll_loss`` (saves the shifted int64 labels and the fp32
    total_weight). The labels are padded to s+1 and sliced, a view when b == 1 and a copy
    otherwise. A fused/chunked loss saves no b*s*V tensor."""
    T, V = dims.T, dims.V
    logits = Saved("logits", T * V, dims.p)
    if setup.loss is Loss.fused:
        sc.add(
            "loss.fused_cross_entropy",
            OUT,
            [Saved("labels", T, DType.int64)],
            6 * T * V,
            "fused linear cross-entropy (e.g. Liger): saves no b*s*V tensor",
        )
        return logits, ()
    logp = Saved("log_softmax", T * V, DType.fp32)
    labels = Saved("labels", (dims.s + 1) if dims.b == 1 else T, DType.int64)
    sc.add("loss.log_softmax", OUT, [logp], 5 * T * V, "aten._log_softmax: saves result")
    sc.add(
        "loss.nll_loss",
        OUT,
        [labels, Saved("total_weight", 1, DType.fp32)],
        T,
        "aten.nll_loss_forward: saves target and total_weight",
    )
    transient = [
        Saved("grad_log_softmax", T * V, DType.fp32),
        Saved("grad_logits_fp32", T * V, DType.fp32),
    ]
    if dims.p is not DType.fp32:
        transient.append(Saved("logits_fp32", T * V, DType.fp32))
    return logits, tuple(transient)


def lower(spec: ModelSpec, setup: TrainingSetup, *, device: str = "cuda") -> OpGraph:
    """The op graph of one training step of ``spec`` under ``setup``.

    ``device='cpu'`` mirrors the CPU kernels where they store differently (LayerNorm statistics
    in the input dtype), for comparing with CPU measurements.

    Korthikanti et al. 2022 (eq. 1), GPT-2 shape, 16-bit, eager, dropout: ~sbh(34 + 5as/h)
    per block; this lowering is that plus HF's 3 extra GELU tensors (gelu_new) and fp32 stats.
    """
    if setup.dropout is not None:
        spec = spec.with_dropout(setup.dropout)
    p = setup.activation_dtype
    dims = _Dims(
        b=setup.batch,
        s=setup.seq,
        h=spec.hidden_size,
        a=spec.num_heads,
        d=spec.head_dim,
        kv=spec.kv_size,
        m=spec.mlp_size,
        V=spec.vocab_size,
        p=p,
        r=DType.fp32 if setup.precision.is_amp else p,
        pow_in_fp32=setup.precision.is_amp and device == "cuda",
    )
    T = dims.T
    r = dims.r
    stat_dtype = DType.fp32 if (device == "cuda" or r is DType.fp32) else r

    pro = _Scope()
    pro.add(
        "embed_tokens",
        Component.embedding,
        [Saved("input_ids", T, DType.int64)],
        0,
        "aten.embedding: saves indices",
    )
    extra: tuple[Saved, ...] = ()
    if spec.is_gpt2:
        pro.add(
            "embed_positions",
            Component.embedding,
            [Saved("position_ids", setup.seq, DType.int64)],
            T * dims.h,
            "aten.embedding: saves indices (position_ids of shape 1 x s)",
        )
        x = _t("embed.out", T, dims.h, r)
        dropout(pro, "embed_dropout", Component.embedding, x, spec.embedding_dropout)
        block = _gpt2_block(spec, setup, dims, stat_dtype)
    else:
        rope = (Saved("rope.cos", setup.seq * dims.d, r), Saved("rope.sin", setup.seq * dims.d, r))
        block = _llama_block(spec, setup, dims)
        # cos/sin are shared by all blocks: count them once, in the prologue, not per block.
        pro.add(
            "rotary_embedding",
            Component.attention,
            list(rope),
            0,
            "LlamaRotaryEmbedding: cos, sin saved by the q/k muls of every layer",
        )

    if setup.attention is Attention.eager:
        # HF materialises a (b, 1, s, s) additive causal mask for eager attention and passes it
        # to every decoder layer; a checkpoint keeps it alive once (GPT-2 passes it
        # positionally, so checkpoint's _NoopSaveInputs saves it; Llama by keyword, so the
        # checkpoint's closure holds it).
        extra = (Saved("eager_causal_mask", setup.batch * setup.seq * setup.seq, r),)
    if not spec.is_gpt2:
        # HF Llama passes position_ids (1 x s, int64) to every layer by keyword; no op saves
        # them (RoPE runs under no_grad), so a checkpoint's closure is what keeps them.
        extra += (Saved("position_ids", setup.seq, DType.int64),)

    epi = _scope(setup)
    last = _t("final.in", T, dims.h, r)
    if spec.is_gpt2:
        final = layer_norm(epi, "ln_f", last, T, stat_dtype)
    else:
        final = rms_norm(epi, "norm", last, T, dims.h)
    linear(epi, "lm_head", OUT, final, T, dims.h, dims.V, p)
    logits, transient = _loss(epi, setup, dims)
    layout = Layout.uniform(spec.num_layers)
    return OpGraph(tuple(pro.ops), (block,), layout, tuple(epi.ops), extra, logits, transient)
