"""memcalc's step-time model against published, measured training throughput.

Run: python benchmarks/throughput.py [--markdown] [--json FILE] [ID_PREFIX ...]

Every point of ``benchmarks/data/throughput.json`` (a paper's or framework's table, with the
layout it states) runs as ``memcalc.estimate`` with that layout, timed under the runtime the
source ran (``memcalc.strategies.runtime``); tokens/s/GPU predicted = tokens per step / step
time / GPUs. Printed: each point's reported and predicted throughput and the error, the
step's parts, whether memcalc thinks the layout fits; per comparison group (one source
measuring several layouts of one model on one machine) whether memcalc orders the layouts as
measured; the median and worst error. No figure of the table feeds the model: the points
check its rules.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import memcalc
from memcalc.estimate import Breakdown, estimate
from memcalc.spec.model import ModelSpec
from memcalc.steptime import RUNTIMES
from memcalc.validate import parse

DATA = Path(__file__).parent / "data" / "throughput.json"
MEDIAN_TARGET = 0.15
"""Issue 23: median |error| of predicted tokens/s/GPU within 15% ..."""
WORST_TARGET = 0.35
"""... and none beyond 35% (or its cause explained: ``EXCEPTIONS``)."""
TIE = 0.01
"""Two throughputs within 1% of each other are a tie (measured: not an order to reproduce;
predicted: an order not reproduced when the measurements differ)."""


@dataclass(frozen=True)
class Result:
    point: dict[str, Any]
    breakdown: Breakdown | None
    predicted: float
    error: str = ""

    @property
    def reported(self) -> float:
        return float(self.point["tokens_per_s_per_gpu"])

    @property
    def ratio(self) -> float:
        return self.predicted / self.reported if self.reported else float("nan")


def spec_of(name: str, models: dict[str, Any]) -> str | ModelSpec:
    if name not in models:
        return name
    fields = {k: v for k, v in models[name].items() if k != "source"}
    return parse(ModelSpec, {"name": name, **fields}, "benchmarks/data/throughput.json")


def run_point(point: dict[str, Any], models: dict[str, Any]) -> Result:
    """The point's layout through ``memcalc.estimate``, then timed under its runtime."""
    args = dict(point["estimate"])
    model = spec_of(point["model"], models)
    try:
        b = memcalc.estimate(model, gpu=point["gpu"], **args)
        runtime = RUNTIMES[point["runtime"]]
        spec = model if isinstance(model, ModelSpec) else memcalc.spec.loaders.load_model(model)
        b = estimate(spec, b.setup, b.gpu, dataclasses.replace(b.options, runtime=runtime))
    except memcalc.MemcalcError as e:
        return Result(point, None, float("nan"), str(e))
    assert b.time is not None
    s, par = b.setup, b.setup.parallel
    tokens = par.dp * par.microbatches * s.batch * s.seq
    return Result(point, b, tokens / b.time.total_seconds / par.world_size)


def group_orders(results: list[Result]) -> list[dict[str, Any]]:
    """Per comparison group: every pair of its points whose measurements differ by more than
    TIE, and whether memcalc puts them in the same order (a predicted tie is not)."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        if r.point["group"] and r.breakdown is not None and r.point["scored"]:
            groups.setdefault(r.point["group"], []).append(r)
    out = []
    for name, members in sorted(groups.items()):
        same = reversed_ = ties = 0
        for a, b in combinations(members, 2):
            measured = a.reported / b.reported
            if abs(measured - 1) <= TIE:
                continue
            predicted = a.predicted / b.predicted
            if abs(predicted - 1) <= TIE:
                ties += 1
            elif (measured > 1) == (predicted > 1):
                same += 1
            else:
                reversed_ += 1
        if same + reversed_ + ties:
            out.append(
                {
                    "group": name,
                    "points": [m.point["id"] for m in members],
                    "same": same,
                    "reversed": reversed_,
                    "ties": ties,
                    "reproduced": reversed_ == 0 and ties == 0,
                }
            )
    return out


def parts(b: Breakdown) -> str:
    t = b.time
    assert t is not None
    named = (
        ("mm", t.matmul_seconds),
        ("attn", t.attention_seconds),
        ("mem", t.memory_bound_seconds),
        ("recomp", t.recompute_seconds),
        ("bubble", t.bubble_seconds),
        ("comm", t.communication_seconds),
        ("offload", t.offload_seconds),
        ("opt", t.optimizer_seconds + t.cpu_optimizer_seconds),
    )
    return " + ".join(f"{k} {v:.3g}" for k, v in named if v > 0) + f" = {t.total_seconds:.3g} s"


def _note(r: Result) -> str:
    """Why a point is not scored, or the stated causes of a large error."""
    if not r.point["scored"]:
        return "not scored: " + _short(r.point["caveats"][0])
    if abs(r.ratio - 1) > WORST_TARGET and r.point["caveats"]:
        return "; ".join(_short(c) for c in r.point["caveats"])
    return ""


def _short(cause: str) -> str:
    """A cause's first clause."""
    return cause.split(":")[0] if len(cause) > 60 else cause


