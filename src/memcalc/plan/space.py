"""The layouts ``memcalc plan`` searches: world size x (dp, tp, pp, cp, ep, virtual stages) x
micro-batch and gradient accumulation. Strategies (ZeRO stage, recompute, offload) are
multiplied in by the search.

Rules, each the framework's own or stated as a restriction of the search:
- World sizes: 1, 2, 4, ... up to one node, then whole nodes (``gpus_per_node`` of the profile).
- Tensor parallelism inside a node (tp <= gpus_per_node, a power of two): Megatron places tp
  innermost so its all-reduces run on NVLink; tp must divide the heads and the MLP width
  (``graph/lower.py``).
- Context parallelism cp in 1, 2, 4, 8, 16 with seq divisible by 2 x cp (Megatron's
  load-balanced ring splits every sequence into 2 x cp chunks).
- Sequence parallelism (on with tp > 1) scatters each rank's seq / cp tokens over tp ranks,
  so tp must divide them (Megatron-core ``_split_along_first_dim``).
- Pipeline stages: powers of two and divisors of the layer count, at most one stage per layer;
  1F1B needs at least pp micro-batches; interleaving (2 virtual stages) when the layers split
  into 2 x pp equal chunks and the micro-batches are a multiple of pp (Megatron's rules).
- Expert parallelism (MoE only): powers of two dividing the expert count and dp.
- With ``--global-batch G``: dp x micro-batch x accumulation = G, micro-batches of at most
  ``MAX_MICRO_BATCH_TOKENS`` tokens (more never lowers memory, and in this time model -- one
  MFU for every shape -- never shortens a step; ``--maximize batch`` goes past it). Without it,
  every layout runs
  the user's micro-batch and accumulation (pipelines at least pp micro-batches), so the
  global batch grows with dp and layouts compare by tokens per second.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from memcalc.spec.model import ModelSpec
from memcalc.spec.parallel import Parallelism

CP_CHOICES = (1, 2, 4, 8, 16)
MAX_MICRO_BATCH_TOKENS = 65536
"""Largest micro-batch (sequences x seq) the search tries under a global batch."""
VIRTUAL_STAGES = 2
"""Virtual stages per pipeline rank tried besides 1 (interleaved 1F1B)."""


@dataclass(frozen=True)
class Candidate:
    """One parallel layout with its micro-batch (ZeRO stage 0; the search varies it)."""

    parallel: Parallelism
    batch: int
    """Micro-batch size (sequences per rank per micro-batch)."""

    @property
    def world_size(self) -> int:
        return self.parallel.world_size

    @property
    def sequences(self) -> int:
        """Sequences per optimizer step over all replicas (the global batch)."""
        return self.parallel.dp * self.batch * self.parallel.microbatches


EVERY_NODE_COUNT_TO = 64
"""Node counts searched one by one up to here; beyond, quarter octaves (4, 5, 6, 7 x 2^k
nodes) and the --max-gpus node count itself, so a search to 65,536 GPUs stays about twice one
to 512 (clusters past 64 nodes are booked in such steps)."""


def world_sizes(max_gpus: int, gpus_per_node: int) -> list[int]:
    """1, 2, 4, ... within one node, then whole nodes (every count to EVERY_NODE_COUNT_TO,
    quarter octaves past it), up to ``max_gpus``.

    >>> world_sizes(40, 8)
    [1, 2, 4, 8, 16, 24, 32, 40]
    >>> [n // 8 for n in world_sizes(8 * 200, 8) if n > 8 * 60]
    [61, 62, 63, 64, 80, 96, 112, 128, 160, 192, 200]
    """
    sizes = {1 << i for i in range(max_gpus.bit_length()) if 1 << i <= min(max_gpus, gpus_per_node)}
    nodes = max_gpus // gpus_per_node
    counts = set(range(1, min(nodes, EVERY_NODE_COUNT_TO) + 1))
    for k in range(nodes.bit_length()):
        counts |= {m << k for m in (4, 5, 6, 7) if EVERY_NODE_COUNT_TO < m << k <= nodes}
    if nodes:
        counts.add(nodes)
    sizes |= {n * gpus_per_node for n in counts}
    return sorted(sizes)


def pipeline_choices(num_layers: int) -> list[int]:
    """Powers of two and divisors of the layer count, at most ``num_layers``.

    >>> pipeline_choices(80)
    [1, 2, 4, 5, 8, 10, 16, 20, 32, 40, 64, 80]
    """
    powers = {1 << i for i in range(num_layers.bit_length()) if 1 << i <= num_layers}
    return sorted(powers | {d for d in range(1, num_layers + 1) if num_layers % d == 0})


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending.

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(
    spec: ModelSpec,
    *,
    max_gpus: int,
    gpus_per_node: int,
    seq: int,
    global_batch: int | None,
    batch: int,
    microbatches: int,
    context_parallel: bool = True,
) -> Iterator[Candidate]:
    """Every layout of the search (see the module docstring), fewest GPUs first;
    ``context_parallel`` False leaves cp > 1 out (eager attention has no ring kernel)."""
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= min(gpus_per_node, max_gpus)]
    cps = [c for c in CP_CHOICES if c == 1 or (context_parallel and seq % (2 * c) == 0)]
    pps = pipeline_choices(spec.num_layers)
    experts = spec.moe.num_experts if spec.moe is not None else 1
    for n in world_sizes(max_gpus, gpus_per_node):
        for tp in tps:
            for cp in cps:
                if (seq // cp) % tp:
                    continue  # sequence parallelism splits seq / cp over tp (TrainingSetup)
                for pp in pps:
                    if n % (tp * cp * pp):
                        continue
                    dp = n // (tp * cp * pp)
                    for mb, m in _batches(dp, pp, global_batch, batch, microbatches, seq):
                        for vpp in _virtual(spec.num_layers, pp, m):
                            for ep in _expert_parallel(experts, dp):
                                yield Candidate(
                                    Parallelism(
                                        dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, microbatches=m
                                    ),
                                    mb,
                                )


def _batches(
    dp: int, pp: int, global_batch: int | None, batch: int, microbatches: int, seq: int
) -> list[tuple[int, int]]:
    """(micro-batch, accumulation) pairs a data-parallel size can run."""
    if global_batch is None:
        return [(batch, max(microbatches, pp))]
    if global_batch % dp:
        return []
    per_replica = global_batch // dp
    return [
        (mb, per_replica // mb)
        for mb in divisors(per_replica)
        if per_replica // mb >= pp and (mb == 1 or mb * seq <= MAX_MICRO_BATCH_TOKENS)
    ]


def _virtual(num_layers: int, pp: int, microbatches: int) -> list[int]:
    if pp == 1:
        return [1]
    v = VIRTUAL_STAGES
    if num_layers % (pp * v) == 0 and microbatches % pp == 0:
        return [1, v]
    return [1]


def _expert_parallel(experts: int, ranks: int) -> list[int]:
    return [
        e
        for e in (1 << i for i in range(experts.bit_length()))
        if experts % e == 0 and ranks % e == 0
    ]
