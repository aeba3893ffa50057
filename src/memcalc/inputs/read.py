"""The inputs of an estimate or a plan, read from flag values: the model, the GPU profile(s)
(``--gpu``, ``--gpu-memory``, ``--host-memory``), the training setup with the defaults the GPU
or model cannot run replaced, and the chosen strategy. The command line and the Python API both
call this (the library does not sit on the command line): what they print differs, what they
compute does not.

``given`` names the flags the user set (the command line's parameter sources; the API's
keyword arguments): a default the GPU cannot run is replaced only when the user did not choose
it. Notes (a replaced default, a deprecated flag) and warnings (a setup the user probably did
not mean, ``spec/compat.py``) come back as lines for the caller to print.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from memcalc.alloc_conf import DEFAULT as DEFAULT_ALLOC_CONF
from memcalc.alloc_conf import AllocConf, alloc_conf_from_env, parse_alloc_conf
from memcalc.errors import MemcalcError
from memcalc.frameworks import PARALLEL_IMPL_FRAMEWORKS, FrameworkName
from memcalc.inputs.catalog import LAYOUT_FIELDS
from memcalc.inputs.flags import Flag
from memcalc.inputs.framework_defaults import framework_defaults
from memcalc.profiles import GpuProfile, adhoc_profile, load_profile
from memcalc.spec.compat import check, fallbacks, framework_fallback
from memcalc.spec.deepspeed import parse_settings
from memcalc.spec.loaders import load_model, training_setup
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.options import Options
from memcalc.strategies.selection import chosen_options
from memcalc.units import parse_size
from memcalc.validate import FieldError


@dataclass(frozen=True)
class Inputs:
    """What a command computes with."""

    spec: ModelSpec
    profiles: tuple[GpuProfile, ...]
    setup: TrainingSetup
    headroom: float | None
    """None: automatic (0 on a step whose reserved memory is replayed, 10% otherwise)."""
    said: tuple[str, ...] = ()
    """Lines for stderr: ``note: ...`` and ``warning: ...``."""
    recompute: str | None = None
    """The recompute strategy ``--megatron-args`` names (used when ``--recompute`` is not)."""
    every: int | None = None
    """Its every-k interval (with ``recompute``)."""
    alloc_conf: AllocConf = DEFAULT_ALLOC_CONF
    """The caching allocator's settings (``--alloc-conf`` or the environment's)."""


def keyword_values(
    flags: tuple[Flag, ...], command: str, keywords: Mapping[str, Any]
) -> tuple[dict[str, Any], frozenset[str]]:
    """Every flag's value from Python keyword arguments (None: the default), parsed as the
    command line parses its words; and the names given."""
    known = {f.name: f for f in flags}
    values = {f.name: f.default for f in flags}
    given = set()
    for key, value in keywords.items():
        flag = known.get(key)
        if flag is None:
            raise MemcalcError(
                f"memcalc.{command}: unknown option {key!r}; choose one of: "
                f"{', '.join(sorted(known))}"
            )
        if value is None:
            continue
        values[key] = flag.value_of(value)
        given.add(key)
    return values, frozenset(given)


def read_inputs(
    values: Mapping[str, Any],
    given: frozenset[str],
    gpu_names: tuple[str | GpuProfile, ...],
    spec: ModelSpec | None = None,
) -> Inputs:
    """Model, profiles and setup from a command's flag values. ``spec`` (a ModelSpec the API
    was given) replaces ``--model``; a GpuProfile among ``gpu_names`` is used as it is
    (``--gpu-memory`` and ``--host-memory`` still apply)."""
    said: list[str] = []
    named = "gpu" in given or "gpus" in given
    profiles = tuple(_profile(name, values, named) for name in gpu_names)
    if values.get("megatron_args") is not None:
        return _megatron_inputs(values, given, profiles, spec)
    model = None
    if spec is None:
        model = values["model"]
        spec = load_model(model, values.get("revision"))
    fields = setup_fields(values, said)
    framework_defaults(fields, given, said)
    for fb in fallbacks(
        spec,
        profiles[0],
        precision=fields.get("precision") if "precision" in given else None,
        attention=fields.get("attention") if "attention" in given else None,
    ):
        fields[fb.field.removeprefix("--")] = fb.value
        said.append(f"note: {fb.message}")
    setup = training_setup(**fields)
    code = framework_fallback(spec, setup)
    if code is not None:
        setup = setup.replace(framework=code.value)
        if code.why:
            said.append(f"note: {code.message}")
    said += [f"warning: {w}" for w in check(spec, setup, model)]
    return Inputs(
        spec,
        profiles,
        setup,
        headroom_fraction(values.get("headroom")),
        tuple(said),
        alloc_conf=alloc_conf(values.get("alloc_conf")),
    )


def alloc_conf(text: str | None) -> AllocConf:
    """``--alloc-conf`` in ``PYTORCH_CUDA_ALLOC_CONF`` syntax; without it the environment's
    setting (``PYTORCH_CUDA_ALLOC_CONF``, then ``PYTORCH_ALLOC_CONF``), as torch reads it."""
    if text is not None:
        return parse_alloc_conf(text)
    return alloc_conf_from_env()


SET_BY_MEGATRON_ARGS = (
    "model",
    "batch",
    "seq",
    "precision",
    "grad_dtype",
    "optimizer",
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "etp",
    "sp",
    "vpp",
    "microbatches",
    "zero",
    "framework",
    "dropout",
)
"""Flags ``--megatron-args`` sets (giving them too is an error)."""


def _megatron_inputs(
    values: Mapping[str, Any],
    given: frozenset[str],
    profiles: tuple[GpuProfile, ...],
    spec: ModelSpec | None,
) -> Inputs:
    """The model, setup and recompute a Megatron argument list describes
    (``spec.megatron_args.read_megatron_args``)."""
    from memcalc.spec.megatron_args import read_megatron_args

    clash = [k for k in SET_BY_MEGATRON_ARGS if k in given]
    if clash or spec is not None:
        flag = "--" + (clash[0].replace("_", "-") if clash else "model")
        raise MemcalcError(f"{flag}: set by --megatron-args (give it there)")
    run = read_megatron_args(values["megatron_args"])
    setup = run.setup
    extra = megatron_fields(values)
    if extra:
        setup = setup.replace(megatron=setup.megatron_options.replace(**extra))
    said = tuple(f"warning: {w}" for w in check(run.spec, setup))
    headroom = headroom_fraction(values.get("headroom"))
    recompute = None if run.recompute == "none" else run.recompute
    return Inputs(
        run.spec,
        profiles,
        setup,
        headroom,
        said,
        recompute,
        run.every,
        alloc_conf(values.get("alloc_conf")),
    )


def with_configs(
    values: Mapping[str, Any], given: frozenset[str], flags: tuple[Flag, ...], command: str
) -> tuple[dict[str, Any], frozenset[str], tuple[str, ...]]:
    """``values`` with the options of the ``--config`` files (``memcalc.configs``) below the
    flags the user gave, parsed by the flags' own parsers; the names given (by the user or a
    file); what was read, how, and each field memcalc cannot model, as lines for stderr."""
    paths = values.get("config") or ()
    if not paths:
        return dict(values), given, ()
    from memcalc.configs import read_configs
    from memcalc.configs.options import merge_options, unused_note

    read = read_configs(paths)
    said = [f"note: --config {path}: read as: {kind}" for kind, path in read.sources]
    said += [f"warning: {w}" for w in read.warnings]
    by_name = {f.name: f for f in flags}
    merged, unused = merge_options(
        dict(values),
        read.options,
        accepts=set(by_name),
        given=lambda key: key in given,
        convert=lambda key, value: by_name[key].value_of(value),
    )
    note = unused_note(unused, command)
    if note:
        said.append(f"note: {note}")
    from_files = {k for k in read.options if k in by_name and k not in given}
    return merged, given | from_files, tuple(said)


def estimate_inputs(
    values: Mapping[str, Any],
    given: frozenset[str],
    gpu: str | GpuProfile | None = None,
    spec: ModelSpec | None = None,
) -> tuple[Inputs, Options | None, dict[str, Any]]:
    """What ``memcalc estimate`` (and ``memcalc.estimate``) computes with: the inputs (the
    ``--config`` files' notes first in ``said``), the chosen strategy (None: none, show every
    one) and the flag values with the files' merged in."""
    from memcalc.inputs.catalog import ESTIMATE

    merged, given, said = with_configs(values, given, ESTIMATE, "estimate")
    inputs = read_inputs(merged, given, (gpu or merged["gpu"],), spec)
    inputs = replace(inputs, said=said + inputs.said)
    return inputs, estimate_options(merged, inputs), merged


