"""Transformer Engine's norm and linear modules as Megatron-core builds them, and Megatron's own
``ColumnParallelLinear`` (the output layer).

Notation as ``graph/scope.py``: T tokens of the rank's micro-batch, ``dims.T_rep`` the tokens
outside the tensor-parallel regions (T / tp under sequence parallelism).
"""

from __future__ import annotations

from collections.abc import Callable

from memcalc.errors import MemcalcError
from memcalc.graph.blocks.linear import PARAM_COMPONENT
from memcalc.graph.ops import Component, Gemm, ParamTensor, Saved
from memcalc.graph.scope import Dims, Scope, matmul_flops
from memcalc.spec.model import Norm
from memcalc.spec.training import DType

NORM = Component.norm


def norm_stats(prefix: str, rows: int, norm: Norm) -> list[Saved]:
    """TE's fp32 statistics, one per row: ``mu`` and ``rsigma`` for LayerNorm, ``rsigma`` only
    for RMSNorm (``transformer_engine/pytorch/csrc/extensions/normalization.cpp``
    ``layernorm_fwd`` allocates both as ``at::kFloat``, ``rmsnorm_fwd`` only rsigma)."""
    out = [Saved(f"{prefix}.rsigma", rows, DType.fp32)]
    if norm is Norm.layer_norm:
        out.insert(0, Saved(f"{prefix}.mu", rows, DType.fp32))
    return out


def norm_weights(prefix: str, h: int, norm: Norm, *, fused: bool) -> tuple[ParamTensor, ...]:
    """A TE norm's parameters: weight, and a bias for LayerNorm (``layer_norm_weight`` /
    ``layer_norm_bias`` inside a fused LayerNormLinear)."""
    stem = f"{prefix}.layer_norm_" if fused else f"{prefix}."
    out: tuple[ParamTensor, ...] = (ParamTensor(f"{stem}weight", (h,), "norms"),)
    if norm is Norm.layer_norm:
        out += (ParamTensor(f"{stem}bias", (h,), "norms"),)
    return out


def te_norm(
    sc: Scope,
    prefix: str,
    x: Saved,
    rows: int,
    width: int,
    norm: Norm,
    source: str = "TE LayerNorm/RMSNorm (ops/basic/layer_norm.py op_forward): saves x, mu, rsigma",
) -> Saved:
    """``TENorm`` (TE ``LayerNorm`` / ``RMSNorm``, ``transformer_engine/pytorch/ops/basic/
    layer_norm.py`` ``LayerNorm.op_forward``): ``ctx.save_for_backward(x, means, rstdevs)``
    with ``x = input_.contiguous()`` -- the input itself, or a copy of a strided view (q and k
    under ``qk_layernorm``); the output is a new tensor."""
    if x.numel != rows * width:
        raise ValueError(f"{prefix}: {x.numel} elements are not {rows} x {width}")
    sc.add(
        prefix,
        NORM,
        [x, *norm_stats(prefix, rows, norm)],
        8 * x.numel,
        source,
        grads=2 * x.nbytes,
        params=width * (2 if norm is Norm.layer_norm else 1),
        weights=norm_weights(prefix, width, norm, fused=False),
    )
    return Saved(f"{prefix}.out", x.numel, x.dtype)


def gemm_work(
    sc: Scope, comp: Component, m: int, k: int, n: int, p: DType, groups: int = 1
) -> Gemm:
    """The GEMM a Megatron / TE linear runs, for the step-time model: (m x k) @ (k x n), fp8
    for TE's block linears under fp8 (``te.Linear`` and friends; the output layer is a plain
    ``ColumnParallelLinear`` in 16 bits), else the activation dtype; input and weight
    gradients in backward."""
    fp8 = sc.fp8_linears and comp is not Component.output
    return Gemm(m, k, n, DType.fp8 if fp8 else (sc.autocast or p), groups, True, True)


def _linear_weights(
    name: str, comp: Component, n_in: int, n_out: int, bias: bool
) -> tuple[ParamTensor, ...]:
    kind = PARAM_COMPONENT[comp]
    out: tuple[ParamTensor, ...] = (ParamTensor(f"{name}.weight", (n_out, n_in), kind),)
    if bias:
        out += (ParamTensor(f"{name}.bias", (n_out,), kind),)
    return out


def layernorm_linear(
    sc: Scope,
    name: str,
    comp: Component,
    x: Saved,
    dims: Dims,
    n_out: int,
    *,
    norm: Norm,
    bias: bool,
) -> Saved:
    """``TELayerNormColumnParallelLinear`` (TE ``module/layernorm_linear.py``
    ``_LayerNormLinear.forward``): the norm fused before a column-parallel GEMM.
    ``prepare_for_saving(inputmat, weightmat, weight, bias, ln_weight, ln_out, mu, rsigma)``:
    ``inputmat`` is the input cast to the activation dtype (the residual stream itself in
    bf16), ``ln_out`` the normalised input -- the rank's sequence shard under sequence
    parallelism: the all-gathered ``ln_out_total`` is freed after the GEMM
    (``clear_tensor_data``) and gathered again in backward (``ctx.ln_out_needs_gather``); under
    fp8 ``ln_out`` is kept quantized, column-wise only (1 byte an element). Weights are the
    parameters. Output: (T x n_out) in the activation dtype."""
    rows, h, T, p = dims.T_rep, dims.h, dims.T, dims.p
    ln_out = Saved(f"{name}.ln_out", rows * h, DType.fp8 if sc.fp8_linears else p)
    gathered = T * h if dims.sp and dims.tp > 1 else 0
    sc.add(
        name,
        comp,
        [x, ln_out, *norm_stats(name, rows, norm)],
        matmul_flops(T, h, n_out) + 8 * rows * h,
        "TE _LayerNormLinear.forward: saves inputmat, ln_out (local shard), mu, rsigma",
        # backward: the output's gradient, ln_out gathered again, dgrad before its
        # reduce-scatter, the input's gradient
        grads=(T * n_out + gathered + T * h + rows * h) * p.itemsize,
        params=n_out * h + (n_out if bias else 0) + h * (2 if norm is Norm.layer_norm else 1),
        weights=_linear_weights(name, comp, h, n_out, bias)
        + norm_weights(name, h, norm, fused=True),
        work=gemm_work(sc, comp, T, h, n_out, p),
    )
    return Saved(f"{name}.out", T * n_out, p)


