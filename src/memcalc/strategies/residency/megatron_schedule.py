"""Megatron-core's pipeline schedules: which layers each rank and virtual stage builds, and how
many micro-batches' activations a rank holds at once.

Sources (Megatron-LM ``d98e8a64``): ``megatron/core/transformer/transformer_block.py``
``get_num_layers_to_build`` (even split, ``--decoder-first/last-pipeline-num-layers``, the
embedding and loss counted as layers); ``megatron/core/pipeline_parallel/schedules.py``
``get_pp_rank_microbatches`` (warm-up forwards: ``p - r - 1``, or with ``v`` virtual stages
``(p - r - 1) * 2 + (v - 1) * g``, capped at all of them), ``get_schedule_table`` (the forward
order: groups of ``g`` micro-batches, each through chunk 0, 1, ...; backward walks the chunks in
reverse) and ``deallocate_output_tensor`` (a sent output's data is freed: no buffer kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from memcalc.errors import MemcalcError
from memcalc.frameworks import PipelineRuntime

if TYPE_CHECKING:
    from memcalc.spec.training import TrainingSetup


def stage_chunks(num_layers: int, setup: TrainingSetup) -> list[list[int]] | None:
    """The layers of each pipeline rank's virtual stages under Megatron's split
    (``chunk_layers``); None for another pipeline runtime or without pp."""
    par = setup.parallel
    if par.pp == 1 or setup.framework_def.pipeline is not PipelineRuntime.megatron:
        return None
    opts = setup.megatron_options
    return chunk_layers(
        num_layers,
        par.pp,
        par.vpp,
        first=opts.first_stage_layers,
        last=opts.last_stage_layers,
        embedding_counts=opts.account_for_embedding_in_pipeline_split,
        loss_counts=opts.account_for_loss_in_pipeline_split,
    )


def chunk_layers(
    layers: int,
    pp: int,
    vpp: int,
    *,
    first: int | None = None,
    last: int | None = None,
    embedding_counts: bool = False,
    loss_counts: bool = False,
) -> list[list[int]]:
    """Transformer layers of each virtual stage: ``[rank][chunk]``. Megatron asserts that the
    stages (and each rank's virtual stages) divide the layers evenly; memcalc splits an uneven
    count as ``numpy.array_split`` does (the first parts one larger) instead of refusing.

    >>> chunk_layers(12, 4, 3)[3]
    [1, 1, 1]
    >>> chunk_layers(6, 4, 2, embedding_counts=True, loss_counts=True)
    [[0, 1], [1, 1], [1, 1], [1, 0]]
    """
    if first is not None or last is not None:
        if embedding_counts or loss_counts:
            raise MemcalcError(
                "--decoder-first/last-pipeline-num-layers: Megatron does not combine them with "
                "the embedding or loss counted in the pipeline split"
            )
        rest = layers - (first or 0) - (last or 0)
        middle = pp - (first is not None) - (last is not None)
        if rest < 0 or (middle and rest % middle) or (not middle and rest):
            raise MemcalcError(
                f"--decoder-first/last-pipeline-num-layers: {rest} layers left for {middle} "
                "middle stages (Megatron: they must divide evenly)"
            )
        per_rank = [rest // middle if middle else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
    else:
        total = layers + embedding_counts + loss_counts
        # Megatron asserts an even split; an uneven one is split as numpy.array_split does
        per_rank = _even(total, pp)
    out = []
    for r, n in enumerate(per_rank):
        chunks = _even(n, vpp)
        if embedding_counts and r == 0:
            chunks[0] -= 1
        if loss_counts and r == pp - 1:
            chunks[-1] -= 1
        if min(chunks) < 0:
            raise MemcalcError("--pp: a virtual stage has no room for the embedding or the loss")
        out.append(chunks)
    return out


def _even(n: int, parts: int) -> list[int]:
    """``n`` split into ``parts``, the first ``n mod parts`` one larger."""
    q, r = divmod(n, parts)
    return [q + (i < r) for i in range(parts)]


def schedule_table(microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) in forward order (``get_schedule_table``)."""
    out = []
    for start in range(0, microbatches, group):
        end = microbatches if start + group >= microbatches else start + group
        out += [(mb, c) for c in range(chunks) for mb in range(start, end)]
    return out


def peak_in_flight(
    pp: int, rank: int, vpp: int, microbatches: int, group: int, chunk_bytes: Sequence[int]
) -> int:
    """The most activation bytes rank ``rank`` holds at once: before each backward of the
    interleaved 1F1B (``forward_backward_pipelining_with_interleaving``), the chunk
    micro-batches forwarded and not yet backwarded, each ``chunk_bytes[chunk]``.

    >>> peak_in_flight(4, 3, 3, 4, 4, [1, 1, 1])   # last rank: (v - 1) p + 1 chunks
    9
    """
    total = microbatches * vpp
    warmup = min((pp - rank - 1) * 2 + (vpp - 1) * group, total)
    table = schedule_table(microbatches, vpp, group)
    held = worst = 0
    done_forward = done_backward = 0

    def forward() -> None:
        nonlocal held, done_forward
        held += chunk_bytes[table[done_forward][1]]
        done_forward += 1

    def backward() -> None:
        nonlocal held, worst, done_backward
        worst = max(worst, held)
        held -= chunk_bytes[vpp - 1 - table[done_backward][1]]
        done_backward += 1

    for _ in range(warmup):
        forward()
    for _ in range(total - warmup):
        forward()
        backward()
    while done_backward < total:
        backward()
    return worst
