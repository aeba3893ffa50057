"""One decoder block, composed from its features: the norms in their placement, attention, the
MLP (dense or mixture-of-experts), dropout on each sublayer's output and the residual adds."""

from __future__ import annotations

from memcalc.graph.blocks.attention import self_attention
from memcalc.graph.blocks.mla import mla_attention
from memcalc.graph.blocks.mlp import mlp
from memcalc.graph.blocks.norms import norm
from memcalc.graph.ops import Block, Component, Saved
from memcalc.graph.scope import Dims, Scope, dropout
from memcalc.spec.families.base import Implementation
from memcalc.spec.model import LayerType, ModelSpec, NormPlacement
from memcalc.spec.training import Attention

ATTN, MLP = Component.attention, Component.mlp


def decoder_block(
    sc: Scope,
    spec: ModelSpec,
    impl: Implementation,
    dims: Dims,
    layer_type: LayerType,
    attention: Attention,
    *,
    input_grad: bool = True,
) -> Block:
    """The block of one layer type: HF ``*DecoderLayer.forward``, op by op. ``input_grad``
    False: its input needs no gradient (the first layer of a frozen-base fine-tuning without
    enable_input_require_grads), so the norms reading it save nothing for it."""
    T, h = dims.T_rep, dims.h  # the residual stream: split over tp ranks under SP
    names = impl.names
    # the first layer of a frozen base: its input needs no grad, so neither does what a frozen
    # linear makes of it (a post-norm block's k_proj feeds k_norm directly: OLMo 2)
    x = Saved("block.in", T * h, dims.r, needs_grad=input_grad)

    def normed(role: str, t: Saved) -> Saved:
        return norm(
            sc,
            names[role],
            t,
            T,
            h,
            spec.norm,
            dims.stat_dtype,
            bias=spec.norm_bias,
            kernel=impl.norm_kernel,
            cpu=dims.cpu,
        )

    def sublayer_out(role: str, comp: Component, t: Saved) -> Saved:
        return dropout(sc, names[role], comp, t, spec.residual_dropout)

    def feed_forward(t: Saved) -> Saved:
        if layer_type.is_moe:
            from memcalc.graph.blocks.moe import moe_mlp

            return moe_mlp(sc, spec, impl, dims, t)
        return mlp(sc, spec, impl, dims, t, dims.m)

    attend = mla_attention if spec.mla is not None else self_attention
    placement = spec.norm_placement
    if spec.parallel_residual:
        # GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x)); both norms read the same x
        attn_out, core = attend(sc, spec, impl, dims, normed("attn_norm", x), attention, layer_type)
        sublayer_out("attn_dropout", ATTN, attn_out)
        feed_forward_out = feed_forward(normed("mlp_norm", x))
        sublayer_out("mlp_dropout", MLP, feed_forward_out)
        sc.add(names["mlp_residual"], MLP, [], 2 * T * h, "aten.add: saves nothing")
        return _block(sc, x, core)
    attn_in = x if placement is NormPlacement.post else normed("attn_norm", x)
    attn_out, core = attend(sc, spec, impl, dims, attn_in, attention, layer_type)
    if placement is not NormPlacement.pre:
        attn_out = normed("attn_post_norm", attn_out)
    attn_out = sublayer_out("attn_dropout", ATTN, attn_out)
    sc.add(names["attn_residual"], ATTN, [], T * h, "aten.add: saves nothing")
    # the sum needs grad when either addend does (a frozen base's first layer with nothing
    # trained in or above its attention: neither does)
    resid = Saved("resid_mid", T * h, dims.r, needs_grad=x.needs_grad or attn_out.needs_grad)
    mlp_in = resid if placement is NormPlacement.post else normed("mlp_norm", resid)
    mlp_out = feed_forward(mlp_in)
    if placement is not NormPlacement.pre:
        mlp_out = normed("mlp_post_norm", mlp_out)
    sublayer_out("mlp_dropout", MLP, mlp_out)
    sc.add(names["mlp_residual"], MLP, [], T * h, "aten.add: saves nothing")
    return _block(sc, x, core)


def _block(sc: Scope, x: Saved, core: tuple[Saved, ...]) -> Block:
    held = tuple(sc.attribute_held.values())
    return Block(tuple(sc.ops), x, core, _param_numel(sc), attribute_held=held)


def _param_numel(sc: Scope) -> int:
    return sum(w.numel for op in sc.ops for w in op.weights)
