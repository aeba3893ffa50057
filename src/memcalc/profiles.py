"""GPU profiles: memory, peak FLOP/s, bandwidths, from the data files in ``profiles/``."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memcalc.errors import MemcalcError, one_of
from memcalc.resources import data_dir
from memcalc.spec.loaders import read_data_file
from memcalc.spec.training import DType

DEFAULT_GPU = "h100-sxm-80gb"


class GpuProfile(BaseModel):
    """One GPU model, as its datasheet describes it. Units are in the field names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Profile id, the file stem (e.g. h100-sxm-80gb).")
    display_name: str = Field(description="Marketing name.")
    vendor: str = Field(description="nvidia or amd.")
    memory_bytes: int = Field(gt=0, description="Device memory usable by the framework.")
    memory_bandwidth_bytes_per_s: float = Field(gt=0, description="Peak HBM/GDDR bandwidth.")
    host_link: str = Field(description="CPU<->GPU link used for offload.")
    host_link_bytes_per_s: float = Field(gt=0, description="Achievable per-direction rate.")
    fp32_flops_per_s: float = Field(ge=0, description="Dense FP32 (non-tensor) peak.")
    tf32_flops_per_s: float = Field(ge=0, description="Dense TF32 tensor peak (0: none).")
    bf16_flops_per_s: float = Field(ge=0, description="Dense BF16 tensor peak (0: none).")
    fp16_flops_per_s: float = Field(ge=0, description="Dense FP16 tensor peak.")
    fp8_flops_per_s: float = Field(ge=0, description="Dense FP8 tensor peak (0: none).")
    runtime_overhead_bytes: int = Field(
        ge=0, description="Assumed CUDA/ROCm context + library workspaces outside tensors."
    )
    source: str = Field(description="Datasheet the numbers come from.")
    notes: str = Field(default="", description="Anything non-obvious.")

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


def profile_dir() -> Path:
    return data_dir("profiles")


@cache
def list_profiles() -> dict[str, Path]:
    """Profile name -> file, for the built-in profiles."""
    return {p.stem: p for p in sorted(profile_dir().glob("*.toml"))}


def load_profile(name_or_path: str) -> GpuProfile:
    """A built-in profile by name, or a user's profile file by path."""
    builtin = list_profiles()
    if name_or_path in builtin:
        path = builtin[name_or_path]
    elif name_or_path.endswith((".toml", ".json")):
        path = Path(name_or_path)
    else:
        raise one_of("--gpu", name_or_path, list(builtin))
    data = read_data_file(path)
    try:
        return GpuProfile(**data)
    except ValidationError as e:
        raise MemcalcError(_validation_message(str(path), e)) from None


def _validation_message(source: str, err: ValidationError) -> str:
    """One line for a pydantic error: ``source: field: message; field: message``."""
    parts = []
    for e in err.errors():
        field = ".".join(str(loc) for loc in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        parts.append(f"{field}: {msg}" if field else msg)
    return f"{source}: " + "; ".join(parts)
