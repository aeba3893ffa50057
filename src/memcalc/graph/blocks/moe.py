"""Mixture-of-experts MLP: the router, the routed experts as HF runs them, shared experts, and
the load-balancing loss's share of the epilogue.

Sources (transformers 5.24): the routers ``MixtralTopKRouter``, ``Qwen2MoeTopKRouter``,
``Qwen3MoeTopKRouter``, ``DeepseekV2TopkRouter``, ``DeepseekV3TopkRouter``; the experts'
default implementation ``grouped_mm_experts_forward`` (``integrations/moe.py``, chosen by
``PreTrainedModel.get_correct_experts_implementation``); ``Qwen2MoeSparseMoeBlock.forward``,
``DeepseekV3MoE.forward``; ``load_balancing_loss_func``.

Notation: T tokens, h hidden, E routed experts (``dims.experts`` of them on this rank), k top-k,
m one expert's width, S the rows the experts process (``dispatch_rows``: T*k, dropless).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from memcalc.graph.blocks.linear import linear
from memcalc.graph.blocks.mlp import activation, mlp
from memcalc.graph.ops import Component, Gemm, ParamTensor, Saved
from memcalc.graph.scope import Dims, Scope, matmul_flops, tensor
from memcalc.spec.families.base import Implementation
from memcalc.spec.model import ModelSpec, MoeSpec, Router
from memcalc.spec.training import DType

MLP = Component.mlp


def dispatch_rows(moe: MoeSpec, dims: Dims) -> int:
    """Rows the routed experts of this rank process: their dispatch buffers' length.

    Dropless (HF, Megablocks; Gale et al. 2022): every token's k choices, T*k rows on a rank
    that holds all E experts. Under expert parallelism the all-to-all brings the T*k rows of
    each of the ep ranks to the experts that take them; a rank holding ``dims.experts`` = E/ep
    of them gets its share ep*T*k*E_local/E (= T*k on average) scaled by
    ``dims.moe_imbalance`` -- the busiest rank's load -- and never more than all ep*T*k. With
    a capacity factor (Megatron-core ``get_capacity``: ``ceil(T*k / E * factor)`` rows per
    expert from each source rank, tokens beyond it dropped, buffers padded to it), every local
    expert's buffer is ep times that long, whatever the imbalance.

    >>> moe = MoeSpec(num_experts=8, top_k=2, expert_size=64)
    >>> d = Dims(b=2, s=512, h=64, a=4, d=16, g=4, m=64, V=10, p=DType.bf16, r=DType.bf16,
    ...          stat_dtype=DType.fp32, experts=8, moe_imbalance=1.25)
    >>> dispatch_rows(moe, d)  # all experts here: 1024 tokens x 2
    2048
    >>> from dataclasses import dataclass, replace
    >>> dispatch_rows(moe, replace(d, experts=2, ep=4))  # ep 4: the busiest rank's 2 experts
    2560
    >>> dispatch_rows(moe, replace(d, capacity_factor=1.0))  # 8 buffers of 256 rows
    2048
    """
    routed = dims.T * moe.top_k
    local = dims.experts or moe.num_experts
    if dims.capacity_factor is not None:
        return local * dims.ep * math.ceil(routed / moe.num_experts * dims.capacity_factor)
    if local == moe.num_experts:
        return routed  # every expert here: all T*k rows, however they are spread
    share = routed * dims.ep * local / moe.num_experts
    return min(routed * dims.ep, math.ceil(share * dims.moe_imbalance))


def moe_mlp(sc: Scope, spec: ModelSpec, impl: Implementation, dims: Dims, x: Saved) -> Saved:
    """The MoE MLP of one layer on its (normed) input ``x``: (Qwen2-MoE: the shared expert
    first,) the router, the routed experts, the shared experts (and Qwen2-MoE's sigmoid gate
    on them), the sum."""
    moe = spec.moe
    assert moe is not None  # a moe layer type requires spec.moe (ModelSpec._check)
    names = impl.names
    T, h, p = dims.T, dims.h, dims.p
    if moe.router_jitter > 0:
        # MixtralSparseMoeBlock: hidden_states *= empty_like(hidden_states).uniform_(...) --
        # in place on the norm output; the multiply saves the noise (it needs no gradient).
        sc.add(
            f"{names['router']}.jitter",
            MLP,
            [Saved(f"{names['router']}.jitter_noise", x.numel, x.dtype)],
            x.numel,
            "aten.mul_(x, noise): saves other (the noise)",
            grads=2 * x.nbytes,
        )
    shared: Saved | None = None
    if moe.shared_size and impl.shared_expert_first:
        shared = mlp(sc, spec, impl, dims, x, dims.shared_m, prefix=names["shared_experts"])
    weights = router(sc, moe, impl, dims, x)
    # the shared expert's output gradient waits for its backward, which runs last
    pending = shared.nbytes if shared is not None else 0
    routed_experts(sc, spec, moe, impl, dims, x, weights, pending=pending)
    if moe.shared_size and shared is None:
        shared = mlp(sc, spec, impl, dims, x, dims.shared_m, prefix=names["shared_experts"])
    if shared is not None and moe.shared_expert_gate:
        # Qwen2MoeSparseMoeBlock: sigmoid(shared_expert_gate(x)) * shared_expert(x)
        gate_name = names["shared_expert_gate"]
        gate = linear(sc, gate_name, MLP, x, T, h, 1, p)
        sig = Saved(f"{gate_name}.sigmoid", T, gate.dtype)
        sc.add(f"{gate_name}.sigmoid", MLP, [sig], 4 * T, "aten.sigmoid: saves result")
        sc.add(
            f"{gate_name}.mul",
            MLP,
            [sig, shared],
            T * h,
            "aten.mul.Tensor(sigmoid, shared): saves self and other",
            grads=3 * shared.nbytes,
        )
    if shared is not None:
        sc.add(f"{names['experts']}.add_shared", MLP, [], T * h, "aten.add: saves nothing")
    return tensor("mlp.moe_out", dims.T_rep, h, p)


def router(sc: Scope, moe: MoeSpec, impl: Implementation, dims: Dims, x: Saved) -> Saved:
    """The router on ``x``: logits, scores, top-k, renormalisation. Returns the routing weights
    (T x k) the experts multiply their outputs by.

    Logits: ``F.linear(x, W)`` (W: E x h) in the activation dtype; DeepSeek casts both to fp32
    first (``hidden_states.type(fp32)``, ``weight.type(fp32)``): for a 16-bit model two fp32
    copies the matmul saves -- the input (T x h) and the weight (E x h, an activation here,
    though its source is a parameter); under autocast the linear casts them to 16 bits again.
    Scores: ``softmax(logits, dtype=fp32)`` saves its fp32 result (T x E); DeepSeek-V3's
    ``sigmoid`` saves its result in the logits' dtype. Choice: ``topk`` saves its int64 indices
    (T x k); DeepSeek-V2's group-limited greedy first ``masked_fill`` s the scores (saves the
    bool mask, T x E); DeepSeek-V3 picks by ``scores + e_score_correction_bias`` within the
    best groups -- a branch whose values nothing differentiates (freed before backward, not
    counted) -- and ``gather`` s the weights from the scores (saves its int64 index, T x k, and
    the scores). Renormalisation ``w /= w.sum(-1, keepdim=True)`` runs in place: it saves a
    copy of w and the sum (T x k, T x 1). Qwen casts the weights back to the logits' dtype.
    """
    T, k = dims.T, moe.top_k
    name = impl.names["router"]
    logits = _router_logits(sc, moe, name, dims, x)
    if moe.router is Router.sigmoid:
        values = _sigmoid_choice(sc, name, T, moe.num_experts, k, logits)
    else:
        values = _softmax_choice(sc, moe, name, T, k)
    if moe.norm_topk_prob:
        _renormalise(sc, name, T, k, values)
    if impl.router_weights_to_logits_dtype:
        values = logits
    return Saved(f"{name}.weights", T * k, values)


def _router_logits(sc: Scope, moe: MoeSpec, name: str, dims: Dims, x: Saved) -> DType:
    """``F.linear(x, W)`` (W: E x h) in the activation dtype, or DeepSeek's fp32 matmul
    (``_fp32_router``) for a 16-bit model without autocast. Returns the logits' dtype."""
    T, h, E = dims.T, dims.h, moe.num_experts
    if moe.router_fp32 and sc.autocast is None and dims.p is not DType.fp32:
        _fp32_router(sc, name, x, T, h, E)
        return DType.fp32
    logits = linear(sc, name, MLP, x, T, h, E, dims.p).dtype
    _wrapped_router(sc, name, x, T, h, E, saves_weight=True, dtype=dims.p)
    return logits


