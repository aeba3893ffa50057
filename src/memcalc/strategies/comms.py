"""Communication of one training step per GPU rank: the collectives each parallel dimension
runs, their bytes, their time over the links they cross, and which compute can hide them.

Ring costs (Thakur et al. 2005; Patarasuk & Yuan 2009; the bus-bandwidth factors of NVIDIA's
nccl-tests ``doc/PERFORMANCE.md``): for a payload of S bytes over n ranks each rank moves
all-reduce 2 (n-1)/n S, all-gather and reduce-scatter (n-1)/n S, all-to-all (n-1)/n S,
point-to-point S.

Links (``Links.wire``): ranks are ordered tp, cp, dp, pp from innermost (Megatron's
``parallel_state``), so a group of ``size`` ranks ``stride`` apart holds g = gpus_per_node /
stride of them per node. Inside one node the ring runs over NVLink. Across k nodes each GPU
drives its own NIC (a DGX / HGX node has one 400 Gb/s NIC per GPU; NCCL's rings and trees
spread the node-boundary crossings over all of them), so per rank the network carries
2(k-1)/k x S/g of an all-reduce (half that for a reduce-scatter or all-gather) while NVLink
carries the intra-node part at the same time: the collective lasts as long as the busier of
the two (measured: 4 GiB all-reduce over 4 x 8 B200 in 22.05 ms where one NIC carrying the
whole ring would need 85.9 ms, stas00/ml-engineering ``network/README.md`` @ 744d01e). A group
with one rank per node (stride >= gpus_per_node) puts the whole ring on each rank's NIC.

Each call also pays a latency, and a link delivers ``LINK_EFFICIENCY`` of its wire rate:
t = calls x latency + wire bytes / (efficiency x bandwidth). The latency of a ring collective
grows with its ring: NCCL's own model (``ring_latency_s``) charges every step of the ring, one
per rank for an all-gather or reduce-scatter and two for an all-reduce, the node-crossing ones
at the network's step latency; it is at least the small-message time measured on one node or
across two (``INTRA_NODE_LATENCY_S``, ``INTER_NODE_LATENCY_S``).

What each dimension sends per step (per rank, activation dtype p, micro-batch tokens T per
rank, m micro-batches):

- TP (Shoeybi et al. 2019; Korthikanti et al. 2022 sec. 4.2.2): per layer and micro-batch,
  without SP 2 all-reduces of T h p in forward and 2 in backward; with SP 2 all-gathers + 2
  reduce-scatters in forward and 2 + 2 in backward, plus the 2 all-gathers that rebuild the
  column-parallel inputs for the weight gradients. On the critical path unless the runtime
  overlaps them with the GEMMs (Megatron ``tp_comm_overlap``, torch async TP).
- PP: per micro-batch and virtual stage one activation forward and one gradient backward
  (T h p, /tp with SP): an interleaved schedule crosses v x pp stage boundaries per
  micro-batch. On the critical path.
- CP (ring attention, Liu et al. 2023): per layer and micro-batch, (cp-1) K/V chunk passes of
  2 T kv p in forward, and K/V plus their gradients in backward; overlaps attention compute.
- EP (Lepikhin et al. 2021): per MoE layer and micro-batch an all-to-all dispatch and combine
  of the rows the rank's experts receive (T k h p, the busiest rank's share) in forward and
  again in backward. On the critical path.
- DP: DDP all-reduces the gradients once per step (``no_sync`` during accumulation); Megatron's
  distributed optimizer (ZeRO-1) reduce-scatters the accumulated gradients once, both during
  the last micro-batch's backward (DDP buckets, Megatron ``overlap_grad_reduce``), and
  all-gathers the updated parameters (hidden by the next forward under Megatron's
  ``overlap_param_gather``); ZeRO-2 reduce-scatters each micro-batch's gradients during its
  backward; ZeRO-3 / FSDP all-gathers the parameters in forward (prefetched one block ahead)
  and, with resharding, again in backward per micro-batch, and reduce-scatters the gradients
  per micro-batch during backward. Gradients travel in the gradient dtype (``--grad-dtype``;
  torchtitan's FSDP2 reduces in fp32, Megatron-LM's bf16 runs accumulate and reduce in fp32,
  Megatron-Bridge's performance recipes set ``grad_reduce_in_fp32: false``), weights in the
  weight dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cached_property

from memcalc.spec.parallel import Parallelism

LINK_EFFICIENCY = 0.80
"""Bus bandwidth a ring reaches at large messages over the link's one-direction wire rate.
NVLink: 8x A100 234.9 GB/s of 300 (78%), 8x H200 367.6 GB/s of 450 with NVLS off (82%),
8x B200 682 GB/s of 900 (76%) (stas00/ml-engineering ``network/README.md`` @ 744d01e, nccl-tests
at 8-16 GiB). Network, per GPU NIC: 4 x 8 B200 on 8 x 50 GB/s EFA: 36.5 GB/s (73%, same
source); 2 x 8 H100 on 8 x 200 Gb/s (GCP A3 Mega): 339 GB/s bus bandwidth = 22.6 GB/s per NIC
(90%). 80% is the middle of these measurements."""
INTRA_NODE_LATENCY_S = 40e-6
"""Time of a small collective inside a node: a 32 KiB all-reduce over 8 H200 took 40 us
(all_reduce_bench.py, stas00/ml-engineering ``network/README.md`` @ 744d01e)."""
INTER_NODE_LATENCY_S = 136e-6
"""The same across nodes: an 8-byte all-reduce over 2 x 8 H100 took 135.8 us (nccl-tests
all_reduce_perf, GCP A3 Mega; lessizzmore/create-a3mega-ztan-fork ``ztan-NCCL-test-result``)."""
NCCL_RING_BASE_US = 8.4
NCCL_RING_NVLINK_STEP_US = 3.4
NCCL_RING_NET_STEP_US = 9.6
"""NCCL's latency model of a ring collective with the Simple protocol (the one large messages
use), in microseconds: ``baseLat[RING][SIMPLE]`` plus, per ring step, ``hwLat[NVLINK]`` inside a
node and ``hwLat[NET]`` across nodes (NVIDIA/nccl ``src/graph/tuning.cc`` @ 01afd20,
``ncclTopoTuneModel``: latency = base + (nsteps - nInterSteps) x intraLat + nInterSteps x
interLat, nsteps = n - 1 for all-gather / reduce-scatter and 2 (n - 1) for all-reduce,
nInterSteps = nodes - 1 and 2 (nodes - 1))."""
NCCL_RING_PLATEAU = 1.9
"""``ncclTopoGetAlgoTime``: a multi-node Simple ring all-reduce of at least n / 16 x 64 KiB
pays 1.9 x that latency ("plateau effect of ring")."""
BUCKET_BYTES = 25 * 2**20
"""Gradient bucket of torch DDP (``bucket_cap_mb`` 25): one collective per bucket."""


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


class Window(str, Enum):
    """Which compute a collective runs under (``steptime.schedule`` charges what it cannot
    hide)."""

    none = "none"
    """On the critical path."""
    matmuls = "matmuls"
    """Tensor-parallel collectives split and overlapped with the GEMMs they feed (Megatron
    ``tp_comm_overlap``, torch async TP), per micro-batch."""
    attention = "attention"
    """The context-parallel K/V ring, behind each micro-batch's attention."""
    forward = "forward"
    """FSDP / ZeRO-3 parameter all-gathers, prefetched one block ahead of each micro-batch's
    forward."""
    backward = "backward"
    """Collectives issued during each micro-batch's backward (FSDP gathers and gradient
    reduce-scatters, ZeRO-2 reduce-scatters)."""
    last_backward = "last-backward"
    """Gradient reduction during the last micro-batch's backward only (DDP ``no_sync``
    accumulation and its buckets, Megatron ``overlap_grad_reduce``)."""
    next_forward = "next-forward"
    """The updated parameters' all-gather behind the next step's first forward (Megatron
    ``overlap_param_gather``)."""


