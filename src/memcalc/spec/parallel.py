"""Parallelism: how one training step is split over GPUs -- the 5-D layout of Megatron-LM,
torchtitan and DeepSpeed (data, tensor/sequence, pipeline, context and expert parallelism),
ZeRO / FSDP sharding and gradient accumulation.

World size = dp x tp x pp x cp. Expert parallelism splits the routed experts over ep of the
data-parallel ranks, each keeping its tensor-parallel slice of them (Megatron-core's default
expert_tensor_parallel_size = tp), so it does not add to the world.
Rank order (innermost first): tp, cp, dp, pp -- tp and cp groups sit inside a node when they
fit, as Megatron places them (``parallel_state.initialize_model_parallel``).
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.validate import FieldError, check, replace, spec_field

CP_ROTATE_METHODS = ("allgather", "alltoall")
"""torch ``_context_parallel/_attention.py`` ``set_rotate_method``'s values (``_RotateMethod``;
``_ContextParallelOptions.rotate_method`` defaults to ALL_GATHER)."""

MAX_RANKS = 10**7
"""Most GPUs a layout may have (beyond any cluster)."""
DDP_BUCKET_BYTES = 25 * 2**20
"""torch DistributedDataParallel's default ``bucket_cap_mb`` (25 MiB)."""


