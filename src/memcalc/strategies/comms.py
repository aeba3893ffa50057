"""Communication of one training step per GPU rank: the collectives each parallel dimension
runs, their bytes, their time on a first-order ring model, and whether they can overlap
compute.

Ring costs (Thakur et al. 2005; Patarasuk & Yuan 2009), for a payload of S bytes over n ranks
at B bytes/s per rank: all-reduce 2 (n-1)/n S / B; all-gather and reduce-scatter (n-1)/n S / B;
all-to-all (n-1)/n S / B; point-to-point S / B. A group runs at the intra-node bandwidth when
it fits in a node (ranks ordered tp, cp, dp, pp from innermost, as Megatron's
``parallel_state`` does), else at the per-GPU network bandwidth.

What each dimension sends per step (per rank, model dtype p, micro-batch tokens T per rank):

- TP (Shoeybi et al. 2019; Korthikanti et al. 2022 sec. 4.2.2): per layer and micro-batch,
  without SP 2 all-reduces of T h p in forward and 2 in backward; with SP 2 all-gathers + 2
  reduce-scatters in forward and 2 + 2 in backward, plus the 2 all-gathers that rebuild the
  column-parallel inputs for the weight gradients. Exposed (on the critical path).
- PP: per micro-batch and stage boundary one activation forward and one gradient backward
  (T h p, /tp with SP). Exposed.
- CP (ring attention, Liu et al. 2023): per layer and micro-batch, (cp-1) K/V chunk passes of
  2 T kv p in forward, and K/V plus their gradients in backward; overlaps attention compute.
- EP (Lepikhin et al. 2021): per MoE layer and micro-batch an all-to-all dispatch and combine
  of T k h p in forward and again in backward.
- DP: DDP all-reduces the gradients once per step (``no_sync`` during accumulation),
  overlapping backward; ZeRO-1 (Megatron's distributed optimizer) reduce-scatters the
  accumulated gradients once and all-gathers the updated parameters; ZeRO-2 reduce-scatters
  each micro-batch's gradients; ZeRO-3 / FSDP all-gathers the parameters in forward and (with
  resharding) again in backward per micro-batch, and reduce-scatters gradients per micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memcalc.spec.parallel import Parallelism


class Collective(str, Enum):
    all_reduce = "all-reduce"
    all_gather = "all-gather"
    reduce_scatter = "reduce-scatter"
    all_to_all = "all-to-all"
    send_recv = "send/recv"

    def factor(self, ranks: int) -> float:
        """Bytes each rank moves per byte of payload (ring model)."""
        if self is Collective.send_recv:
            return 1.0
        share = (ranks - 1) / ranks
        return 2 * share if self is Collective.all_reduce else share


@dataclass(frozen=True)
class Transfer:
    """One kind of collective in a step: how much it moves and what that costs."""

    dimension: str
    """tp, pp, cp, ep or dp."""
    collective: Collective
    ranks: int
    payload_bytes: int
    """Sum of the payloads of every call in one step (per rank)."""
    bytes_per_s: float
    link: str
    overlaps: bool
    """Can hide behind compute (DP gradient sync in backward, CP ring with attention)."""

    @property
    def wire_bytes(self) -> float:
        return self.payload_bytes * self.collective.factor(self.ranks)

    @property
    def seconds(self) -> float:
        return self.wire_bytes / self.bytes_per_s


@dataclass(frozen=True)
class Links:
    """The bandwidths a layout's groups run at."""

    gpus_per_node: int
    intra_bytes_per_s: float
    inter_bytes_per_s: float
    intra_link: str
    inter_link: str

    def of(self, stride: int, size: int) -> tuple[float, str]:
        """Bandwidth and link of a group of ``size`` ranks ``stride`` apart."""
        if stride * size <= self.gpus_per_node:
            return self.intra_bytes_per_s, self.intra_link
        return self.inter_bytes_per_s, self.inter_link


