"""What a team fixes before ``plan`` searches: parallel degrees, ZeRO stages, recompute and
offload choices (one value or a set), a longest step and a least throughput -- and which
configurations are too slow to offer at all.

Command-line syntax (``parse_constraints``): ``--tp 8`` or ``--tp 4,8``; ``--zero 1,3``;
``--recompute none,selective``; ``--offload none,optimizer=cpu+activations=cpu`` (each item
one combination, ``+`` joining what it offloads), ``--no-offload``; ``--max-step-time 30`` (or
``30s``, ``2min``); ``--min-tokens-per-s 2M`` for the whole job or ``3000/gpu`` per GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memcalc.errors import MemcalcError, one_of
from memcalc.spec.parallel import Parallelism
from memcalc.strategies.offload import Offload
from memcalc.strategies.placement import effective_offloads
from memcalc.strategies.recompute import Recompute

IMPRACTICAL_FACTOR = 10.0
"""A configuration is impractical when its tokens/s per GPU are under 1/10 of the best the
search found for its GPU kind: at its GPU count it takes over 10x the step time the best
configuration's rate would (issue 23: offered as the headline, a 1-GPU Llama-3-70B step of an
hour and a half was absurd)."""

_DURATIONS = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "min": 60.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Constraints:
    """What the search may choose (None: anything) and what a configuration must reach."""

    tp: frozenset[int] | None = None
    pp: frozenset[int] | None = None
    cp: frozenset[int] | None = None
    ep: frozenset[int] | None = None
    zero: frozenset[int] | None = None
    recompute: frozenset[Recompute] | None = None
    offload: frozenset[frozenset[Offload]] | None = None
    """Allowed offload combinations (as they run: params=cpu brings optimizer=cpu)."""
    max_step_seconds: float | None = None
    min_tokens_per_s: float | None = None
    """The whole job's tokens per second."""
    min_tokens_per_s_per_gpu: float | None = None
    show_impractical: bool = False
    """Offer configurations slower than IMPRACTICAL_FACTOR x the best rate too."""

    def layout_allowed(self, par: Parallelism) -> bool:
        return all(
            allowed is None or getattr(par, name) in allowed
            for name, allowed in (
                ("tp", self.tp),
                ("pp", self.pp),
                ("cp", self.cp),
                ("ep", self.ep),
            )
        )

    def zeros(self, dp: int) -> tuple[int, ...]:
        """The ZeRO stages to try with ``dp`` data-parallel ranks (one rank: stage 0 only, the
        others shard nothing -- allowed whatever ``--zero`` says)."""
        if dp == 1:
            return (0,)
        return tuple(z for z in (0, 1, 2, 3) if self.zero is None or z in self.zero)

    def recompute_allowed(self, r: Recompute) -> bool:
        return self.recompute is None or r in self.recompute

    def offload_allowed(self, choice: tuple[Offload, ...]) -> bool:
        return self.offload is None or frozenset(effective_offloads(choice)) in self.offload

    def fast_enough(self, step_seconds: float, tokens_per_step: int, gpus: int) -> bool:
        """The step time and throughput limits (a lower bound on the step time gives an upper
        bound on the throughput: what fails here cannot pass in full)."""
        if self.max_step_seconds is not None and step_seconds > self.max_step_seconds:
            return False
        rate = tokens_per_step / step_seconds if step_seconds > 0 else math.inf
        if self.min_tokens_per_s is not None and rate < self.min_tokens_per_s:
            return False
        per_gpu = self.min_tokens_per_s_per_gpu
        return per_gpu is None or rate / gpus >= per_gpu

    def describe(self) -> list[str]:
        """The constraints in words (for the plan's header)."""
        out = []
        for name in ("tp", "pp", "cp", "ep", "zero"):
            allowed = getattr(self, name)
            if allowed is not None:
                out.append(f"{name} in {{{', '.join(map(str, sorted(allowed)))}}}")
        if self.recompute is not None:
            out.append("recompute " + ", ".join(sorted(r.value for r in self.recompute)))
        if self.offload is not None:
            out.append("offload " + ", ".join(sorted(map(_combo_label, self.offload))))
        if self.max_step_seconds is not None:
            out.append(f"step at most {self.max_step_seconds:g} s")
        if self.min_tokens_per_s is not None:
            out.append(f"at least {self.min_tokens_per_s:,.0f} tokens/s")
        if self.min_tokens_per_s_per_gpu is not None:
            out.append(f"at least {self.min_tokens_per_s_per_gpu:,.0f} tokens/s per GPU")
        return out


NO_CONSTRAINTS = Constraints()


def _combo_label(combo: frozenset[Offload]) -> str:
    return "+".join(sorted(o.label for o in combo)) or "none"