def _fp32_router(sc: Scope, name: str, x: Saved, T: int, h: int, E: int) -> None:
    """DeepSeek's router matmul: ``F.linear(hidden_states.type(fp32), weight.type(fp32))``
    saves the fp32 copy of the input (T x h) for the weight's gradient and of the weight
    (E x h, an activation here, though its source is a parameter) for the input's."""
    # the router's weight is an nn.Parameter of its own module (not nn.Linear): frozen
    # under LoRA, when mm saves the input copy no more (only mat2's gradient needs it)
    trained = sc.trainable(name)
    wrapped = _wrapped_router(sc, name, x, T, h, E, saves_weight=False)
    copies = [Saved(f"{name}.in_fp32", T * h, DType.fp32)] if trained or wrapped else []
    # a weight kept in fp32 (from_pretrained's _keep_in_fp32_modules_strict): .type() is
    # the weight itself, no copy -- but for PEFT's merged W + BA, a tensor of its own
    weight_dtype = DType.fp32 if sc.router_weight_fp32 else sc.param_dtype(name)
    if x.needs_grad and (wrapped or not sc.router_weight_fp32):
        copies.append(Saved(f"{name}.weight_fp32", E * h, DType.fp32))
    sc.add(
        name,
        MLP,
        copies,
        matmul_flops(T, h, E),
        "aten.mm(x.float(), W.float()): saves the fp32 copies whose partner needs a "
        "gradient (DeepSeek routers)",
        grads=(T * h + T * E) * 4,
        params=E * h if trained else 0,
        weights=(ParamTensor(f"{name}.weight", (E, h), "mlp", trained, weight_dtype),),
        work=Gemm(T, h, E, DType.fp32, 1, x.needs_grad, trained),
    )


