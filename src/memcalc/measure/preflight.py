"""What ``memcalc measure`` checks before it builds anything: its own flags, the device, and
whether the estimated peak fits in the memory available.

A run that does not fit is not a measurement: on a CPU the kernel's OOM killer ends the process
without a word (a 7B model in fp32 is killed after a minute of building); on a GPU it is an
out-of-memory error half-way through. So the estimate -- for the kernels the device really runs
(``lower(device="cpu")`` on a CPU) -- is compared with the memory available first, and the run
is refused with both numbers unless ``--force``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from memcalc.errors import MemcalcError
from memcalc.measure.limits import SEED_MAX
from memcalc.spec.training import Precision
from memcalc.strategies.recompute import Recompute
from memcalc.units import format_bytes

MEMORY_MARGIN = 0.10
"""Fraction added to the estimated need before comparing it with the memory available: the
estimate counts tensors, not the allocator's rounding and fragmentation (glibc arenas on a CPU,
the caching allocator's blocks on CUDA: 3-5% at small sizes) nor library workspaces."""

BUILD_BYTES_PER_PARAM = 4
"""Both implementations construct the model on the host in torch's default dtype (fp32) and
then move and cast it (``build_model``): 4 bytes per parameter of host RAM at once, whatever
the recipe's weight dtype (and before any quantization)."""


MEASURED_PRECISIONS = tuple(p for p in Precision if p is not Precision.fp8_mixed)
"""The recipes measure runs (fp8 needs Transformer Engine or torchao, not here)."""


