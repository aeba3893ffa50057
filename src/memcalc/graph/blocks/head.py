"""What runs after the last block: the final norm, the LM head and the loss."""

from __future__ import annotations

from memcalc.graph.blocks.linear import linear
from memcalc.graph.blocks.norms import norm
from memcalc.graph.ops import Component, Saved
from memcalc.graph.scope import Dims, Scope
from memcalc.spec.families.base import Implementation
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import DType, Loss

OUT = Component.output


def head_and_loss(
    sc: Scope, spec: ModelSpec, impl: Implementation, dims: Dims, loss: Loss
) -> tuple[Saved, tuple[Saved, ...]]:
    """Final norm, LM head (tied to the embedding or its own weight), optional logit
    soft-capping (Gemma 2: ``tanh(logits / cap) * cap`` saves the tanh result), then the loss.
    Returns the logits and the tensors that exist only around the loss."""
    T, h = dims.T, dims.h
    last = Saved("final.in", dims.T_rep * h, dims.r)
    final = norm(
        sc,
        impl.names["final_norm"],
        last,
        dims.T_rep,
        h,
        spec.norm,
        dims.stat_dtype,
        bias=spec.norm_bias,
        kernel=impl.norm_kernel,
        cpu=dims.cpu,
    )
    linear(
        sc,
        impl.names["lm_head"],
        OUT,
        final,
        T,
        h,
        dims.V,
        dims.p,
        owns_weight=not spec.tie_embeddings,
    )
    if spec.final_softcap is not None:
        sc.add(
            "logits.softcap",
            OUT,
            [Saved("logits.softcap_tanh", T * dims.V, dims.p)],
            3 * T * dims.V,
            "aten.tanh (final logit soft-capping): saves result",
        )
    return cross_entropy(sc, dims, loss, labels_view=impl.labels_view)


def cross_entropy(
    sc: Scope, dims: Dims, loss: Loss, *, labels_view: bool = False
) -> tuple[Saved, tuple[Saved, ...]]:
    """HF ForCausalLMLoss: ``logits.float()``, then ``cross_entropy`` = ``log_softmax`` (saves
    its fp32 output, b*s*V) + ``nll_loss`` (saves the shifted int64 labels and the fp32
    total_weight). The labels are padded to s+1 and sliced, a view when b == 1 and a copy
    otherwise; ``labels_view``: the target is the batch's own (b*s) labels, flattened
    (torchtitan ``cross_entropy_loss``). A fused/chunked loss saves no b*s*V tensor."""
    T, V = dims.T, dims.V
    logits = Saved("logits", T * V, dims.p)
    if loss is Loss.fused:
        sc.add(
            "loss.fused_cross_entropy",
            OUT,
            [Saved("labels", T, DType.int64)],
            6 * T * V,
            "fused linear cross-entropy (e.g. Liger): saves no b*s*V tensor",
        )
        return logits, ()
    logp = Saved("log_softmax", T * V, DType.fp32)
    labels = Saved("labels", (dims.s + 1) if dims.b == 1 and not labels_view else T, DType.int64)
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