def _sigmoid_choice(sc: Scope, name: str, T: int, E: int, k: int, logits: DType) -> DType:
    """DeepSeek-V3's ``sigmoid`` scores (saves its result in the logits' dtype) and the
    ``gather`` of the chosen weights from them (saves its int64 index, T x k, and the scores).
    The choice itself -- ``scores + e_score_correction_bias`` within the best groups -- is a
    branch whose values nothing differentiates (freed before backward, not counted). Returns
    the weights' dtype."""
    scores = Saved(f"{name}.scores", T * E, logits)
    sc.add(f"{name}.sigmoid", MLP, [scores], 4 * T * E, "aten.sigmoid: saves result")
    sc.add(
        f"{name}.gather",
        MLP,
        [Saved(f"{name}.topk_index", T * k, DType.int64), scores],
        T * k,
        "aten.gather(scores, 1, topk_index): saves self and index (the biased group top-k "
        "that chose the index saves nothing that backward reaches)",
    )
    return logits


def _softmax_choice(sc: Scope, moe: MoeSpec, name: str, T: int, k: int) -> DType:
    """``softmax(logits, dtype=fp32)`` (saves its fp32 result, T x E), DeepSeek-V2's
    group-limited greedy ``masked_fill`` (saves the bool mask, T x E) and ``topk`` (saves its
    int64 indices, T x k). Returns the weights' dtype: fp32."""
    E = moe.num_experts
    scores = Saved(f"{name}.probs", T * E, DType.fp32)
    sc.add(f"{name}.softmax", MLP, [scores], 5 * T * E, "aten._softmax (fp32): saves result")
    if moe.group_limited:
        sc.add(
            f"{name}.group_mask",
            MLP,
            [Saved(f"{name}.group_mask", T * E, DType.bool)],
            T * E,
            "aten.masked_fill(scores, ~group_mask, 0): saves the mask",
        )
    sc.add(
        f"{name}.topk",
        MLP,
        [Saved(f"{name}.topk_index", T * k, DType.int64)],
        T * E,
        "aten.topk: saves indices",
    )
    return DType.fp32


