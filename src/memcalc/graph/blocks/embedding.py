"""What runs before the first block: token (and learned position) embeddings, their scale and
dropout, and the tensors every block reads but which are made once (rotary tables)."""

from __future__ import annotations

from memcalc.graph.ops import Component, ParamTensor, Saved
from memcalc.graph.scope import Dims, Scope, dropout, tensor
from memcalc.spec.families.base import Implementation
from memcalc.spec.model import ModelSpec, Positions
from memcalc.spec.training import DType

EMB = Component.embedding


def embeddings(
    sc: Scope,
    spec: ModelSpec,
    impl: Implementation,
    dims: Dims,
    *,
    output_grad: bool = True,
    leaf_output: bool = False,
) -> Saved:
    """``aten.embedding`` saves its indices (the token ids, int64) for its weight's gradient --
    nothing when the embedding is frozen; a learned position table (GPT-2, OPT) likewise saves
    the position ids (1 x s; OPT: ``position_ids + 2``, b x s); Gemma multiplies by sqrt(h)
    (``Gemma2TextScaledWordEmbedding``: ``* embed_scale``, a 0-d buffer: its ``mul`` saves no
    activation); embedding dropout saves its mask (when its output needs a gradient). Returns
    the residual stream.

    ``leaf_output``: a frozen token embedding whose output ``enable_input_require_grads``
    makes require grad (``modeling_utils.py`` ``PreTrainedModel.enable_input_require_grads``:
    a forward hook calling ``output.requires_grad_(True)``) -- the output becomes a leaf, and
    its ``AccumulateGrad`` node keeps it alive until backward reaches it. Where the first
    block receives that same tensor, the block (or its checkpoint) holds it anyway; where a
    new tensor is made first (learned positions added, embedding dropout: GPT-2, OPT), the
    leaf is held beside it."""
    T, h = dims.T, dims.h
    names = impl.names
    ids = Saved("input_ids", T, DType.int64)
    _table(sc, names["embed_tokens"], dims.V, h, ids, 0, "aten.embedding: saves indices")
    if spec.positions is Positions.learned:
        ids = Saved(
            "position_ids", dims.s * (dims.b if impl.position_ids_batched else 1), DType.int64
        )
        rows = spec.max_position_embeddings + spec.position_offset
        what = "aten.embedding: saves indices (position_ids of shape 1 x s, or b x s)"
        _table(sc, names["embed_positions"], rows, h, ids, T * h, what)
    x = tensor("embed.out", dims.T_rep, h, dims.r)
    makes_new = spec.positions is Positions.learned or bool(spec.embedding_dropout)
    if leaf_output and makes_new:
        sc.add(
            "embed.leaf",
            EMB,
            [Saved("embed_tokens.out.leaf", dims.T_rep * h, dims.r)],
            0,
            "enable_input_require_grads: the embedding output, a leaf that requires grad, "
            "held by its AccumulateGrad node until backward",
        )
    if spec.embedding_scale:
        sc.add(
            "embed_scale",
            EMB,
            [],
            T * h,
            "aten.mul.Tensor(x, embed_scale): saves the 0-d scale, a buffer (Gemma)",
        )
        x = tensor("embed.scaled", dims.T_rep, h, dims.r)
    if not output_grad:
        return x  # F.dropout of a tensor that needs no grad saves no mask
    return dropout(sc, names["embed_dropout"], EMB, x, spec.embedding_dropout)


def _table(sc: Scope, name: str, rows: int, h: int, ids: Saved, flops: int, source: str) -> None:
    """One ``aten.embedding`` lookup of table ``name`` (rows x h): saves its indices ``ids``
    for the weight's gradient -- nothing when the table is frozen; the table and the frozen
    original PEFT keeps beside a ``modules_to_save`` copy are its weights."""
    trainable = sc.trainable(name)
    weight = ParamTensor(f"{name}.weight", (rows, h), "embedding", trainable, sc.param_dtype(name))
    sc.add(
        name,
        EMB,
        [ids] if trainable else [],
        flops,
        source,
        weights=(weight, *sc.frozen_originals(name, (weight,))),
    )


def rotary_tables(
    sc: Scope,
    spec: ModelSpec,
    dims: Dims,
    pairs: int = 1,
    dtype: DType | None = None,
    *,
    complex_table: bool = False,
) -> None:
    """cos and sin (1 x s x rotary dims, stream dtype unless ``dtype``: OLMo 2 keeps them
    fp32), made once by the model's rotary module (``*RotaryEmbedding.forward``) and saved by
    the q/k ``mul`` of every layer: counted once, here. ``pairs`` tables when layer types
    rotate differently (Gemma 3: local and global). ``complex_table``: one complex64
    ``freqs_cis`` (1 x s x rotary dims / 2: 8 bytes an element) instead, whatever the dtype
    (DeepSeek-V2 ``DeepseekV2RotaryEmbedding``)."""
    if complex_table:
        sc.add(
            "rotary_embedding",
            Component.attention,
            [Saved("rope.freqs_cis", dims.s * spec.rotary_dim, DType.fp32)],  # 2 fp32 each
            0,
            "RotaryEmbedding: complex64 freqs_cis saved by the q/k muls of every layer",
        )
        return
    dtype = dtype or dims.r
    saves = []
    for i in range(pairs):
        suffix = f".{i}" if pairs > 1 else ""
        saves += [
            Saved(f"rope.cos{suffix}", dims.s * spec.rotary_dim, dtype),
            Saved(f"rope.sin{suffix}", dims.s * spec.rotary_dim, dtype),
        ]
    sc.add(
        "rotary_embedding",
        Component.attention,
        saves,
        0,
        "RotaryEmbedding: cos, sin saved by the q/k muls of every layer",
    )
