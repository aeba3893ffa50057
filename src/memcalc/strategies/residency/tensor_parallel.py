"""What a tensor-parallel implementation keeps beyond the sharded model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorParallelExtras:
    """Bytes beyond the rank's shards (none under Megatron-LM's layers)."""

    loss_bytes: int = 0
    """At the loss, forward and backward: ``loss_parallel``'s log-softmax
    (``torch/distributed/tensor/parallel/loss.py`` ``_log_softmax``) holds ``x - max`` beside
    its input and output, and its backward one more b*s*V/t fp32 tensor."""
    embedding_grad_numel: int = 0
    """Gradient elements beyond the parameters' own: DTensor's ``embedding_dense_backward``
    has no vocab-sharded strategy (``torch/distributed/tensor/_ops/_embedding_ops.py``), so the
    vocab-parallel embedding's gradient is computed and kept replicated, V x h, on every
    tensor-parallel rank (measured: ``memcalc measure --tp``)."""
    note: str = ""


NO_EXTRAS = TensorParallelExtras()


def megatron_tensor_parallel(
    tokens: int, tp: int, logits_vocab: int, embedding: tuple[int, int] | None
) -> TensorParallelExtras:
    """Megatron-LM: ``VocabParallelEmbedding``'s gradient is the rank's own rows; its
    vocab-parallel cross-entropy is not modelled yet (HF's loss on the shard)."""
    return NO_EXTRAS


def dtensor_tensor_parallel(
    tokens: int, tp: int, logits_vocab: int, embedding: tuple[int, int] | None
) -> TensorParallelExtras:
    """DTensor ``parallelize_module`` with ``loss_parallel`` (see TensorParallelExtras):
    ``logits_vocab`` is the rank's share of the logits' vocabulary, ``embedding`` (V, h) the
    embedding table the rank holds its V/t rows of (None: no embedding on this rank)."""
    extra = 0
    if embedding is not None:
        vocab, hidden = embedding
        extra = (vocab - -(-vocab // tp)) * hidden
    return TensorParallelExtras(
        loss_bytes=tokens * logits_vocab * 4,
        embedding_grad_numel=extra,
        note=(
            "DTensor tensor parallelism: the vocab-parallel embedding's gradient is the full "
            "V x h table on every rank (DTensor's embedding backward returns it replicated); "
            "sequence-parallel projections save their all-gathered input; loss_parallel keeps "
            "one more b*s*V/t fp32 tensor"
        ),
    )
