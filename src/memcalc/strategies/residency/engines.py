"""The sharding engines, by name: each turns a rank's ``RankInputs`` into its ``Placement`` (the
states on the GPU, host and NVMe) and its ``Residency`` (what it holds at each moment)."""

from __future__ import annotations

from collections.abc import Callable

from memcalc.frameworks import ShardingEngine
from memcalc.strategies.placement import Placement
from memcalc.strategies.residency.compose import RankInputs, Residency, torch_rank
from memcalc.strategies.residency.deepspeed.engine import deepspeed_rank

ENGINES: dict[ShardingEngine, Callable[[RankInputs], tuple[Placement, Residency]]] = {
    ShardingEngine.torch: torch_rank,
    ShardingEngine.deepspeed: deepspeed_rank,
}


def rank_of(inp: RankInputs) -> tuple[Placement, Residency]:
    """The rank's Placement and Residency under its setup's sharding engine."""
    return ENGINES[inp.setup.sharding_engine](inp)
