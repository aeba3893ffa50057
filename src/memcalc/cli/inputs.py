"""What ``estimate`` and ``plan`` read from their flags, resolved once: the model, the GPU
profile(s) (``--gpu``, ``--gpu-memory``, ``--host-memory``), the training setup with the
defaults the GPU or model cannot run replaced (said on stderr), and the warnings for setups a
user probably did not mean (``spec/compat.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import click
from click.core import ParameterSource

from memcalc.cli.common import setup_fields
from memcalc.errors import MemcalcError
from memcalc.estimate import DEFAULT_HEADROOM
from memcalc.frameworks import framework
from memcalc.profiles import DEFAULT_GPU, GpuProfile, adhoc_profile, load_profile
from memcalc.spec.compat import check, fallbacks
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.units import parse_size
from memcalc.validate import FieldError


@dataclass(frozen=True)
class Inputs:
    spec: ModelSpec
    profiles: tuple[GpuProfile, ...]
    setup: TrainingSetup
    headroom: float


def given(name: str) -> bool:
    """The user set this option (it is not the default)."""
    ctx = click.get_current_context()
    return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)


def read_inputs(
    values: dict[str, Any],
    gpu_names: tuple[str | GpuProfile, ...],
    spec: ModelSpec | None = None,
) -> Inputs:
    """Model, profiles and setup from a command's option values; fallbacks and warnings go to
    stderr, one line each. ``spec`` (the Python API's ModelSpec) replaces ``--model``; a
    GpuProfile among ``gpu_names`` is used as it is loaded (``--gpu-memory`` and
    ``--host-memory`` still apply)."""
    if spec is None:
        spec = load_model(values["model"])
    profiles = tuple(_profile(name, values) for name in gpu_names)
    fields = setup_fields(values)
    framework_defaults(fields)
    for fb in fallbacks(
        spec,
        profiles[0],
        precision=fields.get("precision") if given("precision") else None,
        attention=fields.get("attention") if given("attention") else None,
    ):
        fields[fb.field.removeprefix("--")] = fb.value
        click.echo(f"note: {fb.message}", err=True)
    setup = training_setup(**fields)
    for warning in check(spec, setup):
        click.echo(f"warning: {warning}", err=True)
    return Inputs(spec, profiles, setup, headroom_fraction(values.get("headroom")))


OPTION_OF = {"optimizer_fused": "fused"}
"""The command-line option of a TrainingSetup field, where the names differ."""


def framework_defaults(fields: dict[str, Any]) -> None:
    """The chosen framework's own defaults for the options not given (one note on stderr):
    torchtitan's MixedPrecisionPolicy, fused AdamW and attention kernel."""
    name = fields.get("framework")
    if name is None:
        return
    fw = framework(name)
    used = []
    for field, value in fw.defaults:
        if given(OPTION_OF.get(field, field)):
            continue
        if field == "precision" and fw.unsharded_precision and not _sharded(fields, fw):
            value = fw.unsharded_precision
        fields[field] = value
        flag = OPTION_OF.get(field, field).replace("_", "-")
        used.append(f"--{flag}" if value is True else f"--{flag} {value}")
    if used:
        click.echo(
            f"note: --framework {fw.label}: its defaults {', '.join(used)} "
            f"(torchtitan {fw.version}'s own; give the option to change it)",
            err=True,
        )


def _sharded(fields: dict[str, Any], fw: Any) -> bool:
    """FSDP2 runs over more than one rank (dp x cp under a framework that shards over cp)."""
    cp = fields.get("cp", 1) if fw.shards_over_cp else 1
    return (fields.get("shard_size") or fields.get("dp", 1)) * cp > 1


def _profile(name: str | GpuProfile, values: dict[str, Any]) -> GpuProfile:
    memory = values.get("gpu_memory")
    named = isinstance(name, GpuProfile) or given("gpus") or given("gpu")
    with _as_flag("--gpu-memory"):
        if memory is not None and not named:
            profile = adhoc_profile(parse_size(memory, "--gpu-memory"))
        else:
            profile = name if isinstance(name, GpuProfile) else load_profile(name)
            if memory is not None:
                profile = profile.with_memory(parse_size(memory, "--gpu-memory"))
    host = values.get("host_memory")
    if host is not None:
        with _as_flag("--host-memory"):
            profile = profile.with_host_memory(parse_size(host, "--host-memory"))
    return profile


@contextmanager
def _as_flag(flag: str) -> Iterator[None]:
    """A field error of the profile a flag changes (memory_bytes) named by that flag; errors
    of a profile file keep naming the file."""
    try:
        yield
    except FieldError as e:
        if e.source:
            raise
        raise FieldError(flag, f"{e.field}: {e.problem}") from None


def headroom_fraction(text: str | None) -> float:
    """``--headroom``: ``10%`` or ``0.1``, in [0, 0.9)."""
    if text is None:
        return DEFAULT_HEADROOM
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise MemcalcError(
            f"--headroom: expected a fraction (0.1) or a percentage (10%), got {text!r}"
        ) from None
    if not 0 <= value < 0.9:
        raise MemcalcError(f"--headroom: must be at least 0 and below 90%, got {text}")
    return value


__all__ = ["DEFAULT_GPU", "Inputs", "given", "headroom_fraction", "read_inputs"]
