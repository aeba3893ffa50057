"""DistributedDataParallel: its gradient buckets (``torch/nn/parallel/distributed.py``,
``Reducer``), replicated gradients all-reduced bucket by bucket."""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.frameworks import GradientStore
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.residency.gradients import ResidentGradients


def has_ddp_buckets(setup: TrainingSetup, stage: int) -> bool:
    """DDP's buckets exist: data parallel without ZeRO (``stage`` 0), not a -mixed recipe
    (whose fp32 main-gradient buffer, as Megatron / DeepSpeed run it, is what is reduced), and
    not a framework whose own gradient buffer is what is reduced (Megatron-core's)."""
    buffered = setup.framework_def.gradients is GradientStore.main_grad_buffer
    return setup.parallel.dp > 1 and stage == 0 and not setup.precision.is_mixed and not buffered


@dataclass(frozen=True)
class DdpBuckets:
    """The all-reduce buckets: with ``gradient_as_bucket_view=False`` (the torch default) a
    copy of every gradient, on the GPU throughout; with it, the gradients are views of the
    buckets (``BucketViewGradients``)."""

    bucket_bytes: int
    bucket_view: bool

    @property
    def buffer_bytes(self) -> int:
        """Bytes on the GPU for the whole step, beside the parameters."""
        return 0 if self.bucket_view else self.bucket_bytes

    @property
    def note(self) -> str:
        if self.bucket_view:
            return (
                "DDP gradient_as_bucket_view: the gradients are views of the buckets, allocated "
                "when DDP is built, so they take their bytes for the whole step"
            )
        return (
            "DDP: gradient buckets hold a copy of every gradient (gradient_as_bucket_view=False, "
            "the torch default; --bucket-view removes it)"
        )


@dataclass(frozen=True)
class BucketViewGradients(ResidentGradients):
    """DDP ``gradient_as_bucket_view``: every gradient is a view of its bucket, allocated when
    DDP is built, so all of them are on the GPU from the start of the step."""

    def on_gpu(self, value: int, bucket: int) -> int:
        return self.totals.full

    def at_loss(self, accumulated: bool) -> int:
        return self.totals.full

    def between_steps(self) -> int:
        return self.totals.full