def _renormalise(sc: Scope, name: str, T: int, k: int, values: DType) -> None:
    """``norm_topk_prob``: ``w /= w.sum(-1, keepdim=True)`` runs in place: it saves a copy of
    w and the sum (T x k, T x 1)."""
    sc.add(
        f"{name}.renormalise",
        MLP,
        [Saved(f"{name}.topk_copy", T * k, values), Saved(f"{name}.topk_sum", T, values)],
        2 * T * k,
        "aten.div_(w, w.sum(-1)): saves a copy of self (in place) and other",
    )


def _wrapped_router(
    sc: Scope,
    name: str,
    x: Saved,
    T: int,
    h: int,
    E: int,
    *,
    saves_weight: bool,
    dtype: DType = DType.fp32,
) -> bool:
    """PEFT ``lora.ParamWrapper`` on the router's ``weight`` (E x h, 2-D: one "expert"):
    ``lora_A`` (r x h) and ``lora_B`` (E x r) in the adapter dtype; on each forward
    ``_activate_lora`` parametrizes the weight as ``W + (B @ A * scaling).to(W.dtype)``
    (``get_delta_weight`` -> ``_LoraParameterProxy.forward``), so the router's matmul gets a
    weight that needs a gradient: ``F.linear`` saves its input (for the weight's gradient) and,
    when the input needs one, the merged weight (E x h; ``saves_weight``: the DeepSeek fp32
    router saves its fp32 copy of it instead). True when the router is wrapped."""
    ft = sc.finetune
    r = ft.wrap_rank(f"{name}.weight") if ft is not None else 0
    if not r:
        return False
    assert ft is not None
    adapter = ft.adapter_dtype or dtype
    saves: list[Saved] = []
    if saves_weight:
        saves = [sc.matmul_input(x, name)]
        if x.needs_grad and sc.autocast is None:
            # under autocast the frozen linear's weight cast (``linear``) is this cast of W + BA
            merged = sc.param_dtype(name) or dtype
            saves.append(Saved(f"{name}.merged_weight", E * h, merged))
    sc.add(
        f"{name}.lora",
        MLP,
        saves,
        matmul_flops(E, r, h),
        "peft lora.ParamWrapper (router weight): F.linear(x, W + BA) saves x and W + BA",
        grads=2 * E * h * dtype.itemsize,
        params=r * (h + E),
        weights=(
            ParamTensor(f"{name}.lora_A.weight", (r, h), "mlp", True, adapter),
            ParamTensor(f"{name}.lora_B.weight", (E, r), "mlp", True, adapter),
        ),
    )
    return True


def _expert_wrapper(
    sc: Scope, name: str, E: int, n_in: int, n_out: int, weight: DType, saves_merged: bool
) -> bool:
    """PEFT ``lora.ParamWrapper`` on a fused 3-D expert parameter (E x n_out x n_in):
    ``lora_A`` (R*E x n_in), ``lora_B`` (n_out x R*E), R the wrapper's rank (2r for the fused
    gate_up pair). One adapter on a multi-expert stack takes ``_LoraFactorsProxy``
    (``_activate_lora``): ``get_delta_factors`` reshapes the factors to (E x R x n_in) and
    (E x n_out x R) and casts them to the weight's dtype (``lhs.to(param.dtype)``: copies when
    the adapters are fp32), and ``torch.baddbmm(W, lhs, rhs)`` (autocast off) makes the merged
    stack W + BA (E x n_out x n_in, the weight's dtype), which the grouped matmul then saves
    when its input needs a gradient; baddbmm saves both factors. True when wrapped."""
    ft = sc.finetune
    R = ft.wrap_rank(name) if ft is not None else 0
    if not R:
        return False
    assert ft is not None
    adapter = ft.adapter_dtype or weight
    saves: list[Saved] = []
    if adapter is not weight:
        saves = [
            Saved(f"{name}.lora_lhs", E * n_out * R, weight),
            Saved(f"{name}.lora_rhs", E * R * n_in, weight),
        ]
    if saves_merged:
        saves.append(Saved(f"{name}.merged", E * n_out * n_in, weight))
    sc.add(
        f"{name}.lora",
        MLP,
        saves,
        2 * E * n_out * R * n_in,
        "peft lora.ParamWrapper (fused experts): baddbmm(W, lhs, rhs) saves lhs and rhs; "
        "the grouped matmul saves the merged W + BA",
        grads=E * n_out * n_in * weight.itemsize,
        params=R * E * (n_in + n_out),
        weights=(
            ParamTensor(f"{name}.lora_A.weight", (R * E, n_in), "mlp", True, adapter),
            ParamTensor(f"{name}.lora_B.weight", (n_out, R * E), "mlp", True, adapter),
        ),
    )
    return True


