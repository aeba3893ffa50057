"""Megatron-LM's published memory values as memcalc commands, with the error beside each.

    PYTHONPATH=src python benchmarks/megatron_golden.py              # the table (markdown)
    PYTHONPATH=src python benchmarks/megatron_golden.py --commands   # and each case's command
    PYTHONPATH=src python benchmarks/megatron_golden.py --compact    # errors only (README)

Golden values: ``benchmarks/data/megatron_golden.json`` -- Megatron-LM's functional tests
(``tests/functional_tests/test_cases/*/golden_values_<env>_<platform>.json`` at d98e8a64):
``mem-allocated-bytes`` (``torch.cuda.memory_stats()["allocated_bytes.all.current"]``, logged by
``training_log`` after the optimizer step) and ``mem-max-allocated-bytes`` (``.peak``, never
reset), of the last logged step, on the last rank (the only one with a tensorboard writer:
``global_vars.py _set_tensorboard_writer``), i.e. the last pipeline stage. Each case's
``model_config.yaml`` was resolved by Megatron-LM's own ``parse_args`` + ``validate_args``; the
world size is the CI recipe's.

Each case runs as ``memcalc estimate --megatron-args CASE.json --gpu GPU`` (the case's
arguments, environment and world size written to ``--cases-dir``). memcalc's figures: the last
stage's ``between_steps_bytes`` (what ``memory_allocated`` reads after the step: parameters,
gradient buffer, optimizer states, workspaces) against mem-allocated, and its tensor peak
(``peak_bytes - overhead_bytes`` of ``--format json``'s last stage: the profile's CUDA context
is not a tensor) against mem-max-allocated. Nothing here is fitted: a case memcalc refuses says
why.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

from memcalc.api import estimate
from memcalc.errors import MemcalcError

DATA = Path(__file__).with_name("data") / "megatron_golden.json"
GPUS = {"A100": "a100-sxm-80gb", "H100": "h100-sxm-80gb", "GB200": "b200-180gb"}
"""The memcalc profile of each CI platform (GB200's Blackwell GPU: B200's compute capability
10.0, which is what Transformer Engine's choices read)."""


def case_file(case: dict, folder: Path) -> Path:
    """The case as a ``--megatron-args`` file (functional-test layout)."""
    data = {"MODEL_ARGS": case["args"], "ENV_VARS": case["env"], "world_size": case["world_size"]}
    path = folder / (case["id"].replace("/", "__").removesuffix(".json") + ".json")
    path.write_text(json.dumps(data, indent=1, sort_keys=True))
    return path


def run_case(case: dict, folder: Path) -> dict:
    """memcalc's figures for one golden case, or why there are none."""
    row = {"id": case["id"], "gpu": case["gpu"]}
    if case.get("validate_error"):
        return row | {"skip": f"Megatron-LM's validate_args refuses it: {case['validate_error']}"}
    if case.get("world_size") is None:
        return row | {"skip": "world size unknown (release test, in no CI recipe)"}
    path = case_file(case, folder)
    row["command"] = f"memcalc estimate --megatron-args {path} --gpu {GPUS[case['gpu']]}"
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            b = estimate(megatron_args=str(path), gpu=GPUS[case["gpu"]])
    except MemcalcError as e:
        return row | {"skip": str(e)}
    last = b.stages[-1] if b.stages else b
    return row | {
        "allocated": last.between_steps_bytes,
        "golden_allocated": case["mem_allocated_bytes"],
        "peak": last.peak.total_bytes,
        "golden_peak": case["mem_max_allocated_bytes"],
    }


def _err(got: int, want: int) -> str:
    return f"{got / want - 1:+.2%}"


def table(rows: list[dict], commands: bool) -> str:
    out = [
        "| case | GPU | mem-allocated | memcalc | err | mem-max-allocated | memcalc | err |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        name = r["id"].removesuffix(".json").replace("/golden_values_", " ")
        if "skip" in r:
            out.append(f"| {name} | {r['gpu']} | not estimated: {r['skip']} | | | | | |")
            continue
        out.append(
            f"| {name} | {r['gpu']} | {r['golden_allocated']:,} | {r['allocated']:,} | "
            f"{_err(r['allocated'], r['golden_allocated'])} | {r['golden_peak']:,} | "
            f"{r['peak']:,} | {_err(r['peak'], r['golden_peak'])} |"
        )
        if commands:
            out.append(f"| `{r['command']}` | | | | | | | |")
    return "\n".join(out)


def compact(rows: list[dict]) -> str:
    """Estimated cases only: case, GPU, the two errors."""
    out = [
        "| case | GPU | mem-allocated err | mem-max-allocated err |",
        "| --- | --- | ---: | ---: |",
    ]
    for r in rows:
        if "skip" in r:
            continue
        name = r["id"].removesuffix(".json").split("/")[1]
        out.append(
            f"| {name} | {r['gpu']} | {_err(r['allocated'], r['golden_allocated'])} | "
            f"{_err(r['peak'], r['golden_peak'])} |"
        )
    return "\n".join(out)


def summary(rows: list[dict]) -> str:
    done = [r for r in rows if "skip" not in r]
    alloc = [abs(r["allocated"] / r["golden_allocated"] - 1) for r in done]
    peak = [abs(r["peak"] / r["golden_peak"] - 1) for r in done]
    return (
        f"{len(done)} of {len(rows)} cases estimated; mem-allocated within 1%: "
        f"{sum(e <= 0.01 for e in alloc)}, within 5%: {sum(e <= 0.05 for e in alloc)}; "
        f"mem-max-allocated within 2%: {sum(e <= 0.02 for e in peak)}, within 5%: "
        f"{sum(e <= 0.05 for e in peak)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases-dir", type=Path, default=Path("/tmp/memcalc-megatron-cases"))
    parser.add_argument("--commands", action="store_true", help="print each case's command")
    parser.add_argument("--json", action="store_true", help="the rows as JSON")
    parser.add_argument("--compact", action="store_true", help="errors only, estimated cases")
    args = parser.parse_args()
    args.cases_dir.mkdir(parents=True, exist_ok=True)
    cases = json.loads(DATA.read_text())["cases"]
    rows = [run_case(c, args.cases_dir) for c in cases]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(compact(rows) if args.compact else table(rows, args.commands))
    print()
    print(summary(rows))


if __name__ == "__main__":
    main()
