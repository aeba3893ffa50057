"""The strategy choices of one estimate (recompute, offload) and the assumptions that turn
bytes and FLOPs into a verdict and a time (MFU, headroom)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from memcalc.alloc_conf import DEFAULT as DEFAULT_ALLOC_CONF
from memcalc.alloc_conf import AllocConf, parse_alloc_conf
from memcalc.errors import MemcalcError, one_of
from memcalc.strategies.offload import Offload
from memcalc.strategies.recompute import Recompute

if TYPE_CHECKING:
    from memcalc.strategies.runtime import Runtime

DEFAULT_MFU = 0.4
"""The one model-FLOPs utilisation of the single-utilisation time model: what ``--mfu`` gives
as an example and the tutor (``quiz``) teaches with. ``estimate`` and ``plan`` do not use it
by default: ``Options.mfu`` None rates each kernel by its shape (``steptime``)."""
MIN_MFU = 0.001
"""Lowest model-FLOPs utilisation accepted: below 0.1% of peak a step's time means nothing
(and 1e-320 would make it infinite)."""

DEFAULT_HEADROOM = 0.10
"""Fraction of GPU memory a configuration must leave free to count as fitting when its
reserved memory is not replayed (``allocator.events.unmodelled``): the caching allocator's
fragmentation and cuBLAS/NCCL workspaces the allocated peak does not see. GMLake (Guo et al.,
ASPLOS 2024, arXiv:2401.08156) measured PyTorch's caching allocator wasting 15% of reserved
memory on average (up to 33%) when training LLMs with recompute, offload, ZeRO and LoRA on
A100-80GB; ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` reduces it (lower
``--headroom`` then). 10% is an assumption between the two, stated in every result. A
replayed step is judged on its reserved memory with no reserve (``RESERVED_HEADROOM``) unless
``--headroom`` asks for one."""
RESERVED_HEADROOM = 0.0
"""Kept free on top of the replayed reserved memory and the runtime overhead by default."""


@dataclass(frozen=True)
class Options:
    """Strategy choices for one estimate."""

    recompute: Recompute = Recompute.none
    every: int | None = None
    budget_bytes: int | None = None
    offload: tuple[Offload, ...] = ()
    mfu: float | None = None
    """None: the kernel model (``steptime``); a fraction: every matmul and attention kernel at
    it, with no time for elementwise ops (the single-utilisation model)."""
    headroom: float | None = None
    """Fraction of GPU memory kept free; None: ``RESERVED_HEADROOM`` on a step whose reserved
    memory is replayed, ``DEFAULT_HEADROOM`` on one that is not."""
    alloc_conf: AllocConf = DEFAULT_ALLOC_CONF
    """The caching allocator's settings (``PYTORCH_CUDA_ALLOC_CONF`` / ``--alloc-conf``)."""
    runtime: Runtime | None = None
    """The framework the time assumes (``strategies.runtime``); None: ``runtime_of(setup)``."""

    def __post_init__(self) -> None:
        """Accept what the command line accepts: ``recompute="full"`` (any case),
        ``offload=["optimizer=cpu"]`` (or one string), ``budget_bytes="20GiB"``; bad values
        raise the command line's one-line MemcalcError.

        >>> o = Options(recompute="FULL", offload=("optimizer=cpu",), budget_bytes="1GiB")
        >>> o.recompute, o.offload[0].label, o.budget_bytes
        (<Recompute.full: 'full'>, 'optimizer=cpu', 1073741824)
        """
        if not isinstance(self.recompute, Recompute):
            name = str(self.recompute).lower()
            match = [r for r in Recompute if r.value == name]
            if not match:
                raise one_of("--recompute", self.recompute, [r.value for r in Recompute])
            object.__setattr__(self, "recompute", match[0])
        offload = self.offload
        if not (isinstance(offload, tuple) and all(isinstance(o, Offload) for o in offload)):
            items = (offload,) if isinstance(offload, (str, Offload)) else tuple(offload)
            object.__setattr__(
                self,
                "offload",
                tuple(o if isinstance(o, Offload) else Offload.parse(o) for o in items),
            )
        if isinstance(self.budget_bytes, str):
            from memcalc.units import parse_size

            object.__setattr__(self, "budget_bytes", parse_size(self.budget_bytes))
        if self.mfu is not None and not MIN_MFU <= self.mfu <= 1:  # also refuses nan
            raise MemcalcError(f"--mfu: must be from {MIN_MFU} to 1, got {self.mfu!r}")
        if isinstance(self.alloc_conf, str):
            object.__setattr__(self, "alloc_conf", parse_alloc_conf(self.alloc_conf))
        if self.headroom is not None and not 0 <= self.headroom < 0.9:
            raise MemcalcError(
                f"--headroom: must be at least 0 and below 90%, got {self.headroom!r}"
            )

    @property
    def label(self) -> str:
        recompute = self.recompute.value
        if self.recompute is Recompute.every_k and self.every:
            recompute = f"every-{self.every}"
        elif self.recompute is Recompute.block:
            recompute = f"block-{self.every or 1}"
        if not self.offload:
            return recompute
        offload = "offload " + ", ".join(o.label for o in self.offload)
        return offload if self.recompute is Recompute.none else f"{recompute} + {offload}"


NO_STRATEGY = Options()
"""No recompute, no offload, the default MFU and headroom."""
