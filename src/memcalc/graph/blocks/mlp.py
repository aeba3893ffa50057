"""The dense feed-forward layer: plain (up -> activation -> down) or gated (SwiGLU / GeGLU),
and the activation functions as HF writes them."""

from __future__ import annotations

from dataclasses import replace

from memcalc.graph.blocks.linear import linear
from memcalc.graph.ops import Component, Saved
from memcalc.graph.scope import Dims, Scope
from memcalc.spec.families.base import Implementation
from memcalc.spec.model import Activation, Mlp, ModelSpec
from memcalc.spec.training import DType

MLP = Component.mlp


def activation(
    sc: Scope, prefix: str, x: Saved, act: Activation, *, pow_in_fp32: bool = False
) -> Saved:
    """An MLP activation (``_activation``); on an input that needs no gradient (a frozen up
    projection on the first layer of a frozen base -- GPT-NeoX's parallel MLP, which reads the
    layer input) autograd records no node: the ops run, nothing is saved."""
    start = len(sc.ops)
    out = _activation(sc, prefix, x, act, pow_in_fp32=pow_in_fp32)
    if x.needs_grad:
        return out
    sc.ops[start:] = [replace(op, saves=(), grad_bytes=0) for op in sc.ops[start:]]
    return Saved(out.name, out.numel, out.dtype, needs_grad=False)


def _activation(
    sc: Scope, prefix: str, x: Saved, act: Activation, *, pow_in_fp32: bool = False
) -> Saved:
    """An MLP activation; what it saves depends on how it is written.

    ``gelu_new`` (HF NewGELUActivation) is Python ops:
    ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x.pow(3))))``: ``pow`` saves x, ``tanh``
    saves its result, the final ``mul`` saves both factors (0.5*x and 1+tanh): x plus 3 new
    tensors of the MLP width. ``gelu``/``gelu_pytorch_tanh``/``silu`` (``aten.gelu`` /
    ``aten.silu``) save their input only; ``relu`` (``aten.threshold_backward``) saves its
    result.
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
    if act is Activation.relu:
        sc.add(
            f"{prefix}.relu",
            MLP,
            [Saved(f"{prefix}.relu", n, x.dtype)],
            n,
            "aten.relu: saves result",
            grads=2 * g,
        )
        return Saved(f"{prefix}.relu", n, x.dtype)
    flops = 5 * n if act is Activation.silu else 8 * n
    sc.add(
        f"{prefix}.{act.value}" if act is not Activation.silu else prefix,
        MLP,
        [x],
        flops,
        f"aten.{act.value.split('_')[0]}: saves self",
        grads=2 * g,
    )
    return Saved(f"{prefix}.out", n, x.dtype)


def mlp(
    sc: Scope,
    spec: ModelSpec,
    impl: Implementation,
    dims: Dims,
    x: Saved,
    width: int,
    *,
    prefix: str = "mlp",
) -> Saved:
    """The dense MLP of width ``width`` on its (normed) input ``x``; returns the down
    projection's output."""
    T, h, p = dims.T, dims.h, dims.p
    name = impl.mlp_name(prefix)
    if spec.mlp is Mlp.plain:
        up = linear(sc, name("up"), MLP, x, T, h, width, p, bias=spec.mlp_bias)
        act = activation(sc, name("act"), up, spec.activation, pow_in_fp32=dims.pow_in_fp32)
        return linear(
            sc, name("down"), MLP, act, T, width, h, p, bias=spec.mlp_bias, out_tokens=dims.T_rep
        )
    if spec.fused_gate_up:
        # Phi-3 gate_up_proj: gate and up are the two halves (views) of one output storage
        both = linear(sc, name("gate_up"), MLP, x, T, h, 2 * width, p, bias=spec.mlp_bias)
        gate = up = both
    else:
        gate = linear(sc, name("gate"), MLP, x, T, h, width, p, bias=spec.mlp_bias)
        up = linear(sc, name("up"), MLP, x, T, h, width, p, bias=spec.mlp_bias)
    activation(sc, name("act"), gate, spec.activation)
    act = Saved(f"{name('act')}.out", T * width, p, needs_grad=gate.needs_grad)
    # mul saves each factor for the other's gradient: nothing when neither needs one
    grad = act.needs_grad or up.needs_grad
    sc.add(
        name("gate_mul_up"),
        MLP,
        [t for t, other in ((act, up), (up, act)) if other.needs_grad],
        T * width,
        "aten.mul.Tensor: saves self and other",
        grads=3 * T * width * p.itemsize if grad else 0,
    )
    product = Saved(f"{prefix}.product", T * width, p, needs_grad=grad)
    return linear(
        sc, name("down"), MLP, product, T, width, h, p, bias=spec.mlp_bias, out_tokens=dims.T_rep
    )