@dataclass(frozen=True)
class StepShape:
    """What the communication depends on, for one rank's stage."""

    tokens: int
    """Tokens of one micro-batch on this rank (b s / cp)."""
    hidden: int
    kv_width: int
    """Key/value projection width per rank (local kv heads x head dim)."""
    dtype_bytes: int
    grad_bytes_per_param: int
    weight_bytes_per_param: int
    layers: int
    """Layers on this stage."""
    moe_layers: int
    top_k: int
    stage_params: int
    """Parameters on this rank (its TP shard of its stage)."""
    recompute_forwards: float
    """Extra forwards of the blocks (full recompute 1.0): their TP/CP/EP traffic repeats."""


def step_transfers(par: Parallelism, shape: StepShape, links: Links) -> list[Transfer]:
    """Every collective of one step on one rank."""
    out: list[Transfer] = []
    m = par.microbatches
    act = shape.tokens * shape.hidden * shape.dtype_bytes
    forwards = 1 + shape.recompute_forwards
    if par.tp > 1:
        bw, link = links.of(1, par.tp)
        calls = shape.layers * m
        if par.sequence_parallel:
            gathers = int(calls * (2 * forwards + 2 + 2))
            scatters = int(calls * (2 * forwards + 2))
            out.append(
                Transfer("tp", Collective.all_gather, par.tp, gathers * act, bw, link, False)
            )
            out.append(
                Transfer("tp", Collective.reduce_scatter, par.tp, scatters * act, bw, link, False)
            )
        else:
            reduces = int(calls * (2 * forwards + 2))
            out.append(
                Transfer("tp", Collective.all_reduce, par.tp, reduces * act, bw, link, False)
            )
    if par.cp > 1:
        bw, link = links.of(par.tp, par.cp)
        kv = shape.tokens * shape.kv_width * shape.dtype_bytes
        passes = (par.cp - 1) * shape.layers * m
        # forward: K and V; backward: K, V and their gradients (dK, dV)
        payload = int(passes * (2 * kv * forwards + 4 * kv))
        out.append(Transfer("cp", Collective.send_recv, par.cp, payload, bw, link, True))
    if par.ep > 1 and shape.moe_layers:
        bw, link = links.of(1, par.ep)
        ep_calls = shape.moe_layers * m * (2 * forwards + 2)
        payload = int(ep_calls * shape.tokens * shape.top_k * shape.hidden * shape.dtype_bytes)
        out.append(Transfer("ep", Collective.all_to_all, par.ep, payload, bw, link, False))
    if par.pp > 1:
        bw, link = links.of(par.tp * par.cp * par.dp, 2)
        boundary = act // (par.tp if par.sequence_parallel else 1)
        out.append(Transfer("pp", Collective.send_recv, 2, 2 * m * boundary, bw, link, False))
    d = par.shard_ranks
    if par.dp > 1:
        bw, link = links.of(par.tp * par.cp, par.dp)
        grads = shape.stage_params * shape.grad_bytes_per_param
        weights = shape.stage_params * shape.weight_bytes_per_param
        if par.zero == 0:
            out.append(Transfer("dp", Collective.all_reduce, par.dp, grads, bw, link, True))
        elif par.zero == 1:
            # full gradients accumulate locally; one reduce-scatter at the step
            out.append(Transfer("dp", Collective.reduce_scatter, d, grads, bw, link, True))
            out.append(Transfer("dp", Collective.all_gather, d, weights, bw, link, False))
        elif par.zero == 2:
            # sharded gradients: each micro-batch's are reduce-scattered as they appear
            out.append(Transfer("dp", Collective.reduce_scatter, d, grads * m, bw, link, True))
            out.append(Transfer("dp", Collective.all_gather, d, weights, bw, link, False))
        else:
            gathers = m * (2 if par.fsdp_reshard else 1) * weights
            out.append(Transfer("dp", Collective.all_gather, d, gathers, bw, link, True))
            out.append(Transfer("dp", Collective.reduce_scatter, d, grads * m, bw, link, True))
        if par.shard_size is not None and par.shard_size < par.dp:
            replicas = par.dp // par.shard_size
            out.append(
                Transfer(
                    "dp",
                    Collective.all_reduce,
                    replicas,
                    grads // par.shard_size,
                    *links.of(par.tp * par.cp * par.shard_size, replicas),
                    True,
                )
            )
    return out
