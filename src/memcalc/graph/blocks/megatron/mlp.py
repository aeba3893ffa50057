"""Megatron-core's dense ``MLP`` with TE (``megatron/core/transformer/mlp.py`` ``MLP.forward``):
``linear_fc1`` (norm fused), the activation, ``linear_fc2``."""

from __future__ import annotations

from memcalc.graph.blocks.megatron.te_modules import (
    NormLinear,
    gemm_work,
    layernorm_linear,
    row_parallel_linear,
)
from memcalc.graph.ops import Component, ParamTensor, Saved
from memcalc.graph.scope import Dims, Scope, matmul_flops
from memcalc.spec.megatron import MegatronOptions
from memcalc.spec.model import Activation, Mlp, ModelSpec

MLP = Component.mlp


def activation(
    sc: Scope,
    prefix: str,
    fc1: Saved,
    dims: Dims,
    width: int,
    *,
    gated: bool,
    fused: bool,
    act: Activation = Activation.gelu,
    rows: int | None = None,
) -> Saved:
    """The activation between fc1 and fc2 on its (T x width, or 2 x width gated) input.

    - Fused bias-GeLU (``fusions/fused_bias_gelu.py`` ``GeLUFunction.forward``:
      ``save_for_backward(input, bias)``) and unfused ``F.gelu`` (saves its input) keep the
      fc1 output; fused SwiGLU (``fusions/fused_bias_swiglu.py`` ``SwiGLUFunction.forward``:
      ``save_for_backward(input_for_backward)``, the (T x 2 width) fc1 output) likewise.
    - Unfused GLU (``glu``: ``torch.chunk`` views, ``act(x_glu) * x_linear``): the activation
      saves x_glu (a view of fc1's output), the ``mul`` saves ``act(x_glu)`` (new) and
      x_linear (a view): fc1's output and one width more.
    - ``F.relu`` saves its result -- the output ``linear_fc2`` saves too: one storage, fc1's
      output is freed.
    The output (T x width; ``rows`` x width for the experts) is new; ``linear_fc2`` saves
    it."""
    T, p = dims.T if rows is None else rows, dims.p
    out = Saved(f"{prefix}.out", T * width, p)
    saves = [out] if act is Activation.relu and not gated else [fc1]
    if gated and not fused:
        saves.append(Saved(f"{prefix}.act_glu", T * width, p))
    sc.add(
        prefix,
        MLP,
        saves,
        8 * T * width,
        ("fused bias-SwiGLU" if gated else "fused bias-GeLU")
        + (": saves its input" if fused else " (unfused): saves its input"),
        grads=(fc1.numel + 2 * T * width) * p.itemsize,
    )
    return out


def dense_mlp(
    sc: Scope,
    spec: ModelSpec,
    dims: Dims,
    x: Saved,
    *,
    fused: bool,
    prefix: str = "mlp",
    norm_linear: NormLinear = layernorm_linear,
) -> Saved:
    """The MLP on the residual stream ``x`` (the pre-MLP norm is fused into ``linear_fc1``
    with TE, its own module in the local spec)."""
    gated = spec.mlp is Mlp.gated
    width = dims.m
    fc1 = norm_linear(
        sc,
        f"{prefix}.linear_fc1",
        MLP,
        x,
        dims,
        2 * width if gated else width,
        norm=spec.norm,
        bias=spec.mlp_bias,
    )
    act = activation(
        sc,
        f"{prefix}.activation",
        fc1,
        dims,
        width,
        gated=gated,
        fused=fused and spec.activation is not Activation.relu,
        act=spec.activation,
    )
    return row_parallel_linear(
        sc, f"{prefix}.linear_fc2", MLP, act, dims, width, bias=spec.mlp_bias
    )


def shared_expert_mlp(
    sc: Scope, spec: ModelSpec, dims: Dims, x: Saved, width: int, opts: MegatronOptions
) -> Saved:
    """``moe/shared_experts.py`` ``SharedExpertMLP``: an ``MLP`` of TE
    ``TEColumnParallelLinear`` (no fused norm: its input is the pre-MLP norm's output, which
    it saves) and ``TERowParallelLinear`` on every token."""
    gated = spec.mlp is Mlp.gated
    n_out = 2 * width if gated else width
    T, h, p = dims.T, dims.h, dims.p
    name = "mlp.shared_experts"
    sc.add(
        f"{name}.linear_fc1",
        MLP,
        [x],
        matmul_flops(T, h, n_out),
        "TE _Linear.forward (TEColumnParallelLinear): saves its input",
        grads=(T * n_out + 2 * T * h) * p.itemsize,
        params=n_out * h,
        weights=(ParamTensor(f"{name}.linear_fc1.weight", (n_out, h), "mlp"),),
        work=gemm_work(sc, MLP, T, h, n_out, p),
    )
    fc1 = Saved(f"{name}.linear_fc1.out", T * n_out, p)
    act = activation(
        sc,
        f"{name}.activation",
        fc1,
        dims,
        width,
        gated=gated,
        fused=opts.bias_activation_fusion,
        act=spec.activation,
    )
    return row_parallel_linear(sc, f"{name}.linear_fc2", MLP, act, dims, width, bias=False)
