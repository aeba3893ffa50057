"""The replay against torch's real caching allocator (a CUDA GPU; skipped without one).

The same event list runs through ``memcalc.allocator.replay`` and, in a fresh process per
setting (``PYTORCH_CUDA_ALLOC_CONF`` is read once, at the first CUDA allocation), through
``torch.empty(n, dtype=torch.uint8, device="cuda")`` / ``del``: a tensor per allocation, no
kernels, so no cuBLAS workspace or other allocation joins in. Peaks are compared after
``reset_peak_memory_stats`` at the measured step, as ``memcalc measure`` reads them.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from memcalc.allocator import parse_alloc_conf, replay, step_trace
from memcalc.allocator.events import ALLOC, FREE, StepTrace, Trace
from memcalc.estimate import Options, estimate
from memcalc.graph.lower import lower_cached
from memcalc.profiles import load_profile
from memcalc.spec.loaders import load_model
from memcalc.spec.training import TrainingSetup

RUNNER = """
import json, sys, torch
events = json.load(open(sys.argv[1]))
torch.cuda.init()
torch.cuda.empty_cache()
live = {}
for i, (kind, tid, n) in enumerate(events["events"]):
    if i == events["measured_from"]:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        retries = torch.cuda.memory_stats().get("num_alloc_retries", 0)
    if kind == 0:
        live[tid] = torch.empty(n, dtype=torch.uint8, device="cuda")
    else:
        del live[tid]
torch.cuda.synchronize()
stats = torch.cuda.memory_stats()
print(json.dumps({
    "reserved": torch.cuda.max_memory_reserved(),
    "allocated": torch.cuda.max_memory_allocated(),
    "retries": stats.get("num_alloc_retries", 0) - retries,
    "total": torch.cuda.get_device_properties(0).total_memory,
}))
"""

SETTINGS = (
    "",
    "expandable_segments:True",
    "max_split_size_mb:64",
    "roundup_power2_divisions:4",
    "expandable_segments:True,roundup_power2_divisions:[256:4,>:1]",
)


def _fuzz_trace(seed: int = 123, n: int = 3000) -> StepTrace:
    """torch's test_allocator_fuzz pattern (random sizes, random frees), sizes from 100 B to
    30 MiB so both pools and every segment rule are hit; measured from the middle."""
    rng = random.Random(seed)
    tr = Trace()
    alive: list[int] = []
    for _ in range(n):
        if alive and rng.random() < 0.45:
            tr.free(alive.pop(rng.randrange(len(alive))))
        else:
            alive.append(
                tr.alloc(
                    rng.choice((rng.randrange(100, 1 << 20), rng.randrange(1 << 20, 30 << 20)))
                )
            )
    return StepTrace(tr, len(tr) // 2)


def _step() -> StepTrace:
    spec = load_model("tests/data/tiny-llama.toml")
    setup = TrainingSetup(precision="bf16-mixed", batch=4, seq=256)
    b = estimate(spec, setup, load_profile("h100-sxm-80gb"), Options(recompute="selective"))
    return step_trace(lower_cached(spec, setup, device="cuda"), b.activation_plan, setup, b.params)


def _on_gpu(st: StepTrace, setting: str, tmp_path: object) -> dict[str, int]:
    path = os.path.join(str(tmp_path), "events.json")
    tr = st.trace
    with open(path, "w") as f:
        json.dump(
            {
                "events": [list(e) for e in zip(tr.kinds, tr.ids, tr.sizes, strict=True)],
                "measured_from": st.measured_from,
            },
            f,
        )
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": setting}
    env.pop("PYTORCH_ALLOC_CONF", None)
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, path], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.cuda
@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("which", ["step", "fuzz"])
def test_replay_matches_torch(setting: str, which: str, tmp_path: object) -> None:
    """Reserved and allocated peaks of the measured part, exact (same event list, same
    policy: a difference is a rule the replay gets wrong)."""
    st = _step() if which == "step" else _fuzz_trace()
    real = _on_gpu(st, setting, tmp_path)
    model = replay(st, parse_alloc_conf(setting), device_memory=real["total"])
    assert (model.reserved_peak_bytes, model.allocated_peak_bytes, model.alloc_retries) == (
        real["reserved"],
        real["allocated"],
        real["retries"],
    ), (setting, which)


def test_fuzz_trace_is_balanced() -> None:
    """The event list the GPU test replays is well formed (runs everywhere)."""
    tr = _fuzz_trace().trace
    assert tr.kinds.count(ALLOC) >= tr.kinds.count(FREE) > 1000
