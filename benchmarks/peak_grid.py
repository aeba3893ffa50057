"""Step peak (and stored activations) of the estimate against real CPU training steps, over a
grid of tiny configs: estimated vs measured peak per case, and per family the worst and median.

    PYTHONPATH=src python benchmarks/peak_grid.py --measure   # measure the missing cases
    PYTHONPATH=src python benchmarks/peak_grid.py --cases     # every case: est, measured, ratio

``--measure`` runs ``memcalc.measure`` (``--framework hf``, CPU, exact live bytes) for every case
and
saves the measurements to ``--cache`` (JSON); without it the saved measurements are compared
with the current estimate, which takes seconds -- a measurement does not depend on memcalc's
model, only on torch and transformers.

The default grid (48 cases, about 20 s on 2 cores): gpt2 (4 layers, h=128), the tiny Llama
(tests/data/tiny-llama.toml) and the tiny Mixtral (tests/data/hf/tiny) at b=2, fp32,
s in {128, 256}, eager and SDPA, recompute none / selective / full / every-2. ``--family`` and
``--precision`` widen it (any tiny config in tests/data/hf/tiny; fp32, bf16, amp-bf16).
SDPA runs with dropout 0 (CPU SDPA with dropout is a math kernel a GPU does not run); eager
keeps the config's dropout, and the estimate is lowered for CPU kernels (``estimate_for``
with ``device="cpu"``: CPU dropout masks and LayerNorm statistics as the CPU saves them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _requires import require  # noqa: E402

require("torch", "transformers")

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / "peak_grid.json"
FAMILIES = ("gpt2", "llama", "mixtral")
"""The default grid's families; ``--family`` picks others (tests/data/hf/tiny)."""
PRECISIONS = ("fp32",)
ATTENTIONS = ("eager", "sdpa")
RECOMPUTES = ("none", "selective", "full", "every-k")
SEQS = (128, 256)
BATCH = 2
EVERY = 2

Case = tuple[str, str, str, str, int, int]
"""(family, precision, attention, recompute, batch, seq)."""


def grid(families: tuple[str, ...], precisions: tuple[str, ...]) -> list[Case]:
    """Every family x precision x kernel x recompute x seq, at ``BATCH``."""
    return [
        (fam, precision, attention, rc, BATCH, s)
        for fam in families
        for precision in precisions
        for attention in ATTENTIONS
        for rc in RECOMPUTES
        for s in SEQS
    ]


def key(case: Case) -> str:
    fam, precision, attention, rc, b, s = case
    return f"{fam} {precision} {attention} {rc} b{b} s{s}"


def spec_of(family: str) -> Any:
    """The tiny config of ``family`` (room for any --seq in OPT-style position tables)."""
    from memcalc.spec.loaders import load_model

    if family == "gpt2":
        return load_model(str(ROOT / "tests" / "data" / "gpt2-mini.toml"))
    if family == "llama":
        return load_model(str(ROOT / "tests" / "data" / "tiny-llama.toml"))
    spec = load_model(str(ROOT / "tests" / "data" / "hf" / "tiny" / f"{family}.json"))
    return spec.replace(max_position_embeddings=4096)


def setup_of(case: Case) -> Any:
    from memcalc.spec.training import TrainingSetup

    _, precision, attention, _, b, s = case
    return TrainingSetup(
        batch=b,
        seq=s,
        precision=precision,
        attention=attention,
        dropout=0.0 if attention == "sdpa" else None,
    )


def options_of(case: Case) -> Any:
    from memcalc.estimate import Options
    from memcalc.strategies.recompute import Recompute

    return Options(recompute=Recompute(case[3]), every=EVERY)


def measure_case(case: Case) -> dict[str, Any]:
    """One real CPU step of ``case`` (in a worker process)."""
    import torch

    from memcalc.measure.build import Impl
    from memcalc.measure.runner import measure
    from memcalc.strategies.recompute import Recompute

    torch.set_num_threads(1)
    start = time.perf_counter()
    m = measure(
        spec_of(case[0]),
        setup_of(case),
        impl=Impl.hf,
        recompute=Recompute(case[3]),
        every=EVERY,
        device="cpu",
    )
    return {
        "case": list(case),
        "peak_bytes": m.peak_bytes,
        "peak_phase": m.peak_phase,
        "activation_bytes": m.activation_bytes,
        "parameter_bytes": m.parameter_bytes,
        "gradient_bytes": m.gradient_bytes,
        "optimizer_bytes": m.optimizer_bytes,
        "seconds": round(time.perf_counter() - start, 2),
    }


