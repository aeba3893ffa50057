"""Caching-allocator replay speed: each figure beside its target, with the ratio (measured /
target; at or under 1.00 meets it).

Run: PYTHONPATH=src python benchmarks/allocator_speed.py

Medians of repeated in-process calls after one warm-up. The machine is shared and noisy: a
benchmark to read, not a test to pass.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from memcalc.allocator import parse_alloc_conf, replay, step_trace
from memcalc.estimate import Options, estimate
from memcalc.graph.lower import lower_cached
from memcalc.profiles import load_profile
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup

TARGET_US_PER_EVENT = 10.0
"""A 7B model's warm-up + measured step (about 8,000 events) replays within 80 ms, so that
``plan`` can replay the few configurations it estimates in full."""


def median_seconds(fn: Callable[[], object], repeat: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    gpu = load_profile("h100-sxm-80gb")
    cases = [
        ("llama-2-7b", TrainingSetup(precision="bf16-mixed", batch=1, seq=4096), "full"),
        ("llama-2-7b", TrainingSetup(precision="bf16-mixed", batch=1, seq=1024), "none"),
        ("gpt2", TrainingSetup(precision="fp32", batch=8, seq=1024), "selective"),
    ]
    print(
        f"{'case':44s} {'conf':26s} {'events':>7s} {'trace ms':>9s} {'replay ms':>10s} "
        f"{'us/event':>9s} {'target':>7s} {'ratio':>6s}"
    )
    for model, setup, recompute in cases:
        spec = preset(model)
        b = estimate(spec, setup, gpu, Options(recompute=recompute))
        g = lower_cached(spec, setup, device="cuda")
        trace_s = median_seconds(
            lambda g=g, b=b, setup=setup: step_trace(g, b.activation_plan, setup, b.params)
        )
        st = step_trace(g, b.activation_plan, setup, b.params)
        for text in ("", "expandable_segments:True", "max_split_size_mb:128"):
            conf = parse_alloc_conf(text)
            s = median_seconds(
                lambda st=st, conf=conf: replay(st, conf, device_memory=gpu.memory_bytes)
            )
            per = s / len(st.trace) * 1e6
            name = f"{model} b{setup.batch} s{setup.seq} {recompute}"
            print(
                f"{name:44s} {text or 'default':26s} {len(st.trace):7d} {trace_s * 1e3:9.1f} "
                f"{s * 1e3:10.1f} {per:9.2f} {TARGET_US_PER_EVENT:7.1f} "
                f"{per / TARGET_US_PER_EVENT:6.2f}"
            )


if __name__ == "__main__":
    main()
