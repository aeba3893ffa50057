"""The estimate/plan invocations whose JSON output is pinned by ``test_snapshots.py``.

Regenerate (only when a change of output is intended, and say why in the commit):
``python tests/snapshots/cases.py``. The README examples are stored whole; the grid (every
preset x several setups x every strategy) as a SHA-256 of the canonical JSON, to keep the file
small -- rerun this script on the old and new code and diff the outputs to see what moved.
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import sys
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).with_name("outputs.json")

README_CASES = [
    "estimate",
    "estimate --model llama-3-8b --gpu h100-sxm-80gb --seq 8192 --batch 1",
    "estimate --model llama-2-7b --gpu a100-sxm-80gb --precision bf16-mixed --optimizer adamw "
    "--recompute full --offload optimizer=cpu",
    "estimate --model tests/data/llama-2-7b-config.json",
    "estimate --model tests/data/my-model.toml",
    "estimate --recompute every-k --every 4",
    "estimate --recompute budget --budget 1GiB",
    "estimate --attention eager --dropout 0.1",
    "estimate --precision bf16 --optimizer sgd-momentum --unit GB",
    "estimate --model llama-2-7b --seq 4096 --gpus 8 --zero 3",
    "plan --model llama-2-7b --seq 4096 --max-gpus 8",
]

PRESETS = [
    "gpt2",
    "gpt2-medium",
    "gpt2-large",
    "gpt2-xl",
    "tinyllama-1.1b",
    "llama-3.2-1b",
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "mistral-7b",
    "qwen2.5-0.5b",
    "qwen2.5-7b",
]
SETUPS = [
    "--batch 1 --seq 1024",
    "--batch 2 --seq 2048 --precision bf16 --attention eager --dropout 0.1",
    "--batch 1 --seq 512 --precision fp32 --attention eager --no-foreach",
    "--batch 2 --seq 1024 --precision amp-bf16",
    "--batch 1 --seq 4096 --precision fp16-mixed --grad-dtype fp16 --optimizer adamw-8bit",
    "--batch 4 --seq 256 --precision fp8-mixed --optimizer adafactor --loss fused",
]
STRATEGIES = [
    "",
    "--recompute none",
    "--recompute selective",
    "--recompute full",
    "--recompute every-k",
    "--recompute every-k --every 5",
    "--recompute budget --budget 3GiB",
    "--offload params=cpu",
    "--offload activations=cpu --recompute selective",
    "--offload optimizer=nvme --recompute every-k --every 3",
    "--gpus 4 --zero 1 --recompute none",
    "--gpus 8 --zero 2 --recompute full",
    "--gpus 8 --zero 3 --recompute selective",
    "--gpus 2 --zero 3 --offload params=cpu --recompute none",
]


def grid_cases() -> list[str]:
    out = []
    for i, model in enumerate(PRESETS):
        for j, setup in enumerate(SETUPS):
            # every preset with the first setup, and a rotating choice of the others
            if j and (i + j) % 3:
                continue
            for strategy in STRATEGIES:
                out.append(f"estimate --model {model} {setup} {strategy}".strip())
    return out


LAYOUT_SETUPS = [
    "--seq 2048",
    "--seq 4096 --gpus 8 --zero 3 --recompute full",
    "--seq 4096 --tp 4 --pp 2 --dp 2 --microbatches 8 --zero 1",
    "--seq 4096 --tp 2 --pp 4 --vpp 2 --dp 2 --microbatches 8 --zero 1 --recompute selective",
    "--seq 8192 --cp 2 --dp 4 --zero 3",
    "--seq 2048 --tp 2 --pp 2 --dp 2 --microbatches 4 --framework hf",
    "--seq 1024 --dp 4 --precision fp32 --recompute none",
    "--seq 1024 --dp 4 --precision fp32 --bucket-view --recompute full",
    "--seq 2048 --gpus 4 --zero 2 --offload optimizer=cpu --microbatches 4",
    "--seq 2048 --lora-rank 16 --quantize nf4 --recompute full",
    "--seq 1024 --lora-rank 8 --lora-targets all-linear --precision bf16",
    "--seq 2048 --ep 2 --dp 4 --zero 1 --recompute full",
]
"""Parallel layouts, offload and fine-tuning: the full JSON of each (times, layout, stages and
assumptions included) for every preset is pinned by ``test_layout_json_is_unchanged``."""

PLAN_SETUPS = [
    "--seq 4096 --max-gpus 16",
    "--seq 2048 --global-batch 64 --max-gpus 64 --gpu h100 --gpu a100",
]


def preset_names() -> list[str]:
    from memcalc.spec.presets import PRESETS

    return sorted(PRESETS)


def _within_positions(model: str, setup: str) -> str:
    """``setup`` with its ``--seq`` capped at a learned-position model's table (GPT-2, OPT)."""
    from memcalc.spec.model import Positions
    from memcalc.spec.presets import PRESETS

    spec = PRESETS[model]
    if spec.positions is not Positions.learned:
        return setup
    words = setup.split()
    i = words.index("--seq")
    words[i + 1] = str(min(int(words[i + 1]), spec.max_position_embeddings))
    return " ".join(words)