def parse_set(
    flag: str, text: str | None, *, low: int = 1, high: int = 1 << 20
) -> frozenset[int] | None:
    """``"4,8"`` -> {4, 8}; None when not given.

    >>> sorted(parse_set("--tp", "4, 8"))
    [4, 8]
    """
    if text is None:
        return None
    values = set()
    for item in str(text).split(","):
        item = item.strip()
        if not item.isdigit() or not low <= int(item) <= high:
            raise MemcalcError(
                f"{flag}: expected whole numbers from {low} to {high:,}, comma-separated (e.g. "
                f"{flag} 4,8), got {text!r}"
            )
        values.add(int(item))
    return frozenset(values)


def parse_recompute(text: str | None) -> frozenset[Recompute] | None:
    """``"none,full"`` -> {none, full}.

    >>> sorted(r.value for r in parse_recompute("full, none"))
    ['full', 'none']
    """
    if text is None:
        return None
    names = {r.value: r for r in Recompute}
    out = set()
    for item in str(text).split(","):
        name = item.strip().lower()
        if name not in names:
            raise one_of("--recompute", item.strip(), list(names))
        out.add(names[name])
    return frozenset(out)


def parse_offload(
    texts: tuple[str, ...] | list[str] | None,
    no_offload: bool,
    searched: tuple[tuple[Offload, ...], ...],
) -> frozenset[frozenset[Offload]] | None:
    """Allowed offload combinations from ``--offload`` values (each comma-separated, a
    combination ``+``-joined, ``none`` for no offload) and ``--no-offload``; each must be one
    of the ``searched`` combinations.

    >>> from memcalc.plan.strategies import OFFLOADS
    >>> allowed = parse_offload(["none,optimizer=cpu+activations=cpu"], False, OFFLOADS)
    >>> sorted(map(_combo_label, allowed))
    ['activations=cpu+optimizer=cpu', 'none']
    >>> sorted(map(_combo_label, parse_offload(["params=cpu"], False, OFFLOADS)))
    ['optimizer=cpu+params=cpu']
    """
    texts = list(texts or [])
    if no_offload and texts:
        raise MemcalcError("--no-offload: give --no-offload or --offload, not both")
    if no_offload:
        return frozenset({frozenset()})
    if not texts:
        return None
    known = {frozenset(effective_offloads(c)): c for c in searched}
    out = set()
    for text in texts:
        for item in text.split(","):
            item = item.strip()
            parts = [] if item.lower() == "none" else [p for p in item.split("+") if p.strip()]
            combo = frozenset(effective_offloads(tuple(Offload.parse(p.strip()) for p in parts)))
            if combo not in known:
                raise one_of("--offload", item, sorted(_combo_label(k) for k in known))
            out.add(combo)
    return frozenset(out)


def parse_seconds(flag: str, text: str | None) -> float | None:
    """``"90"``, ``"90s"``, ``"1.5min"``, ``"2h"`` -> seconds.

    >>> parse_seconds("--max-step-time", "1.5min")
    90.0
    """
    if text is None:
        return None
    cleaned = str(text).strip().lower().replace(" ", "")
    number = cleaned.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = cleaned[len(number) :]
    try:
        value = float(number) * _DURATIONS[unit]
    except (ValueError, KeyError):
        raise MemcalcError(
            f"{flag}: cannot read {text!r} as a duration; use seconds (30, 30s) or ms, min, h"
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise MemcalcError(f"{flag}: must be more than 0 seconds, got {text!r}")
    return value


def parse_throughput(text: str | None) -> tuple[float | None, float | None]:
    """``"2M"`` -> (2e6 tokens/s in all, None); ``"3000/gpu"`` -> (None, 3000 per GPU).

    >>> parse_throughput("2M"), parse_throughput("3k/gpu")
    ((2000000.0, None), (None, 3000.0))
    """
    if text is None:
        return None, None
    from memcalc.units import parse_count

    raw = str(text).strip()
    per_gpu = raw.lower().endswith("/gpu")
    value = float(parse_count(raw[:-4] if per_gpu else raw, "--min-tokens-per-s"))
    return (None, value) if per_gpu else (value, None)


def parse_constraints(
    *,
    tp: str | None = None,
    pp: str | None = None,
    cp: str | None = None,
    ep: str | None = None,
    zero: str | None = None,
    recompute: str | None = None,
    offload: tuple[str, ...] | list[str] | None = None,
    no_offload: bool = False,
    max_step_time: str | None = None,
    min_tokens_per_s: str | None = None,
    impractical: bool = False,
) -> Constraints:
    """The Constraints the command line's strings give (the flags' names without ``--``)."""
    from memcalc.plan.strategies import OFFLOADS

    total, per_gpu = parse_throughput(min_tokens_per_s)
    return Constraints(
        tp=parse_set("--tp", tp),
        pp=parse_set("--pp", pp),
        cp=parse_set("--cp", cp),
        ep=parse_set("--ep", ep),
        zero=parse_set("--zero", zero, low=0, high=3),
        recompute=parse_recompute(recompute),
        offload=parse_offload(offload, no_offload, OFFLOADS),
        max_step_seconds=parse_seconds("--max-step-time", max_step_time),
        min_tokens_per_s=total,
        min_tokens_per_s_per_gpu=per_gpu,
        show_impractical=impractical,
    )
