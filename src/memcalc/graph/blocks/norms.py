"""Normalisation layers: LayerNorm and the RMSNorm variants HF implementations use.

What each saves follows PyTorch's autograd formulas (``tools/autograd/derivatives.yaml``) for
the ops the HF module runs.
"""

from __future__ import annotations

from memcalc.frameworks.features import NormKernel
from memcalc.graph.ops import Component, ParamTensor, Saved
from memcalc.graph.scope import Scope
from memcalc.spec.model import Norm
from memcalc.spec.training import DType

NORM = Component.norm


def _norm_weights(
    sc: Scope, prefix: str, width: int, bias: bool
) -> tuple[bool, tuple[ParamTensor, ...]]:
    trainable, dtype = sc.trainable(prefix), sc.param_dtype(prefix)
    weights: tuple[ParamTensor, ...] = (
        ParamTensor(f"{prefix}.weight", (width,), "norms", trainable, dtype),
    )
    if bias:
        weights += (ParamTensor(f"{prefix}.bias", (width,), "norms", trainable, dtype),)
    return trainable, weights


def layer_norm(
    sc: Scope,
    prefix: str,
    x: Saved,
    rows: int,
    stat_dtype: DType,
    *,
    bias: bool = True,
) -> Saved:
    """``aten.native_layer_norm`` saves its input, mean and rstd (one per row: fp32 on CUDA,
    the input dtype on CPU) -- needed for the input's gradient and the weight's alike, so only
    an input needing no grad under a frozen weight saves nothing. Returns the output (which
    the next op may save)."""
    width = x.numel // rows
    trainable, weights = _norm_weights(sc, prefix, width, bias)
    saves = [
        x,
        Saved(f"{prefix}.mean", rows, stat_dtype),
        Saved(f"{prefix}.rstd", rows, stat_dtype),
    ]
    sc.add(
        f"{prefix}.layer_norm",
        NORM,
        saves if (x.needs_grad or trainable) else [],
        8 * x.numel,
        "aten.native_layer_norm: saves input, mean, rstd",
        grads=2 * x.nbytes,
        params=2 * width if trainable else 0,  # weight and bias
        weights=weights,
    )
    return Saved(f"{prefix}.out", x.numel, x.dtype, needs_grad=x.needs_grad or trainable)


def rms_norm(
    sc: Scope,
    prefix: str,
    x: Saved,
    rows: int,
    width: int,
    variant: Norm = Norm.rms_norm,
    *,
    view_of: Saved | None = None,
) -> Saved:
    """RMSNorm over the last ``width`` features of ``x`` (``rows`` of them), as HF writes it.

    All variants compute in fp32: ``x32 = x.to(fp32)`` (a copy unless x is fp32), ``pow``
    saves x32, ``rsqrt`` its result (one fp32 per row), ``mul(x32, r)`` both. Then:

    - ``rms_norm`` (LlamaRMSNorm): ``weight * y.to(dtype)`` saves the dtype copy of y (when x
      is fp32, y itself).
    - ``rms_norm_fp32_weight`` (Olmo2RMSNorm): ``(weight * y).to(dtype)`` -- the multiply runs
      in fp32 and saves y (fp32) for the weight gradient.
    - ``rms_norm_unit_offset`` (Gemma2RMSNorm): ``y * (1.0 + weight.float())`` saves y (fp32)
      and the fp32 ``1 + w`` vector (width elements, once per norm call, whatever the tokens).

    A frozen weight (LoRA) drops what only its gradient needs (y); an input that needs no
    grad (``x.needs_grad`` False: on the first layer of a frozen base without
    enable_input_require_grads) drops the rest.

    In the two fp32 weight multiplies, backward holds three fp32 tensors of x's size besides
    the incoming gradient: the gradient of the fp32 product (``ToCopyBackward``), the gradient
    of y, and the product ``grad * y`` that is summed into the weight's gradient (measured on
    the CPU: the peak of a recomputed OLMo 2 / Gemma block).

    ``view_of``: the storage ``x`` is a slice of (MLA's ``kv_a_layernorm`` on part of one
    projection): an fp32 x is that storage, which pow saves whole; a copy is x's size.
    """
    trainable, weight = _norm_weights(sc, prefix, width, False)
    _rms_statistics(sc, prefix, x, rows, view_of)
    _rms_weight_multiply(sc, prefix, x, width, variant, trainable, weight)
    return Saved(f"{prefix}.out", x.numel, x.dtype, needs_grad=x.needs_grad or trainable)


def _rms_statistics(sc: Scope, prefix: str, x: Saved, rows: int, view_of: Saved | None) -> None:
    """``x32 = x.to(fp32)``, ``pow`` (saves x32), ``rsqrt`` (saves its result, one fp32 per
    row) and ``mul(x32, r)`` (saves both): nothing when x needs no grad."""
    numel = x.numel
    x32 = (view_of or x) if x.dtype is DType.fp32 else Saved(f"{prefix}.in_fp32", numel, DType.fp32)
    rstd = Saved(f"{prefix}.rstd", rows, DType.fp32)
    g32 = 2 * numel * 4  # fp32 gradient in and out
    ig = x.needs_grad
    sc.add(
        f"{prefix}.pow",
        NORM,
        [x32] if ig else [],
        2 * numel,
        "aten.pow.Tensor_Scalar: saves self",
        # pow_backward: grad * (2 * self.pow(1)) -- two fp32 temporaries beside the gradients
        # in and out -- while mul_rstd's gradient for x32 waits in x32's input buffer (its
        # backward ran first; the two are summed after this one, ``input_buffer.cpp``)
        grads=g32 + 3 * numel * 4,
    )
    sc.add(f"{prefix}.rsqrt", NORM, [rstd] if ig else [], 2 * rows, "aten.rsqrt: saves result")
    sc.add(
        f"{prefix}.mul_rstd",
        NORM,
        [x32, rstd] if ig else [],
        numel,
        "aten.mul.Tensor: saves self, other",
        grads=g32,
    )


