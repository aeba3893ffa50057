"""Engine speed: every figure beside its target, with the ratio (measured / target).

Run: python benchmarks/speed.py [--quick]

Whole-process times are medians of repeated runs of a fresh interpreter; in-process times are
medians of many calls after one warm-up. A ratio at or under 1.00 meets the target. The
machine is shared and noisy: this is a benchmark to read, not a test to pass.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

PLAN_ARGV = [
    "plan",
    "--model",
    "llama-3-70b",
    "--gpu",
    "h100-sxm-80gb",
    "--seq",
    "8192",
    "--global-batch",
    "512",
    "--max-gpus",
    "256",
]
PLAN_PROCESS = "process: memcalc plan llama-3-70b, <= 256 H100, global batch 512"

TARGETS_S = {
    "process: python -c pass": None,
    "process: memcalc estimate (gpt2, json)": 0.20,
    "in-process estimate: gpt2": 0.001,
    "in-process estimate: llama-2-7b": 0.001,
    "in-process estimate: llama-3-70b": 0.001,
    "in-process estimate: llama-3.1-405b": 0.001,
    "--recompute budget, 1,000-block chain": 0.5,
    PLAN_PROCESS: 2.5,
    "plan search: seconds": 2.0,
    "plan search: seconds per 10,000 configurations": 2.0,
}
"""Seconds each figure should stay under. The plan search (issue 11): at least 10,000
configurations in at most 2 s on a 2-core machine."""


def process_seconds(argv: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def call_seconds(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    n_proc, n_call = (3, 20) if args.quick else (15, 200)

    from memcalc.estimate import Options, estimate
    from memcalc.profiles import load_profile
    from memcalc.spec.model import ModelSpec
    from memcalc.spec.presets import preset
    from memcalc.spec.training import TrainingSetup
    from memcalc.strategies.recompute import Recompute

    gpu = load_profile("h100-sxm-80gb")
    setup = TrainingSetup(seq=4096)
    measured: dict[str, float] = {}
    memcalc = [sys.executable, "-m", "memcalc"]
    measured["process: python -c pass"] = process_seconds([sys.executable, "-c", "pass"], n_proc)
    measured["process: memcalc estimate (gpt2, json)"] = process_seconds(
        [*memcalc, "estimate", "--format", "json"], n_proc
    )
    for name in ("gpt2", "llama-2-7b", "llama-3-70b", "llama-3.1-405b"):
        spec = preset(name)
        measured[f"in-process estimate: {name}"] = call_seconds(
            lambda spec=spec: estimate(spec, setup, gpu, Options()), n_call
        )
    chain = ModelSpec(
        name="chain",
        family="gpt2",
        vocab_size=50257,
        hidden_size=768,
        num_layers=1000,
        num_heads=12,
        attention_dropout=0.1,
    )
    eager = TrainingSetup(seq=1024, attention="eager")
    budget = Options(recompute=Recompute.budget, budget_bytes=40 * 2**30)
    measured["--recompute budget, 1,000-block chain"] = call_seconds(
        lambda: estimate(chain, eager, gpu, budget), max(3, n_call // 20)
    )
    plan_argv = [*memcalc, *PLAN_ARGV]
    measured[PLAN_PROCESS] = process_seconds(plan_argv, max(3, n_proc // 3))
    plan_json = json.loads(
        subprocess.run([*plan_argv, "--format", "json"], check=True, capture_output=True).stdout
    )
    evaluated = plan_json["configurations_evaluated"]
    measured["plan search: seconds"] = plan_json["search_seconds"]
    measured["plan search: seconds per 10,000 configurations"] = (
        plan_json["search_seconds"] * 10_000 / evaluated
    )

    bare = measured["process: python -c pass"]
    width = max(map(len, TARGETS_S))
    print(f"{'what':{width}}  {'measured':>12}  {'target':>10}  {'ratio':>6}")
    for what, target in TARGETS_S.items():
        got = measured[what]
        shown = f"{got * 1e3:9.2f} ms" if got < 10 else f"{got:9.2f} s"
        tgt = (
            "-"
            if target is None
            else (f"{target * 1e3:.1f} ms" if target < 1 else f"{target:.1f} s")
        )
        ratio = "" if target is None else f"{got / target:6.2f}"
        print(f"{what:{width}}  {shown:>12}  {tgt:>10}  {ratio:>6}")
    print(
        f"(memcalc estimate is {measured['process: memcalc estimate (gpt2, json)'] / bare:.1f}x "
        f"python -c pass; the whole plan process is {measured[PLAN_PROCESS]:.2f} s beside "
        f"{measured['process: memcalc estimate (gpt2, json)']:.2f} s for one estimate. The plan "
        f"evaluated {evaluated:,} configurations: {plan_json['configurations_estimated']:,} "
        f"estimated in full, {plan_json['rejected_by_memory_bound']:,} ruled out by a memory "
        f"bound, {plan_json['skipped_by_time_bound']:,} by a time bound; target >= 10,000 in "
        "<= 2 s)"
    )


if __name__ == "__main__":
    main()
