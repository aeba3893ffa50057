"""Megatron-core's ``MoELayer`` with TE (``megatron/core/transformer/moe/``): the pre-MLP
``TENorm``, ``TopKRouter``, the token dispatcher, the routed experts (``TEGroupedMLP`` or a
``SequentialMLP`` of TE linears) and the shared experts.

Routing is data-dependent; the rank's experts get their fair share of the routed tokens times
``Dims.moe_imbalance`` (with expert parallelism; every token with all experts local), or their
capacity (``moe_expert_capacity_factor``).
"""

from __future__ import annotations

import math

from memcalc.graph.blocks.megatron.mlp import activation
from memcalc.graph.blocks.megatron.te_modules import gemm_work, te_norm
from memcalc.graph.ops import Component, Gemm, ParamTensor, Saved
from memcalc.graph.scope import Dims, Scope, matmul_flops
from memcalc.spec.megatron import MegatronOptions, TokenDispatcher
from memcalc.spec.model import Mlp, ModelSpec, MoeSpec
from memcalc.spec.training import DType

MLP = Component.mlp


def routed_tokens(dims: Dims, moe: MoeSpec, etp: int) -> int:
    """Rows the rank's experts compute. Both dispatchers bring each expert-parallel rank the
    tokens routed to its E/ep experts from the tp x ep ranks of its group and, with expert
    tensor parallelism, gather them over the etp ranks (``token_dispatcher.py``
    ``MoEAllGatherTokenDispatcher.token_dispatch`` / ``MoEAlltoAllTokenDispatcher
    .dispatch_postprocess``): on the busiest rank T_rep x k x etp x imbalance rows for dropless
    routing, E/ep experts x ``get_capacity`` (ceil(T x k / E x factor), ``moe_utils.py``) with a
    capacity factor."""
    share = dims.T_rep * moe.top_k * etp
    if dims.capacity_factor is not None:
        tokens = dims.T_rep * etp * dims.ep
        capacity = math.ceil(tokens * moe.top_k / moe.num_experts * dims.capacity_factor)
        return dims.experts * capacity
    if dims.ep == 1:
        return share
    return math.ceil(share * dims.moe_imbalance)


def router(sc: Scope, dims: Dims, ln: Saved, moe: MoeSpec) -> None:
    """``TopKRouter`` (``moe/router.py``): ``RouterGatingLinearFunction`` saves its input (the
    norm's output) and the (E x h) weight and returns fp32 logits (``--moe-router-dtype``);
    the top-k softmax keeps the fp32 scores and the routing map (T_rep x E each)."""
    T, E = dims.T_rep, moe.num_experts
    sc.add(
        "mlp.router",
        MLP,
        [
            ln,
            Saved("mlp.router.scores", T * E, DType.fp32),
            Saved("mlp.router.map", T * E, DType.bool),
        ],
        matmul_flops(T, dims.h, E),
        "RouterGatingLinearFunction: saves inp, weight; topk softmax saves the fp32 scores",
        grads=2 * T * E * 4,
        params=E * dims.h,
        weights=(ParamTensor("mlp.router.weight", (E, dims.h), "mlp"),),
        # RouterGatingLinearFunction: a 16-bit GEMM whatever the fp8 recipe
        work=Gemm(T, dims.h, E, sc.autocast or dims.p, 1, True, True),
    )


def dispatch(sc: Scope, dims: Dims, rows: int, dispatcher: TokenDispatcher, moe: MoeSpec) -> Saved:
    """The dispatcher's saved tensors: the permutation's index maps and the rows' probs
    (``moe_utils.py`` ``permute``, ``masked_select`` of the probs); its exchanged buffers
    (the all-gathered hidden states live in Megatron's global buffer:
    ``gather_from_sequence_parallel_region(..., use_global_buffer=True)``, see
    ``model.global_memory_buffer``; the all-to-all outputs are freed once permuted) are
    not saved. Returns the (rows x h) tokens the experts' fc1 saves."""
    sc.add(
        f"mlp.token_dispatcher.{dispatcher.value}",
        MLP,
        [
            Saved("mlp.dispatch.row_map", rows, DType.int64),
            Saved("mlp.dispatch.probs", rows, DType.fp32),
        ],
        0,
        f"MoE{dispatcher.value.capitalize()}TokenDispatcher: saves the permutation map and probs",
        grads=2 * rows * dims.h * dims.p.itemsize,
    )
    return Saved("mlp.dispatch.tokens", rows * dims.h, dims.p)


