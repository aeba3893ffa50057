"""What runs before the first block: token (and learned position) embeddings, their scale and
dropout, and the tensors every block reads but which are made once (rotary tables)."""

from __future__ import annotations

from memcalc.graph.ops import Component, ParamTensor, Saved
from memcalc.graph.scope import Dims, Scope, dropout, tensor
from memcalc.spec.families.base import Implementation
from memcalc.spec.model import ModelSpec, Positions
from memcalc.spec.training import DType

EMB = Component.embedding


def embeddings(sc: Scope, spec: ModelSpec, impl: Implementation, dims: Dims) -> Saved:
    """``aten.embedding`` saves its indices (the token ids, int64); a learned position table
    (GPT-2, OPT) likewise saves the position ids (1 x s); Gemma multiplies by sqrt(h) (a 0-d
    tensor its ``mul`` saves); embedding dropout saves its mask. Returns the residual stream."""
    T, h = dims.T, dims.h
    names = impl.names
    sc.add(
        names["embed_tokens"],
        EMB,
        [Saved("input_ids", T, DType.int64)],
        0,
        "aten.embedding: saves indices",
        weights=(ParamTensor(f"{names['embed_tokens']}.weight", (dims.V, h), "embedding"),),
    )
    if spec.positions is Positions.learned:
        rows = spec.max_position_embeddings + spec.position_offset
        sc.add(
            names["embed_positions"],
            EMB,
            [Saved("position_ids", dims.s, DType.int64)],
            T * h,
            "aten.embedding: saves indices (position_ids of shape 1 x s)",
            weights=(ParamTensor(f"{names['embed_positions']}.weight", (rows, h), "embedding"),),
        )
    x = tensor("embed.out", dims.T_rep, h, dims.r)
    if spec.embedding_scale:
        sc.add(
            "embed_scale",
            EMB,
            [Saved("embed_scale.normalizer", 1, dims.r)],
            T * h,
            "aten.mul.Tensor(x, normalizer): saves the 0-d normalizer (Gemma)",
        )
        x = tensor("embed.scaled", dims.T_rep, h, dims.r)
    return dropout(sc, names["embed_dropout"], EMB, x, spec.embedding_dropout)


def rotary_tables(
    sc: Scope, spec: ModelSpec, dims: Dims, pairs: int = 1, *, complex_table: bool = False
) -> None:
    """cos and sin (1 x s x rotary dims, stream dtype), made once by the model's rotary module
    and saved by the q/k ``mul`` of every layer: counted once, here. ``pairs`` tables when
    layer types rotate differently (Gemma 3: local and global). ``complex_table``: one
    complex64 ``freqs_cis`` (1 x s x rotary dims / 2: 8 bytes an element) instead, whatever
    the dtype (DeepSeek-V2 ``DeepseekV2RotaryEmbedding``)."""
    if complex_table:
        sc.add(
            "rotary_embedding",
            Component.attention,
            [Saved("rope.freqs_cis", dims.s * spec.rotary_dim, DType.fp32)],  # 2 fp32 each
            0,
            "RotaryEmbedding: complex64 freqs_cis saved by the q/k muls of every layer",
        )
        return
    saves = []
    for i in range(pairs):
        suffix = f".{i}" if pairs > 1 else ""
        saves += [
            Saved(f"rope.cos{suffix}", dims.s * spec.rotary_dim, dims.r),
            Saved(f"rope.sin{suffix}", dims.s * spec.rotary_dim, dims.r),
        ]
    sc.add(
        "rotary_embedding",
        Component.attention,
        saves,
        0,
        "RotaryEmbedding: cos, sin saved by the q/k muls of every layer",
    )
