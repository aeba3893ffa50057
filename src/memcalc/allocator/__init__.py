"""A model of torch's CUDA caching allocator, so that memory is judged on what a run reserves.

- ``memcalc.alloc_conf`` (a module of the lowest layer, so that ``Options`` can hold it):
  ``PYTORCH_CUDA_ALLOC_CONF`` (``--alloc-conf``) parsed as torch parses it.
- ``sizes``: request rounding and segment sizes.
- ``caching``: the allocator's policy (best fit, splitting, merging, the two pools, oversize
  blocks, expandable segments, garbage collection, the release-and-retry path).
- ``events``: one training step's allocations and frees, from the op graph and the plan.
- ``replay``: the events through the allocator: the measured step's reserved peak.

Rules and their sources: ``docs/allocator.md``. Never imports torch.
"""

from memcalc.alloc_conf import AllocConf, alloc_conf_from_env, parse_alloc_conf
from memcalc.allocator.caching import CachingAllocator, OutOfMemory
from memcalc.allocator.events import StepTrace, step_trace, unmodelled
from memcalc.allocator.replay import Replay, replay

__all__ = [
    "AllocConf",
    "CachingAllocator",
    "OutOfMemory",
    "Replay",
    "StepTrace",
    "alloc_conf_from_env",
    "parse_alloc_conf",
    "replay",
    "step_trace",
    "unmodelled",
]