def routed_experts(
    sc: Scope,
    spec: ModelSpec,
    moe: MoeSpec,
    impl: Implementation,
    dims: Dims,
    x: Saved,
    weights: Saved,
    *,
    pending: int = 0,
) -> None:
    """HF ``grouped_mm_experts_forward`` on the S = ``dispatch_rows`` rows of this rank.

    ``sort`` the flat expert ids; ``x[perm // k]`` gathers a copy of the input (S x h; the
    index saves its int64 indices); ``weights[perm]`` (saves perm); ``histc`` + ``cumsum``
    give the int32 offsets (E) every grouped matmul saves; ``_grouped_mm(x_g, gate_up_proj)``
    (saves its input, S x h) outputs S x 2m, whose halves ``act(gate) * up`` save (one
    storage), then the product (S x m) that the down ``_grouped_mm`` saves; ``out * w_g``
    saves both (S x h, and S x 1 in the weights' dtype -- fp32 but for Qwen); ``[inv_perm]``
    saves inv_perm; ``view(T, k, h).sum(1)`` saves nothing. The experts compute in their
    weights' dtype (``input.to(weight.dtype)``): fp32 under autocast, whose lists do not have
    grouped_mm. FLOPs: 2*S*h*2m + 2*S*m*h, i.e. T*k times one expert's matmul FLOPs.

    Backward (``Op.grad_bytes``), first: ``.to()``'s gradient in the weighted dtype (T x h),
    ``sum(1)``'s expand copied by view's backward and index's zeros and ``index_put`` result
    (S x h each) -- the step's largest moment in the experts; ``pending``: gradient bytes alive
    throughout (a shared expert's output gradient, when it ran first: its backward is last).
    """
    ex = impl.names["experts"]
    h, m = dims.h, dims.expert_m
    stack = _expert_stack(sc, moe, dims, ex, pending)
    gathered = _dispatch(sc, ex, stack.rows, h, x, stack.dtype)
    E, weight_dtype = stack.experts, stack.weight_dtype
    gu_wrapped = _expert_wrapper(
        sc, f"{ex}.gate_up_proj", E, h, 2 * m, weight_dtype, saves_merged=x.needs_grad
    )
    gu_saves = stack.trained or gu_wrapped  # the input, for the (merged) weight's gradient
    gate_up = _grouped_mm(sc, stack, "gate_up_proj", gathered, h, 2 * m, saves_input=gu_saves)
    product = _gated_product(sc, spec, stack, gate_up, m)
    dn_wrapped = _expert_wrapper(
        sc, f"{ex}.down_proj", E, m, h, weight_dtype, saves_merged=x.needs_grad or gu_wrapped
    )
    dn_saves = stack.trained or dn_wrapped
    down = _grouped_mm(sc, stack, "down_proj", product, m, h, saves_input=dn_saves)
    _combine(sc, moe, dims, ex, stack.rows, down, weights, stack.dtype, pending)


@dataclass(frozen=True)
class _ExpertStack:
    """One layer's routed experts on this rank, as ``grouped_mm_experts_forward`` runs them:
    what its grouped matmuls share."""

    name: str
    experts: int
    """E: the experts on this rank."""
    rows: int
    """S: the rows they process (``dispatch_rows``)."""
    active: int
    """The experts of this rank one token uses: min(k, E)."""
    dtype: DType
    """The expert weights' dtype, in which they compute."""
    trained: bool
    param_dtype: DType | None
    weight_dtype: DType
    """The stored weights' dtype (a k-bit upcast's fp32, else ``dtype``)."""
    offsets: Saved
    """The int32 group offsets (E) every grouped matmul saves."""
    pending: int
    """Gradient bytes alive throughout their backward (``routed_experts``)."""