def estimate_options(values: Mapping[str, Any], inputs: Inputs | None = None) -> Options | None:
    """The strategy the flags choose, or ``--megatron-args`` does (None: none chosen, show
    every one)."""
    recompute, every = values["recompute"], values["every"]
    if recompute is None and inputs is not None and inputs.recompute is not None:
        from memcalc.strategies.recompute import Recompute

        recompute, every = Recompute(inputs.recompute), inputs.every
    return chosen_options(
        recompute,
        every,
        values["budget"],
        list(values["offload"]),
        values["mfu"],
    )


def _profile(name: str | GpuProfile, values: Mapping[str, Any], named: bool) -> GpuProfile:
    memory = values.get("gpu_memory")
    with _as_flag("--gpu-memory"):
        if memory is not None and not (named or isinstance(name, GpuProfile)):
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
    """``--headroom``: ``10%`` or ``0.1``, in [0, 0.9); None or ``auto``: automatic (the
    estimate picks ``RESERVED_HEADROOM`` or ``DEFAULT_HEADROOM``)."""
    if text is None or text.strip().lower() == "auto":
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


SETUP_KEYS = (
    "batch",
    "seq",
    "precision",
    "grad_dtype",
    "optimizer",
    "attention",
    "loss",
    "dropout",
    "moe_imbalance",
    "capacity_factor",
)
"""Flags that are TrainingSetup fields of the same name."""
RENAMED = {"foreach": "optimizer_foreach", "fused": "optimizer_fused"}
"""Flags whose TrainingSetup field has another name."""
FINETUNE_KEYS = (
    "lora_rank",
    "lora_alpha",
    "lora_targets",
    "lora_dropout",
    "quantize",
    "train_embeddings",
    "modules_to_save",
    "kbit_prep",
    "input_grads",
)
"""The fine-tuning flags: ``lora`` (a LoraSpec's fields), ``quantize``, ``kbit_prep``,
``input_grads``."""


