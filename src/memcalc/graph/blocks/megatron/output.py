"""The last stage's head (``GPTModel._postprocess``): the final ``TENorm``, the output layer
(Megatron's ``ColumnParallelLinear``) and the vocab-parallel cross-entropy."""

from __future__ import annotations

from memcalc.graph.blocks.megatron.te_modules import column_parallel_linear, te_norm
from memcalc.graph.ops import Component, LossPeaks, Saved
from memcalc.graph.scope import Dims, Scope
from memcalc.spec.megatron import CrossEntropyFusion
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import DType

OUT = Component.output


def output_and_loss(
    sc: Scope, spec: ModelSpec, dims: Dims, fusion: CrossEntropyFusion, *, owns_weight: bool
) -> tuple[Saved, LossPeaks]:
    """Final norm, output layer and loss; returns the (T x V/t) bf16 logits and what the loss
    allocates at its moments."""
    T, h = dims.T_rep, dims.h
    last = Saved("final_layernorm.in", T * h, dims.r)
    normed = te_norm(sc, "final_layernorm", last, T, h, spec.norm)
    logits = column_parallel_linear(
        sc, "output_layer", OUT, normed, dims, dims.V, owns_weight=owns_weight
    )
    return Saved("logits", logits.numel, logits.dtype), LOSSES[fusion](sc, dims)


def _labels(dims: Dims) -> list[Saved]:
    return [
        Saved("loss.target_mask", dims.T, DType.bool),
        Saved("loss.masked_target", dims.T, DType.int64),
    ]


def vocab_parallel_cross_entropy(sc: Scope, dims: Dims) -> LossPeaks:
    """``tensor_parallel/cross_entropy.py`` ``_VocabParallelCrossEntropy.forward``:
    ``calculate_logits_max`` makes one fp32 copy of the logits (``.float()``), then works in it
    in place (subtract the max, ``torch.exp(..., out=exp_logits)``, ``div_``) and
    ``save_for_backward(exp_logits, target_mask, masked_target_1d)``. At the forward's peak
    the bf16 logits (kept by ``GPTModel.forward`` until the loss returns) sit beside that fp32
    buffer; backward writes the gradient into the buffer itself and ``.float()``'s backward
    casts it to a bf16 gradient. With fp32 logits ``.float()`` returns them: the softmax is
    computed in the logits themselves and nothing else is allocated."""
    T, V = dims.T, dims.V
    sc.add(
        "loss.vocab_parallel_cross_entropy",
        OUT,
        [Saved("loss.softmax", T * V, DType.fp32), *_labels(dims)],
        5 * T * V,
        "_VocabParallelCrossEntropy: saves the fp32 softmax (in place), target mask, targets",
    )
    copy = 0 if dims.p is DType.fp32 else T * V * dims.p.itemsize
    return LossPeaks(
        copy,
        copy,
        "loss: vocab_parallel_cross_entropy",
        "loss: backward (bf16 gradient of the logits)",
    )


def native_fused_cross_entropy(sc: Scope, dims: Dims) -> LossPeaks:
    """``fusions/fused_cross_entropy.py`` (``--cross-entropy-loss-fusion``, native): the same
    functions under ``jit_fuser`` (torch.compile), whose functionalised in-place ops make the
    exp/softmax a new fp32 tensor beside the fp32 copy while the forward runs (saved: the
    softmax); ``calculate_gradients`` likewise writes a new fp32 gradient before its bf16
    cast."""
    T, V = dims.T, dims.V
    sc.add(
        "loss.fused_vocab_parallel_cross_entropy",
        OUT,
        [Saved("loss.softmax", T * V, DType.fp32), *_labels(dims)],
        5 * T * V,
        "fused_vocab_parallel_cross_entropy (compiled): saves the fp32 softmax, mask, targets",
    )
    p = dims.p.itemsize
    return LossPeaks(
        T * V * (p + 4),
        T * V * (p + 4),
        "loss: fused_vocab_parallel_cross_entropy",
        "loss: calculate_gradients (fp32 and bf16 gradients)",
    )


def te_cross_entropy(sc: Scope, dims: Dims) -> LossPeaks:
    """TE ``cross_entropy.py`` ``CrossEntropyFunction`` (``--cross-entropy-fusion-impl te``,
    triton ``cross_entropy_forward``): reads the bf16 logits and writes the gradient at once
    into ``grad_input = torch.empty_like(_input, dtype=torch.float32)``, which it saves; no
    fp32 copy of the logits. Backward scales it and autograd casts it to the logits' dtype."""
    T, V = dims.T, dims.V
    sc.add(
        "loss.te_cross_entropy",
        OUT,
        [Saved("loss.grad_input", T * V, DType.fp32)],
        5 * T * V,
        "TE CrossEntropyFunction: saves the fp32 gradient",
    )
    p = dims.p.itemsize
    return LossPeaks(
        T * V * p, T * V * p, "loss: te cross_entropy", "loss: backward (bf16 gradient)"
    )


LOSSES = {
    CrossEntropyFusion.none: vocab_parallel_cross_entropy,
    CrossEntropyFusion.native: native_fused_cross_entropy,
    CrossEntropyFusion.te: te_cross_entropy,
}