@dataclass(frozen=True)
class Parallelism:
    """The parallel layout of one training step, from one GPU rank's point of view.

    >>> Parallelism(dp=2, tp=8, pp=4, microbatches=8).world_size
    64
    """

    dp: int = spec_field(
        "Data-parallel ranks (replicas, or ZeRO/FSDP shards).", default=1, ge=1, le=MAX_RANKS
    )
    tp: int = spec_field(
        "Tensor-parallel ranks (Megatron column -> row layout; Shoeybi et al. 2019).",
        default=1,
        ge=1,
        le=1024,
    )
    pp: int = spec_field("Pipeline stages (1F1B schedule).", default=1, ge=1, le=10**4)
    cp: int = spec_field(
        "Context-parallel ranks: each holds seq / cp tokens (ring attention).",
        default=1,
        ge=1,
        le=10**4,
    )
    cp_rotate: str = spec_field(
        "Context parallelism under torch's ``context_parallel``: how the K/V shards go round "
        "the ring (``set_rotate_method``): allgather (torch's default) or alltoall.",
        default="allgather",
    )
    ep: int = spec_field(
        "Expert-parallel ranks (MoE): the routed experts split over ep of the data-parallel "
        "ranks (each keeps its tensor-parallel slice of its experts).",
        default=1,
        ge=1,
        le=10**5,
    )
    etp: int | None = spec_field(
        "Expert tensor-parallel ranks (Megatron-core --expert-tensor-parallel-size): the "
        "routed experts' tensor-parallel split; None: tp.",
        default=None,
        ge=1,
        le=1024,
    )
    sp: bool = spec_field(
        "Sequence parallelism over the tp ranks (Korthikanti et al. 2022): norms, dropout and "
        "the residual stream split along the sequence. On whenever tp > 1 unless turned off.",
        default=True,
    )
    vpp: int = spec_field(
        "Virtual pipeline stages per rank (interleaved 1F1B, Narayanan et al. 2021).",
        default=1,
        ge=1,
        le=1024,
    )
    microbatches: int = spec_field(
        "Micro-batches per step and rank (gradient accumulation; the pipeline's m).",
        default=1,
        ge=1,
        le=10**6,
    )
    zero: int = spec_field(
        "ZeRO stage (Rajbhandari et al. 2020): 1 shards optimizer states, 2 also gradients, "
        "3 also parameters (FSDP full sharding).",
        default=0,
        ge=0,
        le=3,
    )
    fsdp_reshard: bool = spec_field(
        "ZeRO-3 / FSDP2 ``reshard_after_forward``: free a block's gathered weights after its "
        "forward (gather again in backward); False keeps them gathered until its backward.",
        default=True,
    )
    shard_size: int | None = spec_field(
        "HSDP: shard within groups of this many dp ranks, replicate across them.",
        default=None,
        ge=1,
        le=MAX_RANKS,
    )
    bucket_view: bool = spec_field(
        "DDP ``gradient_as_bucket_view``: gradients are views into the all-reduce buckets "
        "(False, the torch default, keeps a bucket copy of every gradient).",
        default=False,
    )

    def __post_init__(self) -> None:
        check(self)

    def _check(self) -> None:
        if self.cp_rotate not in CP_ROTATE_METHODS:
            raise FieldError("cp_rotate", f"one of {', '.join(CP_ROTATE_METHODS)}")
        if self.vpp > 1 and self.pp == 1:
            raise FieldError("vpp", "interleaving needs pipeline parallelism (pp > 1)")
        if self.pp > 1 and self.microbatches < self.pp:
            raise FieldError(
                "microbatches",
                f"the 1F1B schedule needs at least pp ({self.pp}) micro-batches, "
                f"got {self.microbatches}",
            )
        if self.shard_size is not None and (self.shard_size > self.dp or self.dp % self.shard_size):
            raise FieldError("shard_size", f"must divide dp ({self.dp}), got {self.shard_size}")
        if self.shard_size is not None and self.zero < 3:
            raise FieldError("shard_size", "HSDP shards parameters: it needs --zero 3")
        if self.etp is not None and self.tp % self.etp and self.etp % self.tp:
            raise FieldError("etp", f"must divide tp ({self.tp}) or be a multiple of it")
        if self.expert_ranks % self.ep:
            # Megatron-core: the expert-parallel group is formed from the data-parallel ranks
            # and, with etp < tp, from the tensor-parallel ones the experts do not split over
            # (core/parallel_state.py initialize_model_parallel, "expert-tensor" x "ep" x "edp")
            raise FieldError(
                "ep",
                f"expert parallelism runs inside the {_expert_ranks(self)} "
                f"(experts keep their tensor-parallel split unless --etp); ep ({self.ep}) "
                "must divide it",
            )

    def replace(self, **changes: object) -> Parallelism:
        return replace(self, **changes)

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def sequence_parallel(self) -> bool:
        """SP is on (it only exists with tp > 1)."""
        return self.sp and self.tp > 1

    @property
    def shard_ranks(self) -> int:
        """Ranks one ZeRO / FSDP shard group spans (HSDP: shard_size, else dp)."""
        return self.shard_size or self.dp

    @property
    def expert_ranks(self) -> int:
        """Ranks the experts spread over (the shard group x tp / etp)."""
        etp = self.etp or self.tp
        return self.shard_ranks * self.tp // etp if self.tp >= etp else self.shard_ranks

    @property
    def expert_shard_ranks(self) -> int:
        """Ranks that hold the same experts and shard their states under ZeRO: Megatron-core's
        expert data-parallel group, world / (etp x ep x pp) -- the shard group over ep with
        etp = tp."""
        return max(self.expert_ranks // self.ep, 1)

    def describe(self) -> str:
        n = self.world_size
        parts = [f"{n} GPU{'' if n == 1 else 's'}: dp {self.dp}"]
        for name in ("tp", "pp", "cp", "ep"):
            value = getattr(self, name)
            if value > 1:
                parts.append(f"{name} {value}")
        if self.sequence_parallel:
            parts.append("sequence parallel")
        if self.vpp > 1:
            parts.append(f"{self.vpp} virtual stages")
        if self.microbatches > 1:
            parts.append(f"{self.microbatches} micro-batches")
        return ", ".join(parts)


def _expert_ranks(par: Parallelism) -> str:
    """The ranks an expert-parallel group is formed from, in words."""
    if par.expert_ranks == par.shard_ranks:
        return _ranks(par.shard_ranks)
    return f"{par.expert_ranks} ranks (data-parallel x tp / etp)"


def _ranks(n: int) -> str:
    """``n`` data-parallel ranks in words (``1 data-parallel rank``)."""
    return f"{n} data-parallel rank{'' if n == 1 else 's'}"


SINGLE_GPU = Parallelism()
