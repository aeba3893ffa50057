"""Pipeline parallelism: which layers each stage holds and how many micro-batches' activations
it keeps at once under the 1F1B schedule (Narayanan et al. 2021; Korthikanti et al. 2022,
sec. 4.2.3: the first stage holds p micro-batches of L/p layers).

Layers are assigned as ``numpy.array_split`` does: with L = q p + r, the first r stages hold
q + 1 layers and the rest q (torch.distributed.pipelining's even split; Megatron requires
p | L unless told otherwise). The embedding sits on the first stage, the final norm, LM head
and loss on the last; with tied embeddings the last stage keeps its own copy of the weight
(Megatron ``setup_embeddings_and_output_layer``: the two copies are kept equal by an
all-reduce of their gradients).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memcalc.graph.blocks.linear import PARAM_COMPONENT
from memcalc.graph.ops import Component, Op, OpGraph, ParamTensor
from memcalc.spec.parallel import Parallelism


@dataclass(frozen=True)
class Stage:
    """One pipeline stage as one of its GPU ranks sees it."""

    index: int
    first_layer: int
    graph: OpGraph
    """The stage's part of the model: its layers, the embedding on stage 0, the head and the
    loss on the last stage."""
    in_flight: int
    """Micro-batches whose activations the stage holds at its first backward (1F1B:
    min(p - i, m); times the interleaving penalty with virtual stages)."""
    in_flight_later: int
    """Held at a later backward, when the accumulated gradients already exist."""
    is_first: bool
    is_last: bool
    chunks: tuple[int, ...] = ()
    """Layers of each of the rank's virtual stages (interleaved 1F1B under Megatron's
    schedule); () when the runtime does not say."""

    @property
    def layers(self) -> int:
        return self.graph.num_layers

    @property
    def label(self) -> str:
        last = self.first_layer + self.layers - 1
        return f"stage {self.index} (layers {self.first_layer}-{last})"


def layer_split(num_layers: int, stages: int) -> list[tuple[int, int]]:
    """(first layer, layer count) per stage: the first ``L mod p`` stages hold one more.

    >>> layer_split(10, 4)
    [(0, 3), (3, 3), (6, 2), (8, 2)]
    """
    q, r = divmod(num_layers, stages)
    out, start = [], 0
    for i in range(stages):
        n = q + (1 if i < r else 0)
        out.append((start, n))
        start += n
    return out


def in_flight(stage: int, par: Parallelism) -> tuple[int, int]:
    """Micro-batches a stage holds at its first and at a later backward.

    1F1B: stage i runs min(p - i, m) forwards before its first backward; in the steady state a
    forward follows each backward, so later backwards see the same number -- unless all m
    forwards came first (m <= p - i), when the second backward sees one fewer. Interleaved
    (vpp = V > 1): Megatron's penalty 1 + (p - 1) / (p V) on the first stage's p micro-batches
    (``theoretical_memory_usage.py``), applied to every stage's count (rounded up).
    """
    p, m = par.pp, par.microbatches
    k = min(p - stage, m)
    later = k if m > k else max(k - 1, 0)
    if par.vpp > 1:
        penalty_num, penalty_den = p * par.vpp + p - 1, p * par.vpp
        k = -(-k * penalty_num // penalty_den)
        later = -(-later * penalty_num // penalty_den)
    return k, later


def pipeline_stages(
    graph: OpGraph,
    par: Parallelism,
    *,
    tied: bool,
    chunks: list[list[int]] | None = None,
) -> list[Stage]:
    """The stages of ``graph`` under ``par`` (one stage, the whole graph, without pp);
    ``chunks``: the layers of each rank's virtual stages, as the pipeline runtime splits them
    (default: ``layer_split``, one chunk per rank)."""
    if par.pp == 1:
        k, later = in_flight(0, par)
        return [Stage(0, 0, graph, k, later, True, True)]
    if par.pp > graph.num_layers:
        from memcalc.errors import MemcalcError

        raise MemcalcError(
            f"--pp: {par.pp} stages for {graph.num_layers} layers; each stage needs a layer"
        )
    out = []
    if chunks is None:
        split = layer_split(graph.num_layers, par.pp)
    else:
        starts = [0]
        for rank in chunks:
            starts.append(starts[-1] + sum(rank))
        split = [(starts[i], sum(rank)) for i, rank in enumerate(chunks)]
    for i, (first, n) in enumerate(split):
        is_first, is_last = i == 0, i == par.pp - 1
        epilogue = graph.epilogue
        if is_last and tied:
            epilogue = tuple(_own_head_weight(op, graph) for op in epilogue)
        part = replace(
            graph,
            layout=graph.layout.slice(first, first + n),
            prologue=graph.prologue if is_first else _per_stage(graph.prologue),
            epilogue=epilogue if is_last else (),
            logits=graph.logits if is_last else None,
            loss_transient=graph.loss_transient if is_last else (),
        )
        k, later = in_flight(i, par)
        own = tuple(chunks[i]) if chunks is not None else ()
        out.append(Stage(i, first, part, k, later, is_first, is_last, own))
    return out


def _per_stage(prologue: tuple[Op, ...]) -> tuple[Op, ...]:
    """What every stage makes for its own layers: the prologue without the embedding -- the
    rotary tables and the masks the layers share (Megatron's ``GPTModel.forward`` computes
    ``rotary_pos_emb`` on every stage; measured under ``torch.distributed.pipelining``)."""
    return tuple(op for op in prologue if op.component is not Component.embedding)


def _own_head_weight(op: Op, graph: OpGraph) -> Op:
    """The LM head op of a tied model, given its own copy of the embedding weight."""
    if op.weights or not op.params or op.component.value != "output":
        return op
    embedding = next(w for o in graph.prologue for w in o.weights if w.component == "embedding")
    copy = ParamTensor(f"{op.name}.weight", embedding.shape, PARAM_COMPONENT[op.component])
    return replace(op, weights=(copy,))