def table(results: list[Result], markdown: bool) -> list[str]:
    head = ["id", "runtime", "reported", "predicted", "error", "fits", "step (s)", "note"]
    rows = []
    for r in results:
        b = r.breakdown
        if b is None:
            rows.append(
                [
                    r.point["id"],
                    r.point["runtime"],
                    f"{r.reported:,.0f}",
                    "-",
                    "-",
                    "-",
                    r.error,
                    "",
                ]
            )
            continue
        fits = "yes" if b.fits else f"no ({b.peak_bytes / 2**30:.0f} GiB)"
        rows.append(
            [
                r.point["id"],
                r.point["runtime"],
                f"{r.reported:,.0f}",
                f"{r.predicted:,.0f}",
                f"{r.ratio - 1:+.1%}",
                fits,
                parts(b),
                _note(r),
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return lines + ["| " + " | ".join(row) + " |" for row in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=False)]
    fmt = "  ".join(f"{{:{'<' if i in (0, 1, 5, 6, 7) else '>'}{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*head).rstrip()] + [fmt.format(*row).rstrip() for row in rows]


def summary(results: list[Result], orders: list[dict[str, Any]]) -> dict[str, Any]:
    """Statistics over the scored points (a point is not scored when memcalc cannot state its
    setup; its ``caveats`` say why)."""
    scored = [r for r in results if r.breakdown is not None and r.point["scored"]]
    errors = [abs(r.ratio - 1) for r in scored]
    worst = max(scored, key=lambda r: abs(r.ratio - 1))
    beyond = [r for r in scored if abs(r.ratio - 1) > WORST_TARGET]
    plain = [abs(r.ratio - 1) for r in scored if not r.point["caveats"]]
    return {
        "points": len(results),
        "scored": len(scored),
        "median_abs_error": statistics.median(errors),
        "median_ratio": statistics.median(r.ratio for r in scored),
        "worst": {"id": worst.point["id"], "error": worst.ratio - 1},
        "within_15": sum(e <= MEDIAN_TARGET for e in errors),
        "without_caveats": len(plain),
        "median_abs_error_without_caveats": statistics.median(plain) if plain else float("nan"),
        "beyond_35": [r.point["id"] for r in beyond],
        "beyond_35_unexplained": [r.point["id"] for r in beyond if not r.point["caveats"]],
        "groups": len(orders),
        "groups_reproduced": sum(o["reproduced"] for o in orders),
    }


def report(results: list[Result], orders: list[dict[str, Any]], seconds: float) -> list[str]:
    total = summary(results, orders)
    lines = []
    for o in orders:
        verdict = "reproduced" if o["reproduced"] else "NOT reproduced"
        lines.append(
            f"group {o['group']}: {o['same']} pairs in the measured order, {o['reversed']} "
            f"reversed, {o['ties']} predicted ties -- {verdict}"
        )
    lines += [
        "",
        f"{total['scored']} of {total['points']} points scored; median predicted / reported "
        f"{total['median_ratio']:.2f}, median |error| "
        f"{total['median_abs_error']:.1%} (target {MEDIAN_TARGET:.0%}); worst "
        f"{total['worst']['id']} {total['worst']['error']:+.1%}; {total['within_15']} within "
        f"{MEDIAN_TARGET:.0%}; the {total['without_caveats']} with no stated cause: median "
        f"{total['median_abs_error_without_caveats']:.1%}; beyond {WORST_TARGET:.0%}: "
        f"{len(total['beyond_35'])} "
        f"({len(total['beyond_35_unexplained'])} without a stated cause: "
        f"{', '.join(total['beyond_35_unexplained']) or 'none'}); groups reproduced "
        f"{total['groups_reproduced']} of {total['groups']} ({seconds:.1f} s)",
    ]
    causes = sorted({c for r in results for c in r.point["caveats"]})
    if causes:
        lines += ["", "causes named above:", *(f"- {c}" for c in causes)]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ids", nargs="*", help="only points whose id starts with one of these")
    ap.add_argument("--markdown", action="store_true", help="tables as GitHub markdown")
    ap.add_argument("--json", type=Path, help="also write every result to this file")
    opts = ap.parse_args(argv)
    data = json.loads(DATA.read_text())
    points = [
        p for p in data["points"] if not opts.ids or any(p["id"].startswith(i) for i in opts.ids)
    ]
    start = time.perf_counter()
    results = [run_point(p, data["models"]) for p in points]
    orders = group_orders(results)
    print("\n".join(table(results, opts.markdown)))
    print()
    print("\n".join(report(results, orders, time.perf_counter() - start)))
    if opts.json:
        records = [
            {
                "id": r.point["id"],
                "reported": r.reported,
                "predicted": r.predicted,
                "error": r.ratio - 1 if r.breakdown else None,
                "fits": r.breakdown.fits if r.breakdown else None,
                "time": r.breakdown.time.as_dict() if r.breakdown and r.breakdown.time else None,
                "failure": r.error or None,
            }
            for r in results
        ]
        total = summary(results, orders)
        opts.json.write_text(
            json.dumps({"summary": total, "groups": orders, "points": records}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