def check_flags(
    *,
    precision: Precision,
    recompute: Recompute,
    every: int | None,
    tolerance: float,
    seed: int,
    num_layers: int,
    dropout: float | None = None,
    timeout: float | None = None,
) -> None:
    """Refuse measure's own flags that would run something else than asked, or crash later.

    >>> check_flags(precision=Precision.fp32, recompute=Recompute.none, every=None,
    ...             tolerance=float("nan"), seed=0, num_layers=12)
    Traceback (most recent call last):
    ...
    memcalc.errors.MemcalcError: --tolerance: must be a number in (0, 1], got nan
    """
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, (int, float))
        or not 0 < tolerance <= 1
    ):
        raise MemcalcError(f"--tolerance: must be a number in (0, 1], got {tolerance!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise MemcalcError(f"--seed: must be between 0 and {SEED_MAX:,} (2**64 - 1), got {seed}")
    if dropout is not None and not (math.isfinite(dropout) and 0 <= dropout < 1):
        raise MemcalcError(f"--dropout: must be a rate in [0, 1), got {dropout!r}")
    if timeout is not None and not (math.isfinite(timeout) and 1 <= timeout <= 86_400):
        raise MemcalcError(f"--timeout: must be between 1 and 86400 seconds, got {timeout!r}")
    if precision not in MEASURED_PRECISIONS:
        allowed = ", ".join(p.value for p in MEASURED_PRECISIONS)
        raise MemcalcError(
            f"--precision {precision.value}: not measured (no fp8 matmuls without Transformer "
            f"Engine or torchao; memcalc estimate models it); choose one of: {allowed}"
        )
    if recompute is Recompute.budget:
        raise MemcalcError(
            "--recompute: budget is not measured; choose one of: none, selective, full, "
            "every-k, block"
        )
    if every is not None:
        if recompute not in (Recompute.every_k, Recompute.block):
            raise MemcalcError(
                "--every: sets k of --recompute every-k or block; got --recompute "
                f"{recompute.value}"
            )
        if not 1 <= every <= num_layers:
            raise MemcalcError(
                f"--every: must be between 1 and the number of blocks ({num_layers}); got {every}"
            )


def resolve_device(flag: str | None) -> torch.device:
    """The device ``--device`` names (default: the current CUDA GPU if there is one, else the
    CPU); a one-line MemcalcError for anything measure cannot run on.

    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("meta")
    Traceback (most recent call last):
    ...
    memcalc.errors.MemcalcError: --device meta: nothing to measure on meta tensors; use cpu or cuda
    """
    if flag is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    text = flag.strip().lower()
    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        raise MemcalcError(
            f"--device {flag}: not a torch device; choose cpu or cuda (cuda:N for one GPU)"
        ) from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type == "meta":
        raise MemcalcError("--device meta: nothing to measure on meta tensors; use cpu or cuda")
    if dev.type != "cuda":
        raise MemcalcError(
            f"--device {text}: measure counts bytes exactly on the CPU or with CUDA's "
            "allocator statistics; choose cpu or cuda (cuda:N)"
        )
    if not torch.backends.cuda.is_built():
        raise MemcalcError(
            f"--device {text}: this torch ({torch.__version__}) is built without CUDA; "
            "install a CUDA build of torch, or use --device cpu"
        )
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise MemcalcError(f"--device {text}: no CUDA GPU is visible; use --device cpu")
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if index >= count:
        raise MemcalcError(
            f"--device {text}: this machine has {count} CUDA GPU{'s' * (count > 1)} "
            f"(cuda:0{f' to cuda:{count - 1}' if count > 1 else ''})"
        )
    return torch.device("cuda", index)


def host_available_bytes() -> int | None:
    """Host RAM a new allocation can get without swapping: ``MemAvailable`` of /proc/meminfo,
    capped by the cgroup's limit (a container) less its usage; None where neither is known."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            cap = Path(limit).read_text().strip()
            if cap != "max" and int(cap) < 2**60:  # v1 writes 'unlimited' as ~2**63
                found.append(int(cap) - int(Path(usage).read_text()))
        except (OSError, ValueError):
            continue
    if not found:
        try:
            import psutil  # type: ignore[import-untyped]

            found.append(int(psutil.virtual_memory().available))
        except ImportError:
            try:
                found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
            except (ValueError, OSError, AttributeError):
                return None
    return max(0, min(found))


def device_free_bytes(dev: torch.device) -> int:
    """Free memory of a CUDA device (``cudaMemGetInfo``, after this process's context)."""
    free, _total = torch.cuda.mem_get_info(dev)
    return int(free)


@dataclass(frozen=True)
class Need:
    """Memory one run needs where it runs (one of them is 0 on a CPU run)."""

    host_bytes: int
    """Host RAM: building the model (fp32), plus everything of a CPU run, plus the optimizer
    state offloaded to the host."""
    device_bytes: int = 0
    """CUDA memory: the estimated peak of the step on the GPU."""
    gpu: torch.device | None = None


def need_for(
    peak_bytes: int, host_state_bytes: int, params: int, dev: torch.device, ranks: int = 1
) -> Need:
    """What a run of ``ranks`` processes with this estimated per-rank peak needs on ``dev``
    (each rank builds the whole model on the host first)."""
    build = BUILD_BYTES_PER_PARAM * params
    if dev.type == "cpu":
        return Need(ranks * max(build, peak_bytes + host_state_bytes))
    return Need(ranks * (build + host_state_bytes), peak_bytes, dev)


def _amount(num_bytes: int) -> str:
    """GiB, or MiB below 1 GiB (a small model's need in GiB reads 0.00).

    >>> _amount(3 * 2**29), _amount(5 * 2**20)
    ('1.50 GiB', '5.0 MiB')
    """
    if num_bytes >= 2**30:
        return format_bytes(num_bytes)
    return f"{num_bytes / 2**20:.1f} MiB"


def check_memory(need: Need, *, force: bool, ranks: int = 1) -> list[str]:
    """Refuse a run whose need (plus MEMORY_MARGIN) exceeds what is available, unless
    ``force``; the notes to print (a forced run, memory that cannot be read)."""
    notes: list[str] = []
    checks: list[tuple[int, int | None, str]] = [
        (need.host_bytes, host_available_bytes(), "available in RAM on this host")
    ]
    if need.gpu is not None:
        devices = [torch.device("cuda", i) for i in range(ranks)] if ranks > 1 else [need.gpu]
        free = min(device_free_bytes(d) for d in devices)
        where = f"free on {need.gpu}"
        if ranks > 1:
            where = f"free on the emptiest of cuda:0-{ranks - 1}"
        checks.insert(0, (need.device_bytes, free, where))
    for bytes_, available, where in checks:
        if available is None:
            notes.append("memory available unknown here: the estimated need was not checked")
            continue
        with_margin = math.ceil(bytes_ * (1 + MEMORY_MARGIN))
        if with_margin <= available:
            continue
        what = "on the GPU" if where.startswith("free") else "on the host"
        text = (
            f"the estimated need {what} is {_amount(bytes_)} "
            f"({_amount(with_margin)} with a {MEMORY_MARGIN:.0%} margin) and "
            f"{_amount(available)} is {where}"
        )
        if force:
            notes.append(f"--force: run although {text}")
            continue
        raise MemcalcError(
            f"does not fit: {text}; try a smaller --batch, --seq or model, a --recompute "
            "strategy, or --force to run anyway"
        )
    return notes
