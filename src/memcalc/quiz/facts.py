"""The estimates the generated questions read, for one model, setup and GPU.

Every number a generated question shows comes from ``memcalc.estimate.estimate`` (and
``memcalc.plan`` for the candidates); each estimate is computed the first time a question
kind asks for it, so a sibling question for a varied setup costs only what it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from memcalc.estimate import DEFAULT_MFU, Breakdown, Options, estimate
from memcalc.plan import candidate_options
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute, sqrt_k


@dataclass(frozen=True)
class ModelFacts:
    """One model, setup and GPU, and the Breakdowns of the strategies the questions need."""

    spec: ModelSpec
    setup: TrainingSetup
    gpu: GpuProfile
    mfu: float = DEFAULT_MFU
    """Model-FLOPs utilisation for every time shown (``--mfu``)."""
    _every: dict[int, Breakdown] = field(default_factory=dict, compare=False, repr=False)

    def run(self, options: Options) -> Breakdown:
        """The estimate of one strategy at this ``mfu``."""
        return estimate(self.spec, self.setup, self.gpu, replace(options, mfu=self.mfu))

    @cached_property
    def base(self) -> Breakdown:
        """No recompute, no offload."""
        return self.run(Options())

    @cached_property
    def full(self) -> Breakdown:
        """Full recompute (every block keeps only its input)."""
        return self.run(Options(recompute=Recompute.full))

    @property
    def k(self) -> int:
        """Segment length of sqrt(N) checkpointing."""
        return sqrt_k(self.spec.num_layers)

    @cached_property
    def sqrt(self) -> Breakdown:
        """Checkpoint every k = sqrt_k(N) blocks."""
        return self.every(self.k)

    def every(self, k: int) -> Breakdown:
        """Checkpoint every ``k`` blocks."""
        if k not in self._every:
            self._every[k] = self.run(Options(recompute=Recompute.every_k, every=k))
        return self._every[k]

    @cached_property
    def strategies(self) -> tuple[Breakdown, ...]:
        """Every recompute x offload candidate of ``memcalc plan``, no strategy first."""
        return tuple(self.run(o) for o in candidate_options(self.spec.num_layers))


def model_facts(
    spec: ModelSpec, setup: TrainingSetup, gpu: GpuProfile, mfu: float = DEFAULT_MFU
) -> ModelFacts:
    """The facts of one model, setup and GPU (estimates run when first read)."""
    return ModelFacts(spec=spec, setup=setup, gpu=gpu, mfu=mfu)
