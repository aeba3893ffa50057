"""The differential test (issue 20): draw fine-tuning configurations at random, run each for
real (``memcalc measure``'s code: the HF + PEFT + bitsandbytes step on the CPU) and estimate
it, and print how many agree.

    PYTHONPATH=src nice -n 10 python benchmarks/differential.py --lora 300 --full 300 --seed 0 \\
        --trace --json out.json

``--shard I/N`` runs every N-th drawn case from the I-th (the draw itself does not change), so
N processes share one draw; ``--merge A.json B.json ...`` prints the table of their results.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from memcalc.measure.differential.cases import case_from_record  # noqa: E402
from memcalc.measure.differential.summary import checks, error, summarise, worst  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.merge:
        outcomes = [
            _outcome(r)
            for path in args.merge
            for r in json.loads(Path(path).read_text())["outcomes"]
        ]
        print(table(outcomes))
        return 0
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from memcalc.measure.differential.runner import run_case
    from memcalc.measure.differential.sampler import draw_cases

    cases = draw_cases(args.lora, args.full, args.seed, every_value=args.every_value)
    # LoRA and full cases alternate, so a run stopped early has both kinds
    lora, full = cases[: args.lora], cases[args.lora :]
    mixed = [c for pair in zip(lora, full, strict=False) for c in pair]
    mixed += lora[len(full) :] + full[len(lora) :]
    i, n = (int(x) for x in args.shard.split("/"))
    cases = mixed[i::n]
    outcomes = []
    start = time.perf_counter()
    for k, case in enumerate(cases, 1):
        outcome = run_case(case, trace=args.trace)
        outcomes.append(outcome)
        print(
            f"[{k}/{len(cases)} {time.perf_counter() - start:.0f}s] #{case.index} {case.kind} "
            f"{case.family}: {_verdict(outcome)}",
            file=sys.stderr,
            flush=True,
        )
        if args.json and (k % 10 == 0 or k == len(cases)):
            _write(args, outcomes)
    print(table(outcomes))
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lora", type=int, default=50, help="LoRA / QLoRA cases to draw")
    p.add_argument("--full", type=int, default=50, help="full fine-tuning cases to draw")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", action="store_true", help="also compare memcalc trace (full)")
    p.add_argument(
        "--every-value",
        action="store_true",
        help="also draw the values a CPU measure cannot run (fp8, budget, lion, ...)",
    )
    p.add_argument("--shard", default="0/1", help="I/N: every N-th case from the I-th")
    p.add_argument("--json", help="write every outcome here (rewritten every 10 cases)")
    p.add_argument("--merge", nargs="+", help="print the table of these --json files")
    return p


def _write(args: argparse.Namespace, outcomes: list[Any]) -> None:
    data = {"argv": sys.argv[1:], "outcomes": [o.record() for o in outcomes]}
    tmp = Path(args.json + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(args.json)


def _outcome(record: dict[str, Any]) -> Any:
    from memcalc.measure.differential.runner import Outcome

    fields = {k: v for k, v in record.items() if k != "case"}
    return Outcome(case=case_from_record(record["case"]), **fields)


def _verdict(o: Any) -> str:
    if o.status != "run":
        return f"{o.status}: {o.reason[:120]}"
    c = checks(o.estimate, o.measured)
    return "ok" if not c.misses else "MISS " + ", ".join(f"{f} {_pct(o, f)}" for f in c.misses)


def _pct(o: Any, field: str) -> str:
    e = error(o.estimate.get(field), o.measured.get(field))
    return "?" if e is None else f"{e:+.2%}"


def table(outcomes: list[Any]) -> str:
    s = summarise(outcomes)
    lines = []
    keys = ["drawn", "run", "states exact", "activations within 1%", "peak within 2%", "all three"]
    lines.append(f"{'':44}{'LoRA/QLoRA':>12}{'full':>12}")
    for key in keys:
        lines.append(f"{key:44}{s['lora'][key]:>12}{s['full'][key]:>12}")
    for key in (
        "PEFT refused",
        "PEFT refused, memcalc refused too",
        "PEFT refused, memcalc did not",
        "memcalc refused, PEFT did not",
        "trainable count equal to PEFT's",
        "trainable counts compared",
    ):
        lines.append(f"{key:44}{s['lora'][key]:>12}{'-':>12}")
    for kind in ("lora", "full"):
        lines.append(f"{kind} status: {s[kind]['status']}")
        lines.append(f"{kind} misses by field: {s[kind]['misses by field']}")
        if "trace" in s[kind]:
            lines.append(f"{kind} trace vs measured: {s[kind]['trace']}")
    lora = s["lora"]
    lines.append(f"PEFT refusal reasons: {json.dumps(lora['PEFT refusal reasons'], indent=1)}")
    lines.append(f"memcalc-only refusals: {json.dumps(lora['memcalc refusal reasons'], indent=1)}")
    lines.append("\nworst 10 run cases:")
    for o in worst(outcomes):
        c = checks(o.estimate, o.measured)
        lines.append(
            f"#{o.case.index} {o.case.kind} {o.case.family}: "
            + ", ".join(f"{f} {_pct(o, f)}" for f in c.misses)
            + (
                f"; trainable memcalc {o.memcalc_trainable} PEFT {o.peft.get('trainable')}"
                if o.case.lora is not None
                else ""
            )
        )
        lines.append(f"    config: {json.dumps(o.case.record(), default=str)}")
        lines.append(f"    {o.case.command()}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
