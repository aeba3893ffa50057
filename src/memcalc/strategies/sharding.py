"""ZeRO / FSDP sharding over data-parallel ranks: what each GPU keeps of the model states.

Rajbhandari et al. 2020 (ZeRO, sec. 5): stage 1 partitions the optimizer states (and fp32
master weights) over the N_d data-parallel ranks, stage 2 also the gradients, stage 3 also
the parameters. FSDP (Zhao et al. 2023) is stage 3 with per-block all-gather: a block's full
weights exist only while it runs (plus the next block's, prefetched), and a block's full
gradients only until they are reduce-scattered.
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.frameworks import Framework
from memcalc.spec.parallel import Parallelism


@dataclass(frozen=True)
class Sharding:
    """Per-GPU shares of the model states for ``gpus`` ranks at ZeRO ``stage``."""

    gpus: int = 1
    stage: int = 0
    expert_gpus: int | None = None
    """Ranks the routed experts' states are sharded over (expert parallelism: gpus / ep, the
    ranks holding the same experts); None: ``gpus``."""

    def share(self, num_bytes: int, from_stage: int, expert_bytes: int = 0) -> int:
        """``num_bytes`` / N (rounded up) when this stage shards it, else all of it; the
        ``expert_bytes`` among them over the expert shard group.

        >>> Sharding(8, 1).share(800, from_stage=1), Sharding(8, 1).share(800, from_stage=2)
        (100, 800)
        >>> Sharding(8, 1, expert_gpus=2).share(800, from_stage=1, expert_bytes=400)
        250
        """
        if self.stage < from_stage:
            return num_bytes
        dense = num_bytes - expert_bytes
        experts = self.gpus if self.expert_gpus is None else self.expert_gpus
        return -(-dense // self.gpus) + -(-expert_bytes // experts)

    @property
    def shards_gradients(self) -> bool:
        return self.stage >= 2 and self.gpus > 1

    @property
    def shards_parameters(self) -> bool:
        return self.stage >= 3 and self.gpus > 1

    def describe(self) -> str:
        if self.gpus == 1:
            return "1 GPU, no sharding" + (" (the ZeRO stage has no effect)" if self.stage else "")
        what = {
            0: "nothing sharded (plain DDP)",
            1: "optimizer states sharded",
            2: "optimizer states and gradients sharded",
            3: "optimizer states, gradients and parameters sharded",
        }[self.stage]
        return (
            f"{self.gpus} data-parallel GPUs, ZeRO-{self.stage}: {what}; gradient "
            "communication time not included"
        )


NO_SHARDING = Sharding()
"""One GPU, nothing sharded."""


def sharding_of(par: Parallelism, fw: Framework, instances: int = 1) -> Sharding:
    """The sharding a rank of ``par`` runs under ``fw``: ZeRO ``par.zero`` over the shard group,
    or -- a framework whose data parallelism is FSDP2 (torchtitan) -- stage 3 over the shard
    group times the context-parallel ranks when it shards over dp x cp
    (torchtitan ``distributed/parallel_dims.py``: ``fsdp = dp_shard * cp``). ``instances``:
    Megatron's ``--num-distributed-optimizer-instances``, each sharding over dp / instances
    (the expert group likewise).

    >>> from memcalc.frameworks import framework
    >>> s = sharding_of(Parallelism(dp=2, cp=2), framework("torchtitan"))
    >>> (s.gpus, s.stage)
    (4, 3)
    >>> sharding_of(Parallelism(dp=8, zero=1), framework("megatron"), instances=2).gpus
    4
    """
    cp = par.cp if fw.shards_over_cp else 1
    stage = 3 if fw.fsdp_data_parallel else par.zero
    if instances <= 1:
        return Sharding(par.shard_ranks * cp, stage, par.expert_shard_ranks * cp)
    ranks = max(par.shard_ranks // instances, 1)
    etp = par.etp or par.tp
    expert = ranks * par.tp // etp if par.tp >= etp else ranks
    return Sharding(ranks * cp, stage, max(expert // par.ep, 1) * cp)