@dataclass(frozen=True)
class Transfer:
    """One kind of collective in a step: how much it moves and what that costs."""

    dimension: str
    """tp, pp, cp, ep or dp."""
    collective: Collective
    ranks: int
    payload_bytes: int
    """Sum of the payloads of every call in one step (per rank)."""
    intra_bytes: float
    """Of the rank's wire bytes, those over NVLink (inside its node)..."""
    inter_bytes: float
    """... and those over its NIC (to other nodes)."""
    calls: int
    """Collective calls in one step (each pays the link's latency)."""
    links: Links
    window: Window = Window.none
    nodes: int = 1
    """Nodes the group spans (the ring's node crossings)."""

    @property
    def overlaps(self) -> bool:
        """Can hide behind compute."""
        return self.window is not Window.none

    @property
    def link(self) -> str:
        return self.links.inter_link if self.inter_bytes else self.links.intra_link

    @property
    def wire_bytes(self) -> float:
        return self.intra_bytes + self.inter_bytes

    @cached_property
    def seconds(self) -> float:
        """calls x latency + the busier link's bytes at its achievable rate (NVLink and the
        NIC stream at once)."""
        lk = self.links
        latency = lk.inter_latency_s if self.inter_bytes else lk.intra_latency_s
        if self.calls:
            per_call = self.payload_bytes / self.calls
            ring = ring_latency_s(self.collective, self.ranks, self.nodes, per_call)
            latency = max(latency, ring)
        intra = self.intra_bytes / (lk.intra_bytes_per_s * lk.efficiency)
        inter = self.inter_bytes / (lk.inter_bytes_per_s * lk.efficiency)
        return self.calls * latency + max(intra, inter)