def row_parallel_linear(
    sc: Scope,
    name: str,
    comp: Component,
    x: Saved,
    dims: Dims,
    n_in: int,
    *,
    bias: bool,
    source: str = "TE _Linear.forward: saves inputmat (the row-parallel input)",
) -> Saved:
    """``TERowParallelLinear`` (TE ``module/linear.py`` ``_linear_forward_impl``): saves
    ``saved_inputmat`` -- its (T x n_in/tp) input as given, an fp8 column-wise copy under fp8
    -- and the weight (a parameter). The bias (h, replicated) is added later by the
    bias-dropout-add; the output is all-reduced, or reduce-scattered to T / tp tokens under
    sequence parallelism. Megatron's own ``RowParallelLinear`` (the local spec) saves the same
    input."""
    T, h, p = dims.T, dims.h, dims.p
    saved = Saved(f"{x.name}.fp8", x.numel, DType.fp8) if sc.fp8_linears else x
    sc.add(
        name,
        comp,
        [saved],
        matmul_flops(T, n_in, h),
        source,
        grads=(dims.T_rep * h + T * h + T * n_in) * p.itemsize,
        params=n_in * h + (h if bias else 0),
        weights=_linear_weights(name, comp, n_in, h, bias),
        work=gemm_work(sc, comp, T, n_in, h, p),
    )
    return Saved(f"{name}.out", dims.T_rep * h, p)


def column_parallel_linear(
    sc: Scope,
    name: str,
    comp: Component,
    x: Saved,
    dims: Dims,
    n_out: int,
    *,
    owns_weight: bool,
) -> Saved:
    """Megatron's ``ColumnParallelLinear`` (``tensor_parallel/layers.py``
    ``LinearWithGradAccumulationAndAsyncCommunication.forward``): saves its input -- the
    sequence shard under sequence parallelism (all-gathered for the GEMM, gathered again in
    backward) -- and the weight; the output layer's weight is the word embedding's on a single
    stage with tied embeddings (``owns_weight`` False). Output: (T x n_out)."""
    T, h, p = dims.T, dims.h, dims.p
    sc.add(
        name,
        comp,
        [x],
        matmul_flops(T, h, n_out),
        "Megatron LinearWithGradAccumulationAndAsyncCommunication: saves input (SP shard)",
        grads=(T * n_out + 2 * T * h) * p.itemsize,
        params=n_out * h,
        weights=_linear_weights(name, comp, h, n_out, False) if owns_weight else (),
        work=gemm_work(sc, comp, T, h, n_out, p),
    )
    return Saved(f"{name}.out", T * n_out, p)


def local_norm_then_linear(
    sc: Scope,
    name: str,
    comp: Component,
    x: Saved,
    dims: Dims,
    n_out: int,
    *,
    norm: Norm,
    bias: bool,
) -> Saved:
    """The local spec's norm and column-parallel linear as two modules
    (``gpt_layer_specs.py`` ``get_gpt_layer_local_spec``: ``input_layernorm`` /
    ``pre_mlp_layernorm`` = apex ``FusedLayerNorm`` or ``WrappedTorchNorm`` -- torch's
    ``nn.LayerNorm``, ``aten.native_layer_norm``: input, fp32 mean and rstd -- then
    ``ColumnParallelLinear``, which saves the norm's output): the same bytes as TE's fused
    module, as two ops."""
    if norm is not Norm.layer_norm:
        raise MemcalcError(
            "--transformer-impl local: only LayerNorm is modelled for the local spec "
            "(apex FusedRMSNorm / torch RMSNorm are not)"
        )
    T, h, p = dims.T, dims.h, dims.p
    rows = dims.T_rep
    prefix = "input_layernorm" if name.startswith("self_attention") else "pre_mlp_layernorm"
    te_norm(
        sc, prefix, x, rows, h, norm, "apex FusedLayerNorm / aten.native_layer_norm: x, mean, rstd"
    )
    normed = Saved(f"{prefix}.out", rows * h, p)
    sc.add(
        name,
        comp,
        [normed],
        matmul_flops(T, h, n_out),
        "Megatron ColumnParallelLinear: saves its input (the norm's output)",
        grads=(T * n_out + T * h + rows * h) * p.itemsize,
        params=n_out * h + (n_out if bias else 0),
        weights=_linear_weights(name, comp, h, n_out, bias),
    )
    return Saved(f"{name}.out", T * n_out, p)


NormLinear = Callable[..., Saved]
"""``layernorm_linear`` (TE) or ``local_norm_then_linear`` (the local spec)."""
