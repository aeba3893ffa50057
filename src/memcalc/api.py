"""memcalc from Python: ``memcalc.estimate(...)`` and ``memcalc.plan(...)`` (docs/api.md).

They take what ``memcalc estimate`` and ``memcalc plan`` take -- the options' names with
``_`` for ``-`` (``grad_dtype``, ``max_gpus``), the same strings (``recompute="full"``,
``offload=["optimizer=cpu"]``, ``unit``-free sizes such as ``budget="20GiB"``), the same
defaults -- and return what the command prints, as objects: an ``Estimate`` (a Breakdown) and
a ``Plan`` (a PlanResult), each with ``to_dict()``, the command's JSON output.

The keywords are parsed by the command itself (its click options, then the conversions the
command runs: ``spec.loaders``, ``profiles.load_profile``, ``strategies.selection
.chosen_options``, ``cli.plan.plan_request``), so a value the command refuses raises the same
one-line MemcalcError here.

>>> b = estimate("gpt2", gpu="h100", seq=1024, recompute="full")
>>> b.strategy, b.fits, b.to_dict()["strategies"][0]["recompute"]
('full', True, 'full')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

from memcalc.errors import MemcalcError
from memcalc.estimate import Breakdown, Options
from memcalc.plan import Maximized, PlanResult
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec

if TYPE_CHECKING:
    import click

OUTPUT_OPTIONS = frozenset({"fmt", "unit", "wide", "plot", "why", "version", "help"})
"""Options that only change how a command prints (no meaning in Python)."""
HELP_OPTIONS = ["-h", "--help"]
"""``memcalc.cli.CONTEXT``'s help options: click keeps a command's help option as the first
context that asks for it made it, so the API's context must make the command line's."""


class Estimate(Breakdown):
    """A Breakdown (``memcalc.estimate.Breakdown``: bytes by component, the peak, the step
    timeline, times, whether it fits), with ``to_dict``."""

    @classmethod
    def of(cls, b: Breakdown) -> Estimate:
        return cls(**{f.name: getattr(b, f.name) for f in dataclasses.fields(b)})

    def to_dict(self) -> dict[str, Any]:
        """What ``memcalc estimate --recompute ... --format json`` prints for this strategy:
        the context, ``strategies`` (this one's record) and the ``timeline`` (docs/json.md)."""
        from memcalc.report.records import estimate_record

        return estimate_record(self)


@dataclasses.dataclass(frozen=True)
class Plan(PlanResult):
    """A PlanResult (``memcalc.plan.PlanResult``: per GPU kind the fewest GPUs that fit, the
    ranked ``rows``, ``fastest``), with what ``maximize`` found and ``to_dict``."""

    maximized: tuple[Maximized, ...] = ()
    """With ``maximize="batch"`` or ``"seq"``: the largest value per GPU kind that fits."""

    def to_dict(self) -> dict[str, Any]:
        """What ``memcalc plan --format json`` prints (docs/json.md)."""
        from memcalc.report.plan import plan_record

        return plan_record(self, list(self.maximized))


def estimate(
    model: str | ModelSpec | None = None,
    *,
    gpu: str | GpuProfile | None = None,
    seq: int | None = None,
    batch: int | None = None,
    recompute: str | None = None,
    offload: str | Iterable[str] = (),
    **options: Any,
) -> Estimate:
    """The Breakdown of one training step of ``model`` on ``gpu``, as ``memcalc estimate``
    computes it for one strategy (no recompute and no offload unless chosen).

    ``model``: a preset, an HF hub id, a spec or config.json path, or a ModelSpec; ``gpu``: a
    profile name, alias or file, or a GpuProfile. Every other option of ``memcalc estimate``
    is a keyword: ``precision="bf16-mixed"``, ``optimizer="adamw"``, ``attention="sdpa"``,
    ``dp=8`` (or ``gpus=8``), ``zero=3``, ``tp``, ``pp``, ``microbatches``,
    ``every=4`` (``recompute="every-k"``), ``budget="20GiB"`` (``recompute="budget"``),
    ``mfu=0.4``, ``lora_rank=16``, ``quantize="nf4"``, ... (``memcalc estimate -h``).

    >>> b = estimate("llama-2-7b", gpu="a100", seq=4096, recompute="full",
    ...              offload=["optimizer=cpu"])
    >>> b.strategy, b.optimizer_bytes, b.fits
    ('full + offload optimizer=cpu', 0, True)
    """
    from memcalc.cli.estimate import estimate_command, estimate_inputs

    if "gpus" in options:  # --gpus is --dp's other name
        options["dp"] = options.pop("gpus")
    given = {"model": model, "gpu": gpu, "seq": seq, "batch": batch, "recompute": recompute}
    ctx = _parse(estimate_command, "estimate", {**given, "offload": offload, **options})
    with ctx:  # the command's context: which options were given (cli.inputs.given)
        spec = model if isinstance(model, ModelSpec) else None
        run, _, chosen = estimate_inputs(ctx.params, spec, gpu)
        return Estimate.of(run(chosen or Options()))


def plan(
    model: str | ModelSpec | None = None,
    *,
    gpu: str | GpuProfile | Iterable[str | GpuProfile] | None = None,
    seq: int | None = None,
    max_gpus: int | None = None,
    global_batch: int | None = None,
    maximize: str | None = None,
    **options: Any,
) -> Plan:
    """What ``memcalc plan`` answers: the fewest GPUs of each kind that fit, the fastest
    configuration within ``max_gpus`` and the ranked table.

    ``gpu``: one kind or several to compare (names, aliases, files or GpuProfiles). Every
    other option of ``memcalc plan`` is a keyword: ``global_tokens="4M"``, ``headroom="10%"``
    (or 0.1), ``host_memory="1TiB"``, ``microbatches``, ``mfu``, ``top``, ``maximize="batch"``,
    ``precision``, ``lora_rank``, ... (``memcalc plan -h``).

    >>> p = plan("llama-2-7b", gpu="h100", seq=4096, max_gpus=8)
    >>> p.kinds[0].fewest.gpus, p.fastest.gpus, p.to_dict()["min_gpus"]
    (2, 8, {'h100-sxm-80gb': 2})
    """
    from memcalc.cli.plan import plan_command, plan_request, run_plan

    kinds: list[str | GpuProfile] = (
        [] if gpu is None else [gpu] if isinstance(gpu, (str, GpuProfile)) else list(gpu)
    )
    given: dict[str, Any] = {"model": model, "seq": seq, "max_gpus": max_gpus}
    given["global_batch"] = global_batch
    given["gpus"] = [g for g in kinds if isinstance(g, str)]
    ctx = _parse(plan_command, "plan", {**given, "maximize": maximize, **options})
    with ctx:
        spec = model if isinstance(model, ModelSpec) else None
        request, what = plan_request(ctx.params, spec, tuple(kinds))
    result, found = run_plan(request, what)
    return Plan(result.request, result.kinds, result.search_seconds, tuple(found))


def _parse(command: click.Command, name: str, given: dict[str, Any]) -> click.Context:
    """The context of ``memcalc NAME`` run with the command line that ``given`` spells (None:
    the option's default; a ModelSpec or GpuProfile is left out, the caller uses it): its
    ``params`` are the option values; its usage errors as the one line the command prints."""
    import click

    params = {p.name: p for p in command.params if p.name and p.name not in OUTPUT_OPTIONS}
    argv: list[str] = []
    for key, value in given.items():
        param = params.get(key)
        if param is None or not isinstance(param, click.Option):
            names = sorted(k for k in params if k is not None)
            raise MemcalcError(
                f"memcalc.{name}: unknown option {key!r}; choose one of: {', '.join(names)}"
            )
        argv += _words(param, value)
    try:
        return command.make_context(f"memcalc {name}", argv, help_option_names=HELP_OPTIONS)
    except click.UsageError as e:
        raise MemcalcError(" ".join(e.format_message().split())) from None


def _words(param: click.Option, value: Any) -> list[str]:
    """The command-line words that give ``param`` the Python ``value``."""
    if value is None or isinstance(value, (ModelSpec, GpuProfile)):
        return []
    if param.is_flag and isinstance(value, bool):
        if value:
            return [param.opts[0]]
        return [param.secondary_opts[0]] if param.secondary_opts else []
    if isinstance(value, bool):  # a choice of true/false (--fsdp-reshard)
        return [param.opts[0], str(value).lower()]
    if param.multiple:
        items = [value] if isinstance(value, str) else list(value)
        return [w for item in items for w in (param.opts[0], _text(item))]
    if isinstance(value, (list, tuple)):  # comma-separated names (--lora-targets)
        return [param.opts[0], ",".join(map(_text, value))]
    return [param.opts[0], _text(value)]


def _text(value: Any) -> str:
    return str(value.value) if isinstance(value, Enum) else str(value)