def setup_fields(values: Mapping[str, Any], said: list[str] | None = None) -> dict[str, Any]:
    """The TrainingSetup fields (parallel layout flat) of a command's flag values;
    deprecation notes go to ``said``."""
    fields = {k: values[k] for k in SETUP_KEYS if k in values}
    fields |= {new: values[old] for old, new in RENAMED.items() if old in values}
    fields |= layout_fields(values) | finetune_fields(values) | engine_fields(values)
    if "framework" in values:
        fields["framework"] = framework_field(values, said if said is not None else [])
    megatron = megatron_fields(values)
    if megatron:
        fields["megatron"] = megatron
        if fields.get("framework") is None:
            fields["framework"] = FrameworkName.megatron
        elif fields["framework"] is not FrameworkName.megatron:
            flag = next(k for k in MEGATRON_FLAGS if values.get(k) is not None)
            raise MemcalcError(
                f"--{flag.replace('_', '-')}: a Megatron-LM argument; it needs --framework "
                f"megatron, not {fields['framework'].value}"
            )
    return fields


MEGATRON_FLAGS = {
    "attention_backend": "attention_backend",
    "transformer_impl": "transformer_impl",
    "cross_entropy_fusion": "cross_entropy_fusion",
    "recompute_modules": "recompute_modules",
    "overlap_grad_reduce": "overlap_grad_reduce",
    "moe_dispatcher": "moe_token_dispatcher",
}
"""Megatron flags -> MegatronOptions fields."""


def megatron_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The MegatronOptions fields the Megatron flags set (none given: {})."""
    out: dict[str, Any] = {}
    for flag, name in MEGATRON_FLAGS.items():
        value = values.get(flag)
        if value is not None:
            out[name] = _names(value) if flag == "recompute_modules" else value
    return out


def layout_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The parallel-layout fields (Parallelism's) of a command's flag values; ``--gpus``
    (``dp_gpus``) is ``--dp`` under its own name, so that its errors name it."""
    fields = {k: values[k] for k in LAYOUT_FIELDS if k in values}
    gpus = values.get("dp_gpus")
    if gpus is not None:
        if gpus != values["dp"] and values["dp"] != 1:
            raise MemcalcError("--gpus: the same as --dp; give one of them")
        fields["gpus"] = gpus
        del fields["dp"]
    return fields


def engine_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The sharding-engine fields (``--zero-engine``; ``--ds``: DeepSpeed's settings) of flag
    values."""
    fields: dict[str, Any] = {}
    if values.get("zero_engine") is not None:
        fields["zero_engine"] = values["zero_engine"]
    if values.get("ds"):
        fields["deepspeed"] = parse_settings(list(values["ds"]))
    return fields


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


def finetune_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The fine-tuning fields (lora, quantize, kbit_prep, input_grads) of flag values."""
    if "lora_rank" not in values:
        return {}
    fields: dict[str, Any] = {
        "quantize": values["quantize"],
        "kbit_prep": values["kbit_prep"],
        "input_grads": values["input_grads"],
    }
    if values["lora_rank"] is not None:
        fields["lora"] = {
            "rank": values["lora_rank"],
            "alpha": values["lora_alpha"],
            "targets": _names(values["lora_targets"]),
            "dropout": values["lora_dropout"],
            "train_embeddings": values["train_embeddings"],
            "modules_to_save": _names(values["modules_to_save"]),
        }
    return fields


def framework_field(values: Mapping[str, Any], said: list[str]) -> FrameworkName | None:
    """``--framework``, or what the deprecated ``--parallel-impl`` meant (a note in
    ``said``)."""
    old = values.get("parallel_impl")
    if old is None:
        framework: FrameworkName | None = values.get("framework")
        return framework
    name = PARALLEL_IMPL_FRAMEWORKS[old.lower()]
    said.append(f"note: --parallel-impl {old.lower()} is deprecated: use --framework {name.value}")
    if values.get("framework") not in (None, name):
        raise MemcalcError(
            f"--parallel-impl {old} and --framework {values['framework'].value} disagree"
        )
    return name
