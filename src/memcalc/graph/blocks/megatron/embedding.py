"""Megatron-core ``LanguageModelEmbedding`` (first pipeline stage) and the rotary table every
stage makes (``models/gpt/gpt_model.py`` ``GPTModel._preprocess``)."""

from __future__ import annotations

from memcalc.graph.ops import Component, ParamTensor, Saved
from memcalc.graph.scope import Dims, Scope
from memcalc.spec.model import ModelSpec, Positions
from memcalc.spec.training import DType

EMB = Component.embedding


def language_model_embedding(sc: Scope, spec: ModelSpec, dims: Dims) -> Saved:
    """``models/common/embeddings/language_model_embedding.py`` ``forward``:
    ``VocabParallelEmbedding`` (``tensor_parallel/layers.py``) -- with tp > 1 it masks the ids
    outside its rows into a new int64 tensor, which ``F.embedding`` saves (the batch's ids
    themselves with tp = 1); a learned position table saves the (b x s) position ids; the sum
    is transposed to [s, b, h] (``.contiguous()``), scattered to the sequence shard under
    sequence parallelism, and dropout (``hidden_dropout``, in the tracker's RNG fork: plain
    ``F.dropout``) saves its bool mask."""
    T, h = dims.T, dims.h
    sc.add(
        "embedding.word_embeddings",
        EMB,
        [Saved("input_ids", T, DType.int64)],
        0,
        "VocabParallelEmbedding (F.embedding): saves the (masked) token ids",
        weights=(ParamTensor("embedding.word_embeddings.weight", (dims.V, h), "embedding"),),
    )
    if spec.positions is Positions.learned:
        rows = spec.max_position_embeddings
        sc.add(
            "embedding.position_embeddings",
            EMB,
            [Saved("position_ids", T, DType.int64)],
            T * h,
            "nn.Embedding (learned_absolute): saves the position ids",
            weights=(ParamTensor("embedding.position_embeddings.weight", (rows, h), "embedding"),),
        )
    x = Saved("embedding.out", dims.T_rep * h, dims.r)
    p = spec.embedding_dropout
    if p <= 0:
        return x
    sc.add(
        "embedding.embedding_dropout",
        EMB,
        [Saved("embedding.dropout_mask", x.numel, DType.bool)],
        2 * x.numel,
        "aten.native_dropout: saves the bool mask",
        grads=2 * x.nbytes,
    )
    return Saved("embedding.dropout_out", x.numel, x.dtype)


def rotary_table(sc: Scope, spec: ModelSpec, dims: Dims, *, fused: bool) -> None:
    """``RotaryEmbedding.forward`` (``models/common/embeddings/rotary_pos_embedding.py``): one
    fp32 ``[s, 1, 1, rotary dims]`` frequency table per forward on every stage, saved by the
    fused rope of every layer (counted once); the unfused rope saves per-layer cos/sin
    instead, so then nothing keeps it."""
    if spec.positions is not Positions.rotary or not fused:
        return
    sc.add(
        "rotary_pos_emb",
        Component.attention,
        [Saved("rotary_pos_emb", dims.s * spec.rotary_dim, DType.fp32)],
        0,
        "RotaryEmbedding: fp32 freqs, saved by every layer's FusedRoPEFunc",
    )