def experts(
    sc: Scope,
    spec: ModelSpec,
    dims: Dims,
    tokens: Saved,
    rows: int,
    width: int,
    opts: MegatronOptions,
) -> None:
    """The E/ep local experts (``moe/experts.py`` ``TEGroupedMLP.forward`` /
    ``SequentialMLP.forward``): fc1 (TE ``GroupedLinear`` / ``Linear``) saves the dispatched
    tokens, the activation weighs its output by the routing probs -- fused SwiGLU
    (``weighted_bias_swiglu_impl``) saves its input and the probs; otherwise ``act(x) * probs``
    saves the activation's input and output and the fp32 probs, and its fp32 product is cast
    back -- and fc2 saves the weighted activation."""
    gated = spec.mlp is Mlp.gated
    moe = spec.moe
    assert moe is not None
    n_out = 2 * width if gated else width
    local, p = dims.experts, dims.p
    sc.add(
        "mlp.experts.linear_fc1",
        MLP,
        [tokens],
        matmul_flops(rows, dims.h, n_out),
        "TE GroupedLinear / Linear: saves the dispatched tokens",
        grads=(rows * n_out + 2 * rows * dims.h) * p.itemsize,
        params=local * n_out * dims.h,
        weights=_expert_weights("mlp.experts.linear_fc1", n_out, dims.h, local, moe),
        # grouped: each local expert's share of the rows
        work=gemm_work(sc, MLP, -(-rows // max(1, local)), dims.h, n_out, p, max(1, local)),
    )
    fc1 = Saved("mlp.experts.linear_fc1.out", rows * n_out, p)
    act = _weighted_activation(sc, spec, dims, fc1, rows, width, opts)
    sc.add(
        "mlp.experts.linear_fc2",
        MLP,
        [act],
        matmul_flops(rows, width, dims.h),
        "TE GroupedLinear / Linear: saves the weighted activation",
        grads=(rows * width + 2 * rows * dims.h) * p.itemsize,
        params=local * width * dims.h,
        weights=_expert_weights("mlp.experts.linear_fc2", dims.h, width, local, moe),
        work=gemm_work(sc, MLP, -(-rows // max(1, local)), width, dims.h, p, max(1, local)),
    )


def _expert_weights(
    name: str, n_out: int, n_in: int, local: int, moe: MoeSpec
) -> tuple[ParamTensor, ...]:
    """The (n_out x n_in) weight of each of the ``local`` experts (TE ``GroupedLinear`` keeps
    ``weight{i}`` for each of its ``num_gemms``; ``SequentialMLP`` a TE linear per expert), of
    which a token uses its top-k of the E experts."""
    active = min(moe.top_k, moe.num_experts)
    return tuple(
        ParamTensor(
            f"{name}.weight{e}",
            (n_out, n_in),
            "mlp",
            active_numel=n_out * n_in * active // moe.num_experts,
        )
        for e in range(local)
    )


def _weighted_activation(
    sc: Scope,
    spec: ModelSpec,
    dims: Dims,
    fc1: Saved,
    rows: int,
    width: int,
    opts: MegatronOptions,
) -> Saved:
    """The activation of fc1's output, weighted by the routing probs: fused SwiGLU
    (``weighted_bias_swiglu_impl``, with ``bias_activation_fusion``) saves its input and the
    probs; otherwise ``act(x) * probs`` saves the activation's input and output and the fp32
    probs, and its fp32 product is cast back. Returns the (rows x width) input of fc2."""
    gated = spec.mlp is Mlp.gated
    fused = gated and opts.bias_activation_fusion
    act = activation(
        sc,
        "mlp.experts.activation",
        fc1,
        dims,
        width,
        gated=gated,
        fused=fused,
        act=spec.activation,
        rows=rows,
    )
    if not fused:
        sc.add(
            "mlp.experts.activation.probs_mul",
            MLP,
            [act],
            rows * width,
            "act(x) * permuted_probs (fp32 product, cast back): saves the activation output",
            grads=rows * width * (2 * dims.p.itemsize + 4),
        )
        act = Saved("mlp.experts.activation.weighted", rows * width, dims.p)
    return act


def moe_layer(
    sc: Scope, spec: ModelSpec, dims: Dims, x: Saved, opts: MegatronOptions
) -> tuple[Saved, dict[str, tuple[str, ...]]]:
    """The MoE sublayer on the residual stream ``x``: returns its output and, per
    output-discarding recompute module, the storages its checkpoint frees."""
    moe = spec.moe
    assert moe is not None
    etp = dims.etp
    ln = te_norm(sc, "pre_mlp_layernorm", x, dims.T_rep, dims.h, spec.norm)
    router(sc, dims, ln, moe)
    rows = routed_tokens(dims, moe, etp)
    tokens = dispatch(sc, dims, rows, opts.moe_token_dispatcher, moe)
    width = moe.expert_size // etp
    experts(sc, spec, dims, tokens, rows, width, opts)
    if moe.shared_size:
        from memcalc.graph.blocks.megatron.mlp import shared_expert_mlp

        shared_expert_mlp(sc, spec, dims, ln, moe.shared_size // dims.tp, opts)
    out = Saved("mlp.combine.out", dims.T_rep * dims.h, dims.p)
    discarded = {
        "layernorm": (ln.name,),
        "moe_act": ("mlp.experts.activation.out", "mlp.experts.activation.weighted"),
    }
    return out, discarded
