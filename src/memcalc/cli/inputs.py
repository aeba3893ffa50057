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

from memcalc.alloc_conf import DEFAULT as DEFAULT_ALLOC_CONF
from memcalc.alloc_conf import AllocConf, alloc_conf_from_env, parse_alloc_conf
from memcalc.cli.common import setup_fields
from memcalc.errors import MemcalcError
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
    headroom: float | None
    """None: automatic (0 on a step whose reserved memory is replayed, 10% otherwise)."""
    alloc_conf: AllocConf = DEFAULT_ALLOC_CONF


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
    return Inputs(
        spec,
        profiles,
        setup,
        headroom_fraction(values.get("headroom")),
        alloc_conf(values.get("alloc_conf")),
    )


def alloc_conf(text: str | None) -> AllocConf:
    """``--alloc-conf`` in ``PYTORCH_CUDA_ALLOC_CONF`` syntax; without it the environment's
    setting (``PYTORCH_CUDA_ALLOC_CONF``, then ``PYTORCH_ALLOC_CONF``), as torch reads it."""
    if text is not None:
        return parse_alloc_conf(text)
    return alloc_conf_from_env()


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


def headroom_fraction(text: str | None) -> float | None:
    """``--headroom``: ``10%`` or ``0.1``, in [0, 0.9); None or ``auto``: automatic."""
    if text is None or text.lower() == "auto":
        return None
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise MemcalcError(
            f"--headroom: expected a fraction (0.1) or a percentage (10%), got {text!r}"
        ) from None
    if not 0 <= value < 0.9:
        raise MemcalcError(f"--headroom: must be at least 0 and below 90%, got {text}")
    return value


__all__ = ["DEFAULT_GPU", "Inputs", "alloc_conf", "given", "headroom_fraction", "read_inputs"]
