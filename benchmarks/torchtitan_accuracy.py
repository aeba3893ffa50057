"""Estimate vs torchtitan's own code per rank (``memcalc measure --framework torchtitan``: its
Llama 3, ``parallelize_llama``, fused AdamW and loss on 2 gloo ranks, exact CPU byte counts),
as the markdown table of docs/torchtitan.md. About a minute a case on a 2-core machine.

    python benchmarks/torchtitan_accuracy.py [CASE ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _requires import require

require("torch")
require("torchtitan")

ROOT = Path(__file__).resolve().parents[1]
RUN = [
    *("--model", "tests/data/tiny-llama3-titan.toml", "--batch", "2", "--seq", "32"),
    *("--attention", "sdpa", "--framework", "torchtitan", "--nproc", "2", "--seed", "0"),
]
CASES = {
    "FSDP2 dp 2, fsdp-bf16, op-SAC": (
        "--dp",
        "2",
        "--precision",
        "fsdp-bf16",
        "--recompute",
        "selective",
    ),
    "FSDP2 dp 2, fsdp-bf16, none": ("--dp", "2", "--precision", "fsdp-bf16", "--recompute", "none"),
    "FSDP2 dp 2, fsdp-bf16, full": ("--dp", "2", "--precision", "fsdp-bf16", "--recompute", "full"),
    "FSDP2 dp 2, fp32, op-SAC": ("--dp", "2", "--precision", "fp32", "--recompute", "selective"),
    "TP 2, fsdp-bf16, op-SAC": (
        "--tp",
        "2",
        "--precision",
        "fsdp-bf16",
        "--recompute",
        "selective",
    ),
}
COMPONENTS = (
    "parameters",
    "gradients",
    "optimizer states",
    "stored activations",
    "peak of the step",
)


def run(name: str) -> list[str]:
    command = ["memcalc", "measure", *RUN, *CASES[name], "--format", "json"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return [f"| {name} | - | {last} |"]
    rows = []
    for rank in json.loads(done.stdout)["ranks"]:
        by = {r["component"]: r for r in rank["rows"]}
        cells = [
            f"{by[c]['estimate_bytes']:,} / {by[c]['measured_bytes']:,} ({by[c]['error']:+.2%})"
            for c in COMPONENTS
        ]
        rows.append(f"| {name} | {rank['rank']} | " + " | ".join(cells) + " |")
    return rows


def main(names: list[str]) -> None:
    print("| case | rank | " + " | ".join(COMPONENTS) + " |")
    print("|---|---:|" + "---:|" * len(COMPONENTS))
    for name in names or list(CASES):
        for line in run(name):
            print(line, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
