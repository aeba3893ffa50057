"""What one rank holds at each moment of the step, mechanism by mechanism.

Each parallel or sharding mechanism is one small class that says what it keeps on the GPU --
DDP's gradient buckets (``ddp.py``), ZeRO-2's sharded gradients (``gradients.py``
ShardedGradients), FSDP2's gathered
groups and reduce-scatter input (``fsdp2.py``), offloaded gradients (``offload.py``),
torch.distributed.pipelining's buffers and kept outputs (``pipelining.py``), DTensor's
loss-parallel and replicated embedding gradient (``tensor_parallel.py``). ``compose`` builds a
rank's ``Residency`` from its layout, placement and framework, in the order torchtitan's
``parallelize_llama`` applies them (tensor parallelism, then data parallelism / sharding, the
pipeline around both); the step timeline (``timeline.py``) walks the moments and asks it.
"""

from memcalc.strategies.residency.compose import Residency, compose
from memcalc.strategies.residency.moments import GradientTotals

__all__ = ["GradientTotals", "Residency", "compose"]
