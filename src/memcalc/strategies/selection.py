"""Which strategies to show or apply: the rows of the default strategy table and the one
strategy the command-line flags choose (validated)."""

from __future__ import annotations

from memcalc.errors import MemcalcError
from memcalc.frameworks.features import EveryKRule
from memcalc.profiles import GpuProfile
from memcalc.spec.training import OptimizerKind, TrainingSetup
from memcalc.strategies.offload import Offload, OffloadWhat
from memcalc.strategies.options import MIN_MFU, Options
from memcalc.strategies.recompute import Recompute, sqrt_k
from memcalc.units import parse_size


def default_strategies(
    num_blocks: int, setup: TrainingSetup, gpu: GpuProfile | None = None
) -> list[Options]:
    """The rows of the strategy table: each recompute strategy, then each offload that applies
    (optimizer offload only when the optimizer holds something; to NVMe only when ``gpu``'s
    server has it)."""
    rows = [Options(recompute=r) for r in (Recompute.none, Recompute.selective, Recompute.full)]
    if setup.framework_def.checkpointing.every_k is not EveryKRule.refused:
        rows.append(Options(recompute=Recompute.every_k, every=sqrt_k(num_blocks)))
    par = setup.parallel
    sharded = par.dp == 1 or par.zero  # offloading the optimizer needs ZeRO across ranks
    if (setup.optimizer is not OptimizerKind.sgd or setup.precision.is_mixed) and sharded:
        rows.append(Options(offload=(Offload.parse("optimizer=cpu"),)))
        if (gpu is None or gpu.nvme_bytes_per_s > 0) and setup.sharding_engine.offloads_to_nvme:
            rows.append(Options(offload=(Offload.parse("optimizer=nvme"),)))
    rows.append(Options(recompute=Recompute.full, offload=(Offload.parse("activations=cpu"),)))
    if par.dp == 1 or par.zero == 3:  # and the parameters ZeRO-3
        rows.append(Options(offload=(Offload.parse("params=cpu"), Offload.parse("optimizer=cpu"))))
    return rows


def chosen_options(
    recompute: Recompute | None,
    every: int | None,
    budget: str | None,
    offload: list[str] | None,
    mfu: float | None,
) -> Options | None:
    """The strategy the flags choose, validated; None when none was chosen (print the table)."""
    if mfu is not None and not MIN_MFU <= mfu <= 1:  # also refuses nan
        raise MemcalcError(f"--mfu: must be from {MIN_MFU} to 1, got {mfu}")
    if every is not None and recompute not in (Recompute.every_k, Recompute.block):
        raise MemcalcError("--every: only applies with --recompute every-k or block")
    if budget is not None and recompute is not Recompute.budget:
        raise MemcalcError("--budget: only applies with --recompute budget")
    offloads = tuple(Offload.parse(o) for o in offload or [])
    for i, o in enumerate(offloads):
        twice = [p for p in offloads[i + 1 :] if p.what is o.what]
        if twice:
            raise MemcalcError(
                f"--offload: {o.what.value} given twice ({o.label}, {twice[0].label}); give "
                f"each of {', '.join(w.value for w in OffloadWhat)} at most once"
            )
    if recompute is None and not offloads:
        return None
    return Options(
        recompute=recompute or Recompute.none,
        every=every,
        budget_bytes=parse_size(budget) if budget else None,
        offload=offloads,
        mfu=mfu,
    )