@dataclass(frozen=True)
class Links:
    """The bandwidths a layout's groups run at."""

    gpus_per_node: int
    intra_bytes_per_s: float
    """Per GPU, one direction, inside a node."""
    inter_bytes_per_s: float
    """Per GPU (its own NIC), one direction."""
    intra_link: str
    inter_link: str
    efficiency: float = LINK_EFFICIENCY
    intra_latency_s: float = INTRA_NODE_LATENCY_S
    inter_latency_s: float = INTER_NODE_LATENCY_S

    def wire(
        self, collective: Collective, stride: int, size: int, payload: float
    ) -> tuple[float, float]:
        """(NVLink bytes, NIC bytes) one rank moves for ``payload`` bytes of ``collective``
        over ``size`` ranks ``stride`` apart (see the module docstring).

        >>> lk = Links(8, 450e9, 50e9, "NVLink", "IB")
        >>> lk.wire(Collective.all_reduce, 1, 8, 800)  # one node: the whole ring on NVLink
        (1400.0, 0.0)
        >>> lk.wire(Collective.all_reduce, 1, 64, 800)  # 8 x 8: 2 (8-1)/8 x 800 inside, /8 out
        (1400.0, 175.0)
        >>> lk.wire(Collective.all_reduce, 8, 8, 800)  # one rank per node: all of it per NIC
        (0.0, 1400.0)
        """
        if size <= 1:
            return 0.0, 0.0
        per_node = max(1, min(size, self.gpus_per_node // max(1, stride)))
        nodes = -(-size // per_node)
        if nodes <= 1:
            return collective.factor(size) * payload, 0.0
        if collective is Collective.send_recv:
            return 0.0, payload
        if collective is Collective.all_to_all:
            # each rank sends (n-1)/n of its payload: (g-1)/n of it stays in the node
            return (per_node - 1) / size * payload, (size - per_node) / size * payload
        inside = collective.factor(per_node) * payload
        across = collective.factor(nodes) * payload / per_node
        return inside, across

    def transfer(
        self,
        dimension: str,
        collective: Collective,
        stride: int,
        size: int,
        payload: float,
        calls: int,
        window: Window = Window.none,
    ) -> Transfer:
        intra, inter = self.wire(collective, stride, size, payload)
        per_node = max(1, min(size, self.gpus_per_node // max(1, stride)))
        nodes = -(-size // per_node) if size > 1 else 1
        return Transfer(
            dimension, collective, size, int(payload), intra, inter, calls, self, window, nodes
        )


def ring_latency_s(collective: Collective, ranks: int, nodes: int, per_call_bytes: float) -> float:
    """NCCL's latency of one ring collective call (seconds; 0 for point-to-point and
    all-to-all, which are not rings): see ``NCCL_RING_BASE_US``.

    >>> round(ring_latency_s(Collective.all_gather, 8, 1, 2**30) * 1e6, 1)  # one node
    32.2
    >>> round(ring_latency_s(Collective.all_gather, 512, 64, 2**30) * 1e6, 1)  # 64 nodes
    2136.4
    """
    if ranks <= 1 or collective in (Collective.send_recv, Collective.all_to_all):
        return 0.0
    all_reduce = collective is Collective.all_reduce
    steps = (2 if all_reduce else 1) * (ranks - 1)
    inter = (2 if all_reduce else 1) * (nodes - 1)
    us = NCCL_RING_BASE_US + (steps - inter) * NCCL_RING_NVLINK_STEP_US
    us += inter * NCCL_RING_NET_STEP_US
    if all_reduce and nodes > 1 and per_call_bytes >= ranks / 16 * 65536:
        us *= NCCL_RING_PLATEAU
    return us * 1e-6


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
    """MoE layers on this stage."""
    expert_rows: int
    """Rows the rank's routed experts receive per MoE layer and micro-batch (its tokens x
    top-k, times the busiest rank's imbalance): what the all-to-all dispatches and combines."""
    stage_params: int
    """Parameters on this rank (its TP shard of its stage)."""
    recompute_forwards: float
    """Extra forwards of the blocks (full recompute 1.0): their TP/CP/EP traffic repeats."""
    expert_params: int = 0
    """Of ``stage_params``, the routed experts' (their gradients reduce over the expert
    data-parallel group, dp / ep ranks)."""


@dataclass(frozen=True)
class Overlaps:
    """Which collectives the runtime overlaps with compute (``strategies.runtime.Runtime``)."""

    tp: bool = False
    """Tensor-parallel collectives overlapped with the GEMMs."""
    grad_reduce: bool = True
    """DDP / ZeRO-1 gradient reduction during the last micro-batch's backward."""
    param_gather: bool = True
    """ZeRO-1/2 parameter all-gather behind the next forward."""


DEFAULT_OVERLAPS = Overlaps()


def step_transfers(
    par: Parallelism, shape: StepShape, links: Links, overlaps: Overlaps = DEFAULT_OVERLAPS
) -> list[Transfer]:
    """Every collective of one step on one rank: the model-parallel ones, then the
    data-parallel ones."""
    return model_parallel_transfers(par, shape, links, overlaps) + data_parallel_transfers(
        par, shape, links, overlaps
    )


def data_parallel_transfers(
    par: Parallelism, shape: StepShape, links: Links, overlaps: Overlaps = DEFAULT_OVERLAPS
) -> list[Transfer]:
    """The data-parallel collectives (they do not depend on recompute)."""
    return _data_parallel(par, shape, links, overlaps) if par.dp > 1 else []


def model_parallel_transfers(
    par: Parallelism, shape: StepShape, links: Links, overlaps: Overlaps = DEFAULT_OVERLAPS
) -> list[Transfer]:
    """The tensor, context, expert and pipeline collectives (they do not depend on the ZeRO
    stage)."""
    out: list[Transfer] = []
    m = par.microbatches
    act = shape.tokens * shape.hidden * shape.dtype_bytes
    forwards = 1 + shape.recompute_forwards
    if par.tp > 1:
        out.extend(_tensor_parallel(par, shape, links, act, forwards, overlaps))
    if par.cp > 1:
        kv = shape.tokens * shape.kv_width * shape.dtype_bytes
        passes = (par.cp - 1) * shape.layers * m
        # forward: K and V; backward: K, V and their gradients (dK, dV)
        payload = passes * (2 * kv * forwards + 4 * kv)
        calls = int(passes * (forwards + 1))
        out.append(
            links.transfer(
                "cp", Collective.send_recv, par.tp, par.cp, payload, calls, Window.attention
            )
        )
    if par.ep > 1 and shape.moe_layers:
        # dispatch and combine in every forward (recomputed ones too) and in backward
        ep_calls = int(shape.moe_layers * m * (2 * forwards + 2))
        payload = ep_calls * shape.expert_rows * shape.hidden * shape.dtype_bytes
        out.append(
            links.transfer("ep", Collective.all_to_all, par.tp * par.cp, par.ep, payload, ep_calls)
        )
    if par.pp > 1:
        boundary = act // (par.tp if par.sequence_parallel else 1)
        crossings = 2 * m * par.vpp  # activation forward, gradient backward, per virtual stage
        out.append(
            links.transfer(
                "pp",
                Collective.send_recv,
                par.tp * par.cp * par.dp,
                2,
                crossings * boundary,
                crossings,
            )
        )
    return out


def _tensor_parallel(
    par: Parallelism,
    shape: StepShape,
    links: Links,
    act: int,
    forwards: float,
    overlaps: Overlaps,
) -> list[Transfer]:
    calls = shape.layers * par.microbatches
    window = Window.matmuls if overlaps.tp else Window.none
    if par.sequence_parallel:
        gathers = int(calls * (2 * forwards + 2 + 2))
        scatters = int(calls * (2 * forwards + 2))
        return [
            links.transfer("tp", Collective.all_gather, 1, par.tp, gathers * act, gathers, window),
            links.transfer(
                "tp", Collective.reduce_scatter, 1, par.tp, scatters * act, scatters, window
            ),
        ]
    reduces = int(calls * (2 * forwards + 2))
    return [links.transfer("tp", Collective.all_reduce, 1, par.tp, reduces * act, reduces, window)]


def _data_parallel(
    par: Parallelism, shape: StepShape, links: Links, overlaps: Overlaps
) -> list[Transfer]:
    """The gradient (and parameter) collectives of the data-parallel group: dense parameters
    over the dp ranks, routed experts over the expert data-parallel ranks (dp / ep)."""
    out: list[Transfer] = []
    for params, ranks, step in _dp_groups(par, shape):
        if ranks > 1:
            out += _group_collectives(par, shape, links, overlaps, params, ranks, step)
    if par.shard_size is not None and par.shard_size < par.dp:
        # HSDP: the shard groups' replicas all-reduce their gradient shards
        replicas = par.dp // par.shard_size
        grads = shape.stage_params * shape.grad_bytes_per_param
        out.append(
            links.transfer(
                "dp",
                Collective.all_reduce,
                par.tp * par.cp * par.shard_size,
                replicas,
                grads // par.shard_size,
                max(1, shape.layers),
                Window.last_backward,
            )
        )
    return out


def _dp_groups(par: Parallelism, shape: StepShape) -> list[tuple[int, int, int]]:
    """(parameters, ranks, rank stride) of each data-parallel group: the dense parameters
    over the shard ranks; with expert parallelism the routed experts over dp / ep."""
    stride = par.tp * par.cp
    d = par.shard_ranks
    experts = shape.expert_params
    if experts and par.ep > 1:
        return [(shape.stage_params - experts, d, stride), (experts, d // par.ep, stride * par.ep)]
    return [(shape.stage_params, d, stride)]


def _group_collectives(
    par: Parallelism,
    shape: StepShape,
    links: Links,
    overlaps: Overlaps,
    params: int,
    ranks: int,
    step: int,
) -> list[Transfer]:
    """One data-parallel group's collectives by ZeRO stage: DDP's bucketed all-reduce;
    ZeRO-1/2's reduce-scatter (per micro-batch at stage 2) and parameter all-gather; FSDP /
    ZeRO-3's per-layer all-gathers (again in backward when resharded) and reduce-scatters."""
    m = par.microbatches
    grads = params * shape.grad_bytes_per_param
    weights = params * shape.weight_bytes_per_param
    buckets = max(1, -(-grads // BUCKET_BYTES))
    reduce_window = Window.last_backward if overlaps.grad_reduce else Window.none
    gather_window = Window.next_forward if overlaps.param_gather else Window.none

    def dp(kind: Collective, size: int, calls: int, window: Window) -> Transfer:
        return links.transfer("dp", kind, step, ranks, size, calls, window)

    if par.zero == 0:
        return [dp(Collective.all_reduce, grads, buckets, reduce_window)]
    if par.zero in (1, 2):
        k = m if par.zero == 2 else 1
        window = Window.backward if par.zero == 2 else reduce_window
        return [
            dp(Collective.reduce_scatter, grads * k, buckets * k, window),
            dp(Collective.all_gather, weights, buckets, gather_window),
        ]
    calls = max(1, shape.layers) * m
    out = [dp(Collective.all_gather, m * weights, calls, Window.forward)]
    if par.fsdp_reshard:
        out.append(dp(Collective.all_gather, m * weights, calls, Window.backward))
    out.append(dp(Collective.reduce_scatter, m * grads, calls, Window.backward))
    return out