def layout_cases() -> list[str]:
    """Every preset x LAYOUT_SETUPS (estimate), and a few presets x PLAN_SETUPS (plan)."""
    out = [
        f"estimate --model {m} {_within_positions(m, s)}"
        for m in preset_names()
        for s in LAYOUT_SETUPS
    ]
    for m in ("gpt2", "llama-3-8b", "mixtral-8x7b", "deepseek-v2-lite", "gemma-2-9b"):
        out += [f"plan --model {m} {s}" for s in PLAN_SETUPS]
    return out


TEXT_CASES = [
    *README_CASES[:-1],
    "estimate --model llama-3-70b --seq 8192 --tp 8 --pp 4 --dp 2 --microbatches 16 --zero 1",
    "estimate --model llama-3-8b --gpu 4090 --seq 2048 --lora-rank 16 --quantize nf4",
    "estimate --model mixtral-8x7b --seq 4096 --ep 8 --dp 8 --zero 1 --recompute full",
    "estimate --model llama-3-8b --seq 4096 --recompute full --offload optimizer=cpu --wide",
    "estimate --model qwen3-8b --seq 2048 --format markdown",
    "estimate --model gemma-2-9b --seq 2048 --format csv --recompute selective",
]
"""Commands whose printed text (table, markdown, csv; 100 columns) is pinned, hashed."""


def run_text(command: str) -> tuple[int, str]:
    """Run ``memcalc COMMAND`` in-process at 100 columns: (exit code, stdout)."""
    import os

    from memcalc.cli import main

    os.environ["COLUMNS"] = "100"
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(shlex.split(command))
    return code, buf.getvalue()


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


TIMING_KEYS = (
    "search_seconds",
    "configurations_evaluated",
    "configurations_estimated",
    "rejected_by_memory_bound",
    "skipped_by_time_bound",
)
"""How the planner's search ran (wall clock, and what its bounds pruned): not the answer. A
bound computed in another order of float additions may prune one configuration more or
less, never change what is found."""


def full_digest(data: object) -> str:
    """SHA-256 of the whole canonical JSON (only the planner's wall-clock fields removed)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def run_json(command: str) -> tuple[int, object]:
    """Run ``memcalc COMMAND --format json`` in-process: (exit code, parsed JSON or error)."""
    from memcalc.cli import main

    args = shlex.split(command) + ["--format", "json"]
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(args)
    if code != 0:
        return code, None
    data = json.loads(buf.getvalue())
    for key in TIMING_KEYS:
        data.pop(key, None)
    return code, data


IGNORED = {
    "assumptions",
    "buffer_bytes",
    "time",
    "communication",
    "stage",
    "stages",
    "layout",
    "trainable_parameter_count",
    "frozen_parameter_count",
}
"""Text that may change wording without a number changing, and keys added since the snapshot
was taken (additions are not changes)."""


def numbers(data: object, like: object | None = None) -> object:
    """``data`` without IGNORED keys, restricted to the keys ``like`` has (new output keys are
    additions, not changes), recursively."""
    if isinstance(data, dict):
        keys = [k for k in data if k not in IGNORED and (like is None or k in like)]
        return {k: numbers(data[k], like[k] if isinstance(like, dict) else None) for k in keys}
    if isinstance(data, list):
        if not isinstance(like, list):
            return [numbers(d) for d in data]
        return [numbers(d, lk) for d, lk in zip(data, like, strict=False)] + data[len(like) :]
    return data


def digest(data: object) -> str:
    return hashlib.sha256(json.dumps(numbers(data), sort_keys=True).encode()).hexdigest()


def build() -> dict[str, object]:
    import os

    os.chdir(ROOT)
    readme = {c: numbers(run_json(c)[1]) for c in README_CASES}
    grid = {}
    for c in grid_cases():
        code, data = run_json(c)
        grid[c] = digest(data) if code == 0 else f"exit {code}"
    layouts = {}
    for c in layout_cases():
        code, data = run_json(c)
        layouts[c] = full_digest(data) if code == 0 else f"exit {code}"
    text = {}
    for c in TEXT_CASES:
        code, out = run_text(c)
        text[c] = text_digest(out) if code == 0 else f"exit {code}"
    return {"readme": readme, "grid": grid, "layouts": layouts, "text": text}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    SNAPSHOT.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