def run_grid(cases: list[Case], path: Path, workers: int) -> None:
    done: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    todo = [c for c in cases if key(c) not in done]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, row in enumerate(pool.map(measure_case, todo), 1):
            done[key(tuple(row["case"]))] = row  # type: ignore[arg-type]
            if i % 10 == 0 or i == len(todo):
                path.write_text(json.dumps(done, indent=0, sort_keys=True))
                print(f"{i}/{len(todo)} measured, {time.perf_counter() - start:.0f} s", flush=True)
    path.write_text(json.dumps(done, indent=0, sort_keys=True))


def errors(row: dict[str, Any]) -> dict[str, Any]:
    """The current estimate of a measured case: relative errors of its peak and activations."""
    from memcalc.measure.compare import estimate_for
    from memcalc.profiles import load_profile

    case: Case = tuple(row["case"])  # type: ignore[assignment]
    gpu = load_profile("h100-sxm-80gb")
    b = estimate_for(spec_of(case[0]), setup_of(case), gpu, options_of(case), "cpu")
    exact = all(
        getattr(b, f) == row[f] for f in ("parameter_bytes", "gradient_bytes", "optimizer_bytes")
    )
    return {
        "case": case,
        "estimated_peak_bytes": b.peak.total_bytes,
        "measured_peak_bytes": row["peak_bytes"],
        "peak": (b.peak.total_bytes - row["peak_bytes"]) / row["peak_bytes"],
        "acts": (b.activation_bytes - row["activation_bytes"]) / row["activation_bytes"],
        "where": b.peak.where,
        "measured_phase": row["peak_phase"],
        "exact_states": exact,
    }


def summary(results: list[dict[str, Any]]) -> str:
    """Per family: cases, worst and median |peak error|, worst |activation error|."""
    lines = [
        "| family | cases | worst peak error | median peak error | within 1% | worst activations |",
        "|---|---|---|---|---|---|",
    ]
    families = list(dict.fromkeys(r["case"][0] for r in results))
    for fam in (*families, "all"):
        rows = [r for r in results if fam in ("all", r["case"][0])]
        if not rows:
            continue
        worst = max(rows, key=lambda r: abs(r["peak"]))
        acts = max(rows, key=lambda r: abs(r["acts"]))
        median = statistics.median(abs(r["peak"]) for r in rows)
        within = sum(abs(r["peak"]) <= 0.01 for r in rows)
        lines.append(
            f"| {fam} | {len(rows)} | {worst['peak']:+.2%} ({key(worst['case'])}) | "
            f"{median:.2%} | {within} | {acts['acts']:+.2%} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="run the missing measurements")
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--family", action="append", help="these families (repeatable)")
    ap.add_argument("--precision", action="append", help="these precisions (repeatable)")
    ap.add_argument("--cases", action="store_true", help="list every case")
    ap.add_argument("--json", type=Path, help="write the per-case errors here")
    args = ap.parse_args()
    cases = grid(tuple(args.family or FAMILIES), tuple(args.precision or PRECISIONS))
    if args.measure:
        run_grid(cases, args.cache, args.workers)
    if not args.cache.exists():
        sys.exit(f"{args.cache}: no measurements; run with --measure first")
    done = json.loads(args.cache.read_text())
    results = [errors(done[key(c)]) for c in cases if key(c) in done]
    if args.cases:
        print(
            "| case | estimated peak (bytes) | measured peak (bytes) | ratio | estimate's peak at |"
        )
        print("|---|---|---|---|---|")
        for r in results:
            print(
                f"| {key(r['case'])} | {r['estimated_peak_bytes']:,} | "
                f"{r['measured_peak_bytes']:,} | {1 + r['peak']:.4f} | {r['where']} |"
                + ("" if r["exact_states"] else " states differ")
            )
        print()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(summary(results))


if __name__ == "__main__":
    main()