def _expert_stack(sc: Scope, moe: MoeSpec, dims: Dims, ex: str, pending: int) -> _ExpertStack:
    """The routed experts' shared facts: their count, rows, dtype, and the trainability and
    storage dtype of ``gate_up_proj``, which both grouped matmuls read."""
    E = dims.experts or moe.num_experts
    dtype = DType.fp32 if sc.autocast is not None else dims.p  # the expert weights' dtype
    # The experts are fused nn.Parameters, not nn.Linear: PEFT's LoRA (and bitsandbytes'
    # quantization) leave them frozen base weights unless targeted by name; _grouped_mm saves
    # its input only for mat2's gradient (derivatives.yaml: mat2 uses self), offs always.
    trained = sc.trainable(f"{ex}.gate_up_proj")
    return _ExpertStack(
        name=ex,
        experts=E,
        rows=dispatch_rows(moe, dims),
        active=min(moe.top_k, E),
        dtype=dtype,
        trained=trained,
        param_dtype=sc.param_dtype(f"{ex}.gate_up_proj"),
        weight_dtype=sc.param_dtype(f"{ex}.gate_up_proj") or dtype,
        offsets=Saved(f"{ex}.offsets", E, DType.int32),
        pending=pending,
    )


def _grouped_mm(
    sc: Scope, stack: _ExpertStack, proj: str, x: Saved, n_in: int, n_out: int, *, saves_input: bool
) -> Saved:
    """``torch._grouped_mm(x, proj)`` over the stacked (E x n_out x n_in) weight ``proj``: saves
    the offsets, and its input ``x`` when ``saves_input`` (for the weight's gradient). Returns
    its (S x n_out) output."""
    ex, E, S, dtype = stack.name, stack.experts, stack.rows, stack.dtype
    source = (
        "aten._grouped_mm: saves self and offs (mat2 is the parameter)"
        if stack.trained
        else "aten._grouped_mm with frozen experts (LoRA base): saves offs only"
    )
    # the grouped GEMMs: E problems of S / E rows on average (fp8 grouped GEMMs under fp8
    # training: Transformer Engine's GroupedLinear)
    rows = -(-S // E)
    mm_dtype = DType.fp8 if sc.fp8_linears else dtype
    sc.add(
        f"{ex}.{proj}",
        MLP,
        [stack.offsets, x] if saves_input else [stack.offsets],
        matmul_flops(S, n_in, n_out),
        source,
        grads=(S * n_in + S * n_out) * dtype.itemsize + stack.pending,
        params=E * n_out * n_in if stack.trained else 0,
        weights=(
            ParamTensor(
                f"{ex}.{proj}",
                (E, n_out, n_in),
                "mlp",
                stack.trained,
                stack.param_dtype,
                # this rank's share of a token's experts
                active_numel=stack.active * n_out * n_in,
            ),
        ),
        work=Gemm(rows, n_in, n_out, mm_dtype, E, True, stack.trained),
    )
    return Saved(f"{ex}.{proj}.out", S * n_out, dtype)


def _gated_product(
    sc: Scope, spec: ModelSpec, stack: _ExpertStack, gate_up: Saved, m: int
) -> Saved:
    """``act(gate) * up`` on the halves of the (S x 2m) gate_up output: the activation, then
    the product, which saves both (one storage). Returns the (S x m) product."""
    ex, S, dtype = stack.name, stack.rows, stack.dtype
    activation(sc, f"{ex}.act", gate_up, spec.activation)
    act = Saved(f"{ex}.act.out", S * m, dtype)
    sc.add(
        f"{ex}.gate_mul_up",
        MLP,
        [act, gate_up],
        S * m,
        "aten.mul.Tensor(act(gate), up): saves self and other (up: a view of gate_up)",
        grads=3 * S * m * dtype.itemsize + stack.pending,
    )
    return Saved(f"{ex}.product", S * m, dtype)


def _dispatch(sc: Scope, ex: str, S: int, h: int, x: Saved, dtype: DType) -> Saved:
    """``x[perm // k]`` and ``weights[perm]`` (each saves its int64 indices): the gathered
    input copy, cast to the experts' dtype when it differs."""
    sc.add(
        f"{ex}.gather",
        MLP,
        [Saved(f"{ex}.token_index", S, DType.int64)],
        0,
        "aten.index(x, perm // k): saves indices",
    )
    gathered = Saved(f"{ex}.gathered", S * h, x.dtype)
    if x.dtype is not dtype:
        gathered = Saved(f"{ex}.gathered.cast", S * h, dtype)  # input.to(weight.dtype)
    sc.add(
        f"{ex}.weights_gather",
        MLP,
        [Saved(f"{ex}.perm", S, DType.int64)],
        0,
        "aten.index(weights, perm): saves indices",
    )
    return gathered


def _combine(
    sc: Scope,
    moe: MoeSpec,
    dims: Dims,
    ex: str,
    S: int,
    down: Saved,
    weights: Saved,
    dtype: DType,
    pending: int,
) -> None:
    """``out * w_g`` (saves both), ``[inv_perm]`` (saves inv_perm) and the sum over the k
    experts of each token."""
    h = dims.h
    w_g = Saved(f"{ex}.weights_sorted", S, weights.dtype)
    weighted = DType.fp32 if DType.fp32 in (dtype, weights.dtype) else dtype
    sc.add(
        f"{ex}.weight_outputs",
        MLP,
        [down, w_g],
        S * h,
        "aten.mul.Tensor(out, w_g.unsqueeze(-1)): saves self and other",
        grads=2 * S * h * weighted.itemsize + pending,
    )
    sc.add(
        f"{ex}.unsort",
        MLP,
        [Saved(f"{ex}.inv_perm", S, DType.int64)],
        S * h,
        "aten.index(weighted, inv_perm): saves indices; view(T, k, h).sum(1) saves nothing",
        grads=(3 * S + dims.T) * h * weighted.itemsize + pending,
    )
    # the (T x h) gradient of the sum (the .to() copy's, in the weighted dtype): with the
    # block rebuilt by a checkpoint, ToCopyBackward and the sum's backward run before the
    # recompute and it is gone by index's backward (measured: Mixtral bf16 and Qwen3-MoE,
    # full and every-k recompute). Beside a shared expert it stays: the sum of the two
    # outputs hands the same gradient to both branches (measured: DeepSeek-V2).
    if not moe.shared_size:
        sc.ops[-1] = replace(sc.ops[-1], recompute_freed=dims.T * h * weighted.itemsize)


def aux_loss(sc: Scope, spec: ModelSpec, impl: Implementation, dims: Dims) -> tuple[Saved, ...]:
    """HF ``load_balancing_loss_func`` (Switch Transformer eq. 4-6; Mixtral, Qwen-MoE with
    ``output_router_logits``): per MoE layer, ``softmax(router_logits)`` in the logits' dtype
    saves its result (T x E); ``topk`` of it feeds ``histc`` only (its indices are on a branch
    backward never reaches: freed, not counted); ``tokens_per_expert * probs_per_expert``
    saves the fp32 (E) counts once. Returns the router logits of every MoE layer, which the
    model output holds until the loss has been computed (transient around the loss)."""
    moe = spec.moe
    assert moe is not None
    T, E, n = dims.T, moe.num_experts, spec.moe_layers
    logits = DType.fp32 if moe.router_fp32 and sc.autocast is None else dims.p
    name = impl.names["aux_loss"]
    sc.add(
        f"{name}.softmax",
        Component.output,
        [Saved(f"{name}.probs", n * T * E, logits)],  # n storages of T x E, one entry
        5 * T * E * n,
        f"aten._softmax of each of the {n} MoE layers' router logits: saves the results",
    )
    sc.add(
        f"{name}.mul",
        Component.output,
        [Saved(f"{name}.tokens_per_expert", E, DType.fp32)],
        E,
        "aten.mul(tokens_per_expert, router_prob_per_expert): saves self",
    )
    return (Saved("router_logits", n * T * E, logits),)
