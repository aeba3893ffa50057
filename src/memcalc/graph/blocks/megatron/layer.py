"""One Megatron-core ``TransformerLayer`` with the TE spec
(``megatron/core/models/gpt/gpt_layer_specs.py`` ``get_gpt_layer_with_transformer_engine_spec``:
the input norm fused into ``linear_qkv``, the pre-MLP norm into ``linear_fc1``, a separate
``TENorm`` only before an MoE layer), and which of its ops a selective recompute replays."""

from __future__ import annotations

from dataclasses import replace

from memcalc.graph.blocks.megatron.attention import self_attention
from memcalc.graph.blocks.megatron.mlp import dense_mlp
from memcalc.graph.blocks.megatron.te_modules import layernorm_linear, local_norm_then_linear
from memcalc.graph.ops import Block, Component, Op, Saved
from memcalc.graph.scope import Dims, Scope
from memcalc.spec.megatron import (
    OUTPUT_DISCARDING_MODULES,
    AttentionBackend,
    MegatronOptions,
    TransformerImpl,
)
from memcalc.spec.model import LayerType, ModelSpec
from memcalc.spec.training import DType

ATTN, MLP = Component.attention, Component.mlp


def bias_dropout_add(
    sc: Scope, name: str, comp: Component, x: Saved, residual: Saved, p: float, dims: Dims
) -> Saved:
    """``fusions/fused_bias_dropout.py`` ``bias_dropout_add_fused_train`` -- ``residual +
    dropout(x + bias)`` under ``jit_fuser`` (``torch.compile``, ``megatron/core/jit.py``):
    the compiled graph saves the dropout's bool mask (1 byte an element of the sequence
    shard); with p = 0 nothing. The output is the new residual stream."""
    saves = [Saved(f"{name}.mask", residual.numel, DType.bool)] if p > 0 else []
    sc.add(
        name,
        comp,
        saves,
        3 * residual.numel,
        "bias_dropout_add (torch.compile): saves the dropout's bool mask",
        grads=2 * residual.nbytes,
    )
    return Saved(f"{name}.out", residual.numel, residual.dtype)


NORM_LINEAR = {
    TransformerImpl.transformer_engine: layernorm_linear,
    TransformerImpl.local: local_norm_then_linear,
}
"""The norm + column-parallel linear of each ``--transformer-impl``."""


def transformer_layer(
    sc: Scope,
    spec: ModelSpec,
    dims: Dims,
    layer_type: LayerType,
    opts: MegatronOptions,
    backend: AttentionBackend,
) -> Block:
    """``TransformerLayer.forward``: attention, bias-dropout-add, MLP (or MoE), bias-dropout-
    add. The ops of ``opts.recompute_modules`` are marked as the part selective recompute
    replays (``Op.attention_core``: Megatron checkpoints each module, ``transformer_layer.py``
    ``recompute_mlp`` / ``recompute_input_layernorm`` / ``attention.py``
    ``_checkpointed_attention_forward``); what their checkpoints keep is ``core_inputs``."""
    x = Saved("layer.in", dims.T_rep * dims.h, dims.r)
    norm_linear = NORM_LINEAR[opts.transformer_impl]
    attn_out, qkv = self_attention(
        sc, spec, dims, x, backend, opts.apply_rope_fusion, norm_linear, softmax_fp32(opts, dims)
    )
    p = spec.residual_dropout
    resid = bias_dropout_add(sc, "self_attn_bda", ATTN, attn_out, x, p, dims)
    if layer_type.is_moe:
        from memcalc.graph.blocks.megatron.moe import moe_layer

        mlp_out, discarded = moe_layer(sc, spec, dims, resid, opts)
    else:
        mlp_out = dense_mlp(
            sc, spec, dims, resid, fused=opts.bias_activation_fusion, norm_linear=norm_linear
        )
        discarded = {"layernorm": ("input_layernorm.out", "pre_mlp_layernorm.out")}
    bias_dropout_add(sc, "mlp_bda", MLP, mlp_out, resid, p, dims)
    modules = set(opts.recompute_modules)
    ops = [replace(op, attention_core=bool(_modules(op, layer_type) & modules)) for op in sc.ops]
    inputs = {"core_attn": qkv, "mlp": (resid,), "moe": (resid,)}
    kept = tuple(t for m in modules for t in inputs.get(m, ()))
    dropped = tuple(
        name for m in modules & OUTPUT_DISCARDING_MODULES for name in discarded.get(m, ())
    )
    params = sum(w.numel for op in ops for w in op.weights)
    return Block(tuple(ops), x, tuple({t.name: t for t in kept}.values()) or qkv, params, dropped)


def softmax_fp32(opts: MegatronOptions, dims: Dims) -> DType | None:
    """The dtype the local attention's torch softmax fallback saves its output in (fp32 with
    ``--attention-softmax-in-fp32`` on 16-bit scores), or None: the fused kernel's."""
    upcast = opts.attention_softmax_in_fp32 and dims.p is not DType.fp32
    return DType.fp32 if upcast and not opts.fused_softmax else None


def _modules(op: Op, layer_type: LayerType) -> set[str]:
    """The ``recompute_modules`` entries whose checkpoint covers ``op``."""
    name = op.name
    if name.startswith("self_attention.core_attention"):
        return {"core_attn"}
    if name.startswith(("input_layernorm", "pre_mlp_layernorm")):
        return {"layernorm"}
    if not name.startswith("mlp."):
        return set()
    if not layer_type.is_moe:
        return {"mlp"}
    out = {"moe"}
    if name.startswith("mlp.experts.") and name.endswith("activation"):
        out.add("moe_act")
    if name.startswith("mlp.shared_experts."):
        out.add("shared_experts")
    return out