def _rms_weight_multiply(
    sc: Scope,
    prefix: str,
    x: Saved,
    width: int,
    variant: Norm,
    trainable: bool,
    weight: tuple[ParamTensor, ...],
) -> None:
    """The weight multiply of each RMSNorm variant (``rms_norm``'s docstring)."""
    numel = x.numel
    params = width if trainable else 0
    if variant is Norm.rms_norm:
        normed = Saved(f"{prefix}.normed", numel, x.dtype)
        sc.add(
            f"{prefix}.mul_weight",
            NORM,
            [normed] if trainable else [],
            numel,
            "aten.mul.Tensor(weight, y): saves y (weight is a parameter)",
            grads=2 * x.nbytes + numel * 4,
            params=params,
            weights=weight,
        )
    elif variant is Norm.rms_norm_fp32_weight:
        y32 = Saved(f"{prefix}.normed_fp32", numel, DType.fp32)
        sc.add(
            f"{prefix}.mul_weight",
            NORM,
            [y32] if trainable else [],
            numel,
            "aten.mul.Tensor(weight, y_fp32) in fp32: saves y (Olmo2RMSNorm)",
            grads=3 * numel * 4 + x.nbytes,
            params=params,
            weights=weight,
        )
    else:
        y32 = Saved(f"{prefix}.normed_fp32", numel, DType.fp32)
        one_plus_w = Saved(f"{prefix}.one_plus_weight", width, DType.fp32)
        saves = ([y32] if trainable else []) + ([one_plus_w] if x.needs_grad else [])
        sc.add(
            f"{prefix}.mul_weight",
            NORM,
            saves,
            2 * numel,
            "aten.mul.Tensor(y, 1 + weight.float()): saves y and 1 + w (Gemma2RMSNorm)",
            grads=3 * numel * 4 + x.nbytes,
            params=params,
            weights=weight,
        )


def fused_rms_norm(sc: Scope, prefix: str, x: Saved, rows: int, width: int) -> Saved:
    """``torch.nn.RMSNorm`` on CUDA: ``aten._fused_rms_norm`` (torch >= 2.8, taken by
    ``rms_norm_symint`` in ``aten/src/ATen/native/layer_norm.cpp`` when the weight's dtype is
    the input's). Its backward node ``FusedRmsNormBackward0`` (torch's generated
    ``autograd/generated/Functions.h``) saves ``input_``, ``weight_`` (a parameter) and
    ``result1_``, the rstd: one fp32 per row. The output is a new tensor in x's dtype, saved by
    whatever reads it. Backward (``_fused_rms_norm_backward``) writes the input's gradient
    beside the incoming one, and an fp32 per-row partial for the weight's.

    >>> sc = Scope()
    >>> out = fused_rms_norm(sc, "norm", Saved("x", 64 * 4096, DType.bf16), 64, 4096)
    >>> sum(t.nbytes for t in sc.ops[0].saves)  # 64 x 4096 bf16 input + 64 fp32 rstd
    524544
    """
    trainable, weight = _norm_weights(sc, prefix, width, False)
    ig = x.needs_grad
    rstd = Saved(f"{prefix}.rstd", rows, DType.fp32)
    sc.add(
        f"{prefix}.fused_rms_norm",
        NORM,
        [x, rstd] if (ig or trainable) else [],
        4 * x.numel,
        "aten._fused_rms_norm (FusedRmsNormBackward0): saves input, rstd and weight",
        grads=2 * x.nbytes,
        params=width if trainable else 0,
        weights=weight,
    )
    return Saved(f"{prefix}.out", x.numel, x.dtype, needs_grad=ig or trainable)


def norm(
    sc: Scope,
    prefix: str,
    x: Saved,
    rows: int,
    width: int,
    variant: Norm,
    stat_dtype: DType,
    *,
    bias: bool = False,
    kernel: NormKernel = NormKernel.family,
    cpu: bool = False,
) -> Saved:
    """The norm ``variant`` over ``x`` (``rows`` x ``width``), run by ``kernel``: the family's
    module, or ``torch.nn.RMSNorm`` -- fused on CUDA, on a CPU its composite
    (``rms_norm_composite``: the fp32 multiply by the weight saves the fp32 normalised tensor,
    the ``rms_norm_fp32_weight`` pattern)."""
    if variant is Norm.layer_norm:
        return layer_norm(sc, prefix, x, rows, stat_dtype, bias=bias)
    if kernel is NormKernel.torch_rms_norm:
        if not cpu:
            return fused_rms_norm(sc, prefix, x, rows, width)
        variant = Norm.rms_norm_fp32_weight
    return rms_norm(sc, prefix, x, rows, width, variant)
