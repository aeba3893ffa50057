"""GPU profiles: memory, peak FLOP/s, bandwidths and the typical server around the GPU, from
the data files in ``profiles/``.

A built-in profile sets every field explicitly (a test checks it). A user's own profile may
give only ``name`` and ``memory_bytes``: every other field then takes the figure of the
reference profile ``h100-sxm-80gb`` (``REFERENCE_PROFILE``), and ``defaulted_fields()`` lists
which ones did, so a report can say so.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from memcalc.dtypes import DType
from memcalc.errors import MemcalcError, one_of
from memcalc.files import read_data_file, shown
from memcalc.resources import data_dir
from memcalc.units import GB, GIB, Unit, format_bytes
from memcalc.validate import FieldError, check, parse, replace, spec_field

DEFAULT_GPU = "h100-sxm-80gb"

REFERENCE_PROFILE = "h100-sxm-80gb"
"""The built-in profile whose figures are the defaults of every optional ``GpuProfile`` field
(a test checks that each default equals that file's value)."""

_REF = f"Default: {REFERENCE_PROFILE}'s figure"

ALIASES: dict[str, str] = {
    # Short names people type -> profile id. Keys are lower case; lookup is case-insensitive.
    # An ambiguous short name maps to the variant stated in its comment.
    "v100": "v100-sxm2-16gb",  # the original 16 GB SXM2 part (AWS p3)
    "v100-16gb": "v100-sxm2-16gb",
    "v100-32gb": "v100-sxm2-32gb",
    "t4": "t4-16gb",
    "a10g": "a10g-24gb",
    "l4": "l4-24gb",
    "l40": "l40-48gb",
    "l40s": "l40s-48gb",
    "a40": "a40-48gb",
    "a6000": "rtx-a6000-48gb",
    "rtxa6000": "rtx-a6000-48gb",
    "rtx-a6000": "rtx-a6000-48gb",
    "6000ada": "rtx-6000-ada-48gb",
    "rtx6000ada": "rtx-6000-ada-48gb",
    "rtx-6000-ada": "rtx-6000-ada-48gb",
    "3090": "rtx-3090-24gb",
    "rtx3090": "rtx-3090-24gb",
    "rtx-3090": "rtx-3090-24gb",
    "4090": "rtx-4090-24gb",
    "rtx4090": "rtx-4090-24gb",
    "rtx-4090": "rtx-4090-24gb",
    "5090": "rtx-5090-32gb",
    "rtx5090": "rtx-5090-32gb",
    "rtx-5090": "rtx-5090-32gb",
    "a100": "a100-sxm-80gb",  # the 80 GB SXM part
    "a100-80gb": "a100-sxm-80gb",
    "a100-40gb": "a100-sxm-40gb",
    "a100-pcie": "a100-pcie-40gb",
    "h100": "h100-sxm-80gb",  # the SXM5 part
    "h100-sxm": "h100-sxm-80gb",
    "h100-pcie": "h100-pcie-80gb",
    "h20": "h20-96gb",
    "h200": "h200-sxm-141gb",
    "gh200": "gh200-96gb",  # the HBM3 variant
    "b200": "b200-180gb",
    "b300": "b300-288gb",
    "mi250x": "mi250x-gcd-64gb",  # one GCD: what ROCm/PyTorch see as one device
    "mi250x-gcd": "mi250x-gcd-64gb",
    "mi250x-module": "mi250x-128gb",
    "mi300x": "mi300x-192gb",
    "mi325x": "mi325x-256gb",
}


ARCHITECTURES = ("volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3")
"""Tensor-core generations a profile's ``architecture`` may name."""

MIN_FLOPS_PER_S = 1e9
"""A nonzero FLOP/s figure below this (1 GFLOP/s) is a typo, not a GPU."""
MAX_FLOPS_PER_S = 1e18
MIN_BYTES_PER_S = 1e6
MAX_BYTES_PER_S = 1e15


PROFILE_LIMITS: dict[str, tuple[float, float]] = {
    "runtime_overhead_bytes": (0, 2**50),
    "gpus_per_node": (1, 4096),
    "sm_count": (1, 4096),
    "host_memory_bytes_per_gpu": (0, 2**50),
    "nvme_bytes_per_gpu": (0, 2**60),
    "cpu_adam_params_per_s": (1e3, 1e15),
}
"""Bounds of the profile fields the rate and bandwidth rules below do not cover: beyond any
server (1 PiB of host memory per GPU, 4,096 GPUs per node), and CPU optimizer rates for
which a step's time stays finite."""


@dataclass(frozen=True, kw_only=True)
class GpuProfile:
    """One GPU model as its datasheet describes it, plus the typical server it sits in (for
    multi-GPU layouts and offload planning). Units are in the field names; bytes/s figures are
    per direction unless a field says otherwise."""

    name: str = spec_field(
        "Profile id, the file stem (e.g. h100-sxm-80gb).",
    )
    display_name: str = spec_field(
        "Marketing name. Default: the name.",
        default="",
    )
    vendor: str = spec_field(
        f"nvidia or amd. {_REF} (nvidia).",
        default="nvidia",
    )
    memory_bytes: int = spec_field(
        "Device memory usable by the framework (torch total_memory), bytes.",
        ge=2**20,
        le=2**50,
        size=True,
    )
    memory_bandwidth_bytes_per_s: float = spec_field(
        f"Peak HBM/GDDR bandwidth. {_REF} (3.35e12).",
        default=3.35e12,
        gt=0,
    )
    host_link: str = spec_field(
        f"CPU<->GPU link used for offload. {_REF}.",
        default="PCIe 5.0 x16",
    )
    host_link_bytes_per_s: float = spec_field(
        f"Achievable per-direction host link rate. {_REF} (50e9).",
        default=50e9,
        gt=0,
    )
    fp32_flops_per_s: float = spec_field(
        f"Dense FP32 (non-tensor) peak. {_REF} (67e12).",
        default=67e12,
        ge=0,
    )
    tf32_flops_per_s: float = spec_field(
        f"Dense TF32 tensor peak (0: none). {_REF}.",
        default=494.7e12,
        ge=0,
    )
    bf16_flops_per_s: float = spec_field(
        f"Dense BF16 tensor peak (0: none). {_REF}.",
        default=989.4e12,
        ge=0,
    )
    fp16_flops_per_s: float = spec_field(
        f"Dense FP16 tensor peak. {_REF}.",
        default=989.4e12,
        ge=0,
    )
    fp8_flops_per_s: float = spec_field(
        f"Dense FP8 tensor peak (0: none). {_REF}.",
        default=1978.9e12,
        ge=0,
    )
    architecture: str = spec_field(
        "Tensor-core generation (volta, turing, ampere, ada, hopper, blackwell, cdna2, cdna3): "
        f"which attention kernels run at which rate (``steptime/kernels.py``). {_REF} (hopper).",
        default="hopper",
    )
    sm_count: int = spec_field(
        "Streaming multiprocessors (AMD: compute units): a GEMM's tiles run in waves of this "
        f"many (NVIDIA Matrix Multiplication Background guide, wave quantization). {_REF} (132).",
        default=132,
        ge=1,
    )
    bf16_matmul_efficiency: float = spec_field(
        "Largest fraction of the dense 16-bit peak a well-shaped matmul reaches (maximum "
        "achievable matmul FLOPS, measured: stas00/ml-engineering compute/accelerator "
        f"README). {_REF} (H100 SXM: 794.5 of 989 TFLOP/s = 0.803).",
        default=0.803,
        gt=0,
        le=1,
    )
    fp8_matmul_efficiency: float = spec_field(
        "The same for fp8 matmuls (torch._scaled_mm, float8_e4m3fn). "
        f"{_REF} (H100 SXM: 1402.6 of 1979 TFLOP/s = 0.709).",
        default=0.709,
        gt=0,
        le=1,
    )
    compute_capability: float = spec_field(
        "CUDA compute capability major.minor (0: not a CUDA device); Transformer Engine picks "
        f"its attention backend and workspace sizes by it. {_REF} (9.0).",
        default=9.0,
        ge=0,
        le=20,
    )
    runtime_overhead_bytes: int = spec_field(
        f"Assumed CUDA/ROCm context + library workspaces outside tensors. {_REF} (1 GiB).",
        default=GIB,
        ge=0,
        size=True,
    )
    gpus_per_node: int = spec_field(
        f"GPUs (devices as the framework sees them) in the typical server. {_REF} (8).",
        default=8,
        ge=1,
    )
    intra_node_link: str = spec_field(
        f"GPU<->GPU link inside a node ('PCIe ...' when there is none). {_REF}.",
        default="NVLink 4 via NVSwitch",
    )
    intra_node_bytes_per_s: float = spec_field(
        "Per-GPU one-direction bandwidth to its peers inside the node, all links "
        f"together (e.g. NVLink 4: 450e9 of the 900e9 bidirectional total). {_REF} (450e9).",
        default=450e9,
        gt=0,
    )
    inter_node_link: str = spec_field(
        f"Network between nodes in the typical cluster. {_REF}.",
        default="InfiniBand NDR 400 Gb/s, one ConnectX-7 per GPU",
    )
    inter_node_bytes_per_s: float = spec_field(
        "Per-GPU share of the node's scale-out NIC bandwidth, one direction "
        f"(400 Gb/s = 50e9 bytes/s). {_REF} (50e9).",
        default=50e9,
        gt=0,
    )
    host_memory_bytes_per_gpu: int = spec_field(
        "Installed host DRAM of the typical server divided by its GPUs (the OS and "
        f"framework use part of it). {_REF} (DGX H100: 2 TB / 8 = 256 GiB).",
        default=256 * GIB,
        ge=0,
        size=True,
    )
    cpu_adam_params_per_s: float = spec_field(
        "Parameters per second a CPU optimizer step (DeepSpeed CPUAdam) updates "
        "using this GPU's share of the server's physical cores: cores per GPU x 2.94e7 "
        "params/s per core (DeepSpeed measurement, see profiles/*.toml). "
        f"{_REF} (14 cores per GPU: 4.12e8).",
        default=4.12e8,
        gt=0,
    )
    nvme_bytes_per_s: float = spec_field(
        "Per-GPU share of the node's local NVMe (RAID-0) bandwidth for optimizer "
        "offload: the harmonic mean 2/(1/read + 1/write) of measured sequential rates, so "
        "(bytes read + bytes written) / this = swap time. 0: no local NVMe. "
        f"{_REF} (1.67e9).",
        default=1.67e9,
        ge=0,
    )
    nvme_bytes_per_gpu: int = spec_field(
        "Local NVMe capacity of the typical server divided by its GPUs, bytes "
        f"(0: none). {_REF} (DGX H100: 8 x 3.84 TB / 8 = 3.84e12).",
        default=3_840_000_000_000,
        ge=0,
        size=True,
    )
    source: str = spec_field(
        "Datasheet(s) and other sources the numbers come from (URLs).",
        default=f"user-supplied profile; every field it does not set is {REFERENCE_PROFILE}'s",
    )
    notes: str = spec_field(
        "Anything non-obvious.",
        default="",
    )

    given: frozenset[str] | None = dataclasses.field(default=None, repr=False, compare=False)
    """The fields its file set (None: all of them -- a profile built in code)."""

    def __post_init__(self) -> None:
        check(self)
        if not self.display_name:  # frozen: set the documented default once, here
            object.__setattr__(self, "display_name", self.name)

    def _check(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise FieldError(
                "architecture",
                f"unknown value {self.architecture!r}; choose one of: {', '.join(ARCHITECTURES)}",
            )
        for name, (low, high) in PROFILE_LIMITS.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise FieldError(name, f"must be from {low:,g} to {high:,g}, got {value!r}")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if (
                f.name.endswith("flops_per_s")
                and value
                and not (MIN_FLOPS_PER_S <= value <= MAX_FLOPS_PER_S)
            ):
                raise FieldError(
                    f.name,
                    f"must be 0 (none) or between {MIN_FLOPS_PER_S:g} and "
                    f"{MAX_FLOPS_PER_S:g} FLOP/s, got {value!r}",
                )
            if (
                f.name.endswith("bytes_per_s")
                and value
                and not (MIN_BYTES_PER_S <= value <= MAX_BYTES_PER_S)
            ):
                raise FieldError(
                    f.name,
                    f"must be between {MIN_BYTES_PER_S:g} and {MAX_BYTES_PER_S:g} bytes/s, "
                    f"got {value!r}",
                )

    def fields(self) -> dict[str, Any]:
        """Every profile field and its value, in file order."""
        return {f: getattr(self, f) for f in FIELDS}

    def defaulted_fields(self) -> tuple[str, ...]:
        """Fields this profile did not set, so they hold the reference profile's figures.

        >>> given = {"name": "x", "memory_bytes": 48 * 10**9}
        >>> parse(GpuProfile, {**given, "given": frozenset(given)}).defaulted_fields()[:3]
        ('display_name', 'vendor', 'memory_bandwidth_bytes_per_s')
        """
        if self.given is None:
            return ()
        return tuple(f for f in FIELDS if f not in self.given)

    def with_memory(self, memory_bytes: int) -> GpuProfile:
        """This profile with another amount of usable device memory (``--gpu-memory``).

        >>> p = load_profile("h100").with_memory(48 * 10**9)
        >>> p.name, p.memory_bytes, p.bf16_flops_per_s
        ('h100-sxm-80gb@48GB', 48000000000, 989400000000000.0)
        """
        size = _size_label(memory_bytes)
        return replace(
            self,
            name=f"{self.name}@{size}",
            display_name=f"{self.display_name}, memory set to {size}",
            memory_bytes=_positive_bytes(memory_bytes),
            notes=f"memory_bytes overridden to {memory_bytes} (profile value "
            f"{self.memory_bytes}). {self.notes}".strip(),
        )

    def with_host_memory(self, bytes_per_node: int) -> GpuProfile:
        """This profile with another server's host RAM (``--host-memory``, per node).

        >>> load_profile("h100").with_host_memory(2**40).host_memory_bytes_per_gpu == 2**40 // 8
        True
        """
        return replace(
            self,
            host_memory_bytes_per_gpu=_positive_bytes(bytes_per_node) // self.gpus_per_node,
            notes=f"host RAM per node set to {bytes_per_node} bytes. {self.notes}".strip(),
        )

    def matmul_efficiency(self, dtype: DType) -> float:
        """The measured ceiling of a matmul in ``dtype`` as a fraction of its dense peak (the
        16-bit figure for 16- and 32-bit inputs)."""
        return self.fp8_matmul_efficiency if dtype is DType.fp8 else self.bf16_matmul_efficiency

    def matmul_flops_per_s(self, dtype: DType) -> float:
        """Dense peak for matmuls in ``dtype`` (fp32 uses TF32 tensor cores when present)."""
        by_dtype = {
            DType.fp32: self.tf32_flops_per_s or self.fp32_flops_per_s,
            DType.bf16: self.bf16_flops_per_s,
            DType.fp16: self.fp16_flops_per_s,
            DType.fp8: self.fp8_flops_per_s,
        }
        peak = by_dtype.get(dtype, 0.0)
        if peak <= 0:
            raise MemcalcError(
                f"--precision: {self.display_name} has no dense {dtype.value} tensor throughput "
                f"in its profile; choose another precision or GPU"
            )
        return peak


def reference_defaults() -> dict[str, Any]:
    """Every optional field and its default (the reference profile's figure).

    >>> reference_defaults()["gpus_per_node"]
    8
    """
    return {
        f.name: f.default
        for f in dataclasses.fields(GpuProfile)
        if f.name in FIELDS
        and f.default is not dataclasses.MISSING
        and f.name not in ("display_name", "source", "notes")
    }


def adhoc_profile(memory_bytes: int) -> GpuProfile:
    """A GPU known only by its memory (``--gpu-memory 48GB``): every other figure is the
    reference profile's (``REFERENCE_PROFILE``), read from the field defaults, no file.

    >>> p = adhoc_profile(48 * 10**9)
    >>> p.name, p.memory_bytes, p.gpus_per_node, len(p.defaulted_fields()) > 10
    ('custom@48GB', 48000000000, 8, True)
    """
    size = _size_label(memory_bytes)
    given = {
        "name": f"custom@{size}",
        "memory_bytes": _positive_bytes(memory_bytes),
        "display_name": f"custom GPU with {size} (other figures: {REFERENCE_PROFILE})",
    }
    return GpuProfile(**given, given=frozenset(given))  # type: ignore[arg-type]


def _positive_bytes(memory_bytes: int) -> int:
    if memory_bytes <= 0:
        raise MemcalcError(f"--gpu-memory: must be more than 0 bytes, got {memory_bytes}")
    return memory_bytes


def _size_label(num_bytes: int) -> str:
    """Short exact label: ``48GB`` for 48e9, ``40GiB`` for 40 * 2**30, else GiB to 2 places.

    >>> _size_label(48 * 10**9), _size_label(40 * 2**30), _size_label(123456789)
    ('48GB', '40GiB', '0.11GiB')
    """
    if num_bytes % GB == 0:
        return f"{num_bytes // GB}GB"
    if num_bytes % GIB == 0:
        return f"{num_bytes // GIB}GiB"
    return format_bytes(num_bytes, Unit.GiB).replace(" ", "")


def profile_dir() -> Path:
    return data_dir("profiles")


@cache
def list_profiles() -> dict[str, Path]:
    """Profile name -> file, for the built-in profiles (file names only; nothing is parsed)."""
    return {p.stem: p for p in sorted(profile_dir().glob("*.toml"))}


def resolve_profile_name(name: str) -> str | None:
    """The built-in profile id for a name or alias, case-insensitively; None if unknown.

    >>> resolve_profile_name("H100"), resolve_profile_name("rtx4090"), resolve_profile_name("x")
    ('h100-sxm-80gb', 'rtx-4090-24gb', None)
    """
    builtin = list_profiles()
    key = name.strip().lower()
    if key in builtin:
        return key
    target = ALIASES.get(key)
    return target if target in builtin else None


def _unknown_profile(name: str, builtin: list[str]) -> MemcalcError:
    """The one-line unknown-profile error, with a close match when there is one."""
    candidates = {p: p for p in builtin} | {a: t for a, t in ALIASES.items() if t in builtin}
    close = difflib.get_close_matches(name.strip().lower(), list(candidates), n=1, cutoff=0.6)
    if not close:
        return one_of("--gpu", name, builtin)
    return MemcalcError(
        f"--gpu: unknown value {name!r}; did you mean {candidates[close[0]]!r}? "
        f"choose one of: {', '.join(builtin)}"
    )


def load_profile(name_or_path: str) -> GpuProfile:
    """A built-in profile by id or alias (case-insensitive), or a user's profile file by path.

    Only the one file asked for is read. A user file may omit ``name`` (the file stem is used)
    and any field but ``memory_bytes`` (the reference profile's figure is used).
    """
    builtin = list_profiles()
    resolved = resolve_profile_name(name_or_path)
    if resolved is not None:
        path = builtin[resolved]
    elif name_or_path.endswith((".toml", ".json")):
        path = Path(name_or_path)
    else:
        raise _unknown_profile(name_or_path, list(builtin))
    try:
        missing = resolved is None and not path.exists() and not path.is_dir()
    except (OSError, ValueError):
        missing = False  # read_data_file says what is wrong with the path
    if missing:
        raise MemcalcError(
            f"--gpu: {shown(path)}: no such file; give a profile file's path or one of: "
            f"{', '.join(builtin)}"
        )
    data = read_data_file(path)
    data.setdefault("name", path.stem)
    if "given" in data:
        raise FieldError("given", "unknown key", str(path))
    return parse(GpuProfile, {**data, "given": frozenset(data)}, str(path))


FIELDS = tuple(f.name for f in dataclasses.fields(GpuProfile) if f.name != "given")
"""The fields of a profile file, in order."""
