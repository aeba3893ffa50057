"""The summary of a differential run: counts by status, the checks of each run case (states
byte-exact, activations within 1%, peak within 2%, trainable count equal to PEFT's), refusals
cross-tabulated (PEFT refused / memcalc refused), and the worst cases."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memcalc.measure.differential.runner import STATES, Outcome

ACTIVATION_TOLERANCE = 0.01
PEAK_TOLERANCE = 0.02


def error(est: int | None, meas: int | None) -> float | None:
    """(estimate - measured) / measured; None where either is missing or measured is 0 and
    the estimate is not."""
    if est is None or meas is None:
        return None
    if meas == 0:
        return 0.0 if est == 0 else None
    return (est - meas) / meas


@dataclass(frozen=True)
class Checks:
    """The checks of one run case (against ``measure``, or ``trace`` against ``measure``)."""

    states_exact: bool
    activations_ok: bool
    peak_ok: bool
    worst: float
    """max(|activation error| / 1%, |peak error| / 2%), + 100 if a state is not exact."""
    misses: tuple[str, ...]
    """The fields that miss."""


def checks(estimate: dict[str, int], measured: dict[str, int]) -> Checks:
    misses = [f for f in STATES if estimate.get(f) != measured.get(f)]
    act = error(estimate.get("stored activations"), measured.get("stored activations"))
    peak = error(estimate.get("peak"), measured.get("peak"))
    act_ok = act is not None and abs(act) <= ACTIVATION_TOLERANCE
    peak_ok = peak is not None and abs(peak) <= PEAK_TOLERANCE
    if not act_ok:
        misses.append("stored activations")
    if not peak_ok:
        misses.append("peak")
    worst = max(abs(act or 0) / ACTIVATION_TOLERANCE, abs(peak or 0) / PEAK_TOLERANCE)
    if any(f in misses for f in STATES):
        worst += 100
    return Checks(not any(f in misses for f in STATES), act_ok, peak_ok, worst, tuple(misses))


def passes(outcome: Outcome) -> bool:
    """A run case whose three checks hold (and, for LoRA, whose trainable count is PEFT's)."""
    if outcome.status != "run":
        return False
    c = checks(outcome.estimate, outcome.measured)
    return c.states_exact and c.activations_ok and c.peak_ok and trainable_agrees(outcome)


def trainable_agrees(outcome: Outcome) -> bool:
    if outcome.case.lora is None:
        return True
    return outcome.peft.get("trainable") == outcome.memcalc_trainable


def summarise(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The numbers the table prints, per kind (lora, full)."""
    out: dict[str, Any] = {}
    for kind in ("lora", "full"):
        mine = [o for o in outcomes if o.case.kind == kind]
        ran = [o for o in mine if o.status == "run"]
        cs = [checks(o.estimate, o.measured) for o in ran]
        row: dict[str, Any] = {
            "drawn": len(mine),
            "status": dict(Counter(o.status for o in mine)),
            "run": len(ran),
            "states exact": sum(c.states_exact for c in cs),
            "activations within 1%": sum(c.activations_ok for c in cs),
            "peak within 2%": sum(c.peak_ok for c in cs),
            "all three": sum(c.states_exact and c.activations_ok and c.peak_ok for c in cs),
            "misses by field": dict(Counter(f for c in cs for f in c.misses)),
        }
        if kind == "lora":
            row |= _refusals(mine)
        traced = [o for o in ran if o.trace]
        if traced:
            tc = [checks(o.trace, o.measured) for o in traced]
            row["trace"] = {
                "traced": len(traced),
                "states exact": sum(c.states_exact for c in tc),
                "activations within 1%": sum(c.activations_ok for c in tc),
                "peak within 2%": sum(c.peak_ok for c in tc),
                "misses by field": dict(Counter(f for c in tc for f in c.misses)),
            }
        out[kind] = row
    return out


def _refusals(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """PEFT's answer (``peft_probe``) beside memcalc's, over the LoRA cases."""
    asked = [o for o in outcomes if o.peft]
    peft_no = [o for o in asked if o.peft.get("refused")]
    memcalc_no = {"memcalc-refused"}
    both = [o for o in peft_no if o.status in memcalc_no | {"peft-refused"}]
    only_memcalc = [o for o in asked if not o.peft.get("refused") and o.status in memcalc_no]
    counted = [o for o in asked if not o.peft.get("refused") and o.memcalc_trainable is not None]
    return {
        "PEFT refused": len(peft_no),
        "PEFT refused, memcalc refused too": len(both),
        "PEFT refused, memcalc did not": len(peft_no) - len(both),
        "memcalc refused, PEFT did not": len(only_memcalc),
        "trainable count equal to PEFT's": sum(trainable_agrees(o) for o in counted),
        "trainable counts compared": len(counted),
        "PEFT refusal reasons": dict(Counter(o.peft["refused"] for o in peft_no)),
        "memcalc refusal reasons": dict(Counter(o.reason for o in only_memcalc)),
    }


def worst(outcomes: Sequence[Outcome], n: int = 10) -> list[Outcome]:
    """The ``n`` run cases furthest off (a state that is not exact first)."""
    ran = [o for o in outcomes if o.status == "run"]
    ranked = sorted(ran, key=lambda o: -checks(o.estimate, o.measured).worst)
    return [o for o in ranked[:n] if not passes(o)]


def suspects(outcomes: Sequence[Outcome], field: str) -> list[tuple[str, Any, int, int]]:
    """(flag, value, cases missing ``field``, cases run) for every flag value, the values whose
    cases miss ``field`` most often first: where to look for a cause."""
    from memcalc.measure.differential.sampler import flag_values

    table: dict[tuple[str, Any], list[int]] = {}
    for o in outcomes:
        if o.status != "run":
            continue
        miss = field in checks(o.estimate, o.measured).misses
        for flag, values in flag_values([o.case]).items():
            for value in values:
                counts = table.setdefault((flag, value), [0, 0])
                counts[0] += miss
                counts[1] += 1
    rows = [(flag, value, m, n) for (flag, value), (m, n) in table.items()]
    return sorted(rows, key=lambda r: (-r[2] / r[3], -r[3]))
