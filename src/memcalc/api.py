"""memcalc from Python: ``memcalc.estimate(...)`` and ``memcalc.plan(...)`` (docs/api.md).

They take what ``memcalc estimate`` and ``memcalc plan`` take -- the options' names with
``_`` for ``-`` (``grad_dtype``, ``max_gpus``), the same strings (``recompute="full"``,
``offload=["optimizer=cpu"]``, ``unit``-free sizes such as ``budget="20GiB"``), the same
defaults -- and return what the command prints, as objects: an ``Estimate`` (a Breakdown) and
a ``Plan`` (a PlanResult), each with ``to_dict()``, the command's JSON output.

The keywords are parsed by the same library the command line calls (``memcalc.inputs``: each
flag's parser, then ``read_inputs`` and ``plan.inputs.plan_request``), so a value the command
refuses raises the same one-line MemcalcError here.

>>> b = estimate("gpt2", gpu="h100", seq=1024, recompute="full")
>>> b.strategy, b.fits, b.to_dict()["strategies"][0]["recompute"]
('full', True, 'full')
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable
from typing import Any

from memcalc.estimate import Breakdown, Options
from memcalc.estimate import estimate as core_estimate
from memcalc.inputs import catalog, estimate_inputs, keyword_values
from memcalc.plan import Maximized, PlanResult
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec


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
    ``dp=8`` (or ``gpus=8``), ``zero=3``, ``tp``, ``pp``, ``microbatches``, ``framework``,
    ``every=4`` (``recompute="every-k"``), ``budget="20GiB"`` (``recompute="budget"``),
    ``mfu=0.4``, ``lora_rank=16``, ``quantize="nf4"``, ... (``memcalc estimate -h``).

    >>> b = estimate("llama-2-7b", gpu="a100", seq=4096, recompute="full",
    ...              offload=["optimizer=cpu"])
    >>> b.strategy, b.optimizer_bytes, b.fits
    ('full + offload optimizer=cpu', 0, True)
    """
    if "gpus" in options:  # --gpus is --dp's other name
        options["dp_gpus"] = options.pop("gpus")
    spec = model if isinstance(model, ModelSpec) else None
    given = {"model": None if spec else model, "gpu": _name(gpu), "seq": seq, "batch": batch}
    given |= {"recompute": recompute, "offload": offload or None}
    values, names = keyword_values(catalog.ESTIMATE, "estimate", {**given, **options})
    named = names | ({"gpu"} if gpu is not None else set())
    profile = gpu if isinstance(gpu, GpuProfile) else None
    inputs, chosen_or_none, values = estimate_inputs(values, named, profile, spec)
    _say(inputs.said)
    chosen = chosen_or_none or Options()
    return Estimate.of(
        core_estimate(
            inputs.spec,
            inputs.setup,
            inputs.profiles[0],
            dataclasses.replace(
                chosen, mfu=values["mfu"], headroom=inputs.headroom, alloc_conf=inputs.alloc_conf
            ),
        )
    )


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
    from memcalc.plan.inputs import plan_request, run_plan

    kinds: list[str | GpuProfile] = (
        [] if gpu is None else [gpu] if isinstance(gpu, (str, GpuProfile)) else list(gpu)
    )
    spec = model if isinstance(model, ModelSpec) else None
    given: dict[str, Any] = {"model": None if spec else model, "seq": seq, "max_gpus": max_gpus}
    given |= {"global_batch": global_batch, "maximize": maximize}
    given["gpus"] = [g for g in kinds if isinstance(g, str)] or None
    values, names = keyword_values(catalog.PLAN, "plan", {**given, **options})
    request, what, said = plan_request(values, names, spec, tuple(kinds))
    _say(said)
    result, found = run_plan(request, what)
    return Plan(result.request, result.kinds, result.search_seconds, tuple(found))


def _name(gpu: str | GpuProfile | None) -> str | None:
    """A GPU given by name (a GpuProfile is used as it is, not parsed)."""
    return None if gpu is None or isinstance(gpu, GpuProfile) else gpu


def _say(lines: tuple[str, ...]) -> None:
    """The notes and warnings the command would print, on stderr."""
    for line in lines:
        print(line, file=sys.stderr)
