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
from memcalc.profiles import DEFAULT_GPU, GpuProfile, adhoc_profile, load_profile
from memcalc.spec.compat import check, fallbacks, framework_fallback
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
    recompute: str | None = None
    """The recompute strategy ``--megatron-args`` names (used when ``--recompute`` is not)."""
    every: int | None = None


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
    profiles = tuple(_profile(name, values) for name in gpu_names)
    if values.get("megatron_args") is not None:
        return _megatron_inputs(values, profiles, spec)
    if spec is None:
        spec = load_model(values["model"])
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
    fb = framework_fallback(spec, setup)
    if fb is not None:
        setup = setup.replace(framework=fb.value)
        if fb.why:
            click.echo(f"note: {fb.message}", err=True)
    for warning in check(spec, setup):
        click.echo(f"warning: {warning}", err=True)
    return Inputs(spec, profiles, setup, headroom_fraction(values.get("headroom")))


SET_BY_MEGATRON_ARGS = ("model", "batch", "seq", "precision", "grad_dtype", "optimizer", "dp",
                        "tp", "pp", "cp", "ep", "etp", "sp", "vpp", "microbatches", "zero",
                        "framework", "dropout")
"""Options ``--megatron-args`` sets (giving them too is an error)."""


def _megatron_inputs(
    values: dict[str, Any], profiles: tuple[GpuProfile, ...], spec: ModelSpec | None
) -> Inputs:
    """The model, setup and recompute a Megatron argument list describes
    (``spec.megatron_args.read_megatron_args``)."""
    from memcalc.spec.megatron_args import read_megatron_args

    clash = [k for k in SET_BY_MEGATRON_ARGS if k in values and given(k)]
    if clash or spec is not None:
        flag = "--" + (clash[0].replace("_", "-") if clash else "model")
        raise MemcalcError(f"{flag}: set by --megatron-args (give it there)")
    run = read_megatron_args(values["megatron_args"])
    setup = run.setup
    extra = setup_fields(values).get("megatron")
    if extra:
        setup = setup.replace(megatron=setup.megatron_options.replace(**extra))
    for warning in check(run.spec, setup):
        click.echo(f"warning: {warning}", err=True)
    headroom = headroom_fraction(values.get("headroom"))
    recompute = None if run.recompute == "none" else run.recompute
    return Inputs(run.spec, profiles, setup, headroom, recompute, run.every)


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
