"""memcalc estimate vs the 85 measured HF GPT-2 training steps in tests/data/gpt2-cases.json.

Run: python benchmarks/reference_check.py [--all]
Prints a markdown table (estimate, measured, relative error) for saved activations and the
step's peak live bytes, and the worst error of each column over all cases.
"""

import json
import sys
from pathlib import Path

from memcalc.profiles import load_profile
from memcalc.reference import estimate_reference_case

CASES = Path(__file__).resolve().parents[1] / "tests" / "data" / "gpt2-cases.json"


def main() -> None:
    show_all = "--all" in sys.argv
    gpu = load_profile("h100-sxm-80gb")
    rows, worst = [], {"activations": 0.0, "peak": 0.0, "exact": 0}
    for case in json.loads(CASES.read_text()):
        m = case["measured"]
        _, b = estimate_reference_case(case, gpu)
        act_err = (b.activation_bytes - m["saved_activation_bytes"]) / m["saved_activation_bytes"]
        peak_err = (b.peak.total_bytes - m["peak_live_bytes"]) / m["peak_live_bytes"]
        exact = (b.parameter_bytes, b.gradient_bytes, b.optimizer_detail.state_bytes) == (
            m["params_bytes"],
            m["grads_bytes"],
            m["optimizer_state_bytes"],
        )
        worst["activations"] = max(worst["activations"], abs(act_err))
        worst["peak"] = max(worst["peak"], abs(peak_err))
        worst["exact"] += exact
        rows.append(
            (
                case["id"],
                b.activation_bytes,
                m["saved_activation_bytes"],
                act_err,
                b.peak.total_bytes,
                m["peak_live_bytes"],
                peak_err,
                exact,
            )
        )
    print(
        "| case | activations est. | measured | error | peak est. | measured | error |"
        " params/grads/opt exact |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|:---:|")
    for r in rows if show_all else rows[:: max(1, len(rows) // 12)]:
        print(
            f"| {r[0]} | {r[1]:,} | {r[2]:,} | {r[3]:+.2%} | {r[4]:,} | {r[5]:,} | {r[6]:+.2%} "
            f"| {'yes' if r[7] else 'NO'} |"
        )
    print(
        f"\n{len(rows)} cases: worst |error| saved activations {worst['activations']:.3%}, "
        f"peak {worst['peak']:.3%}; parameters, gradients and optimizer states exact in "
        f"{worst['exact']}/{len(rows)}."
    )


if __name__ == "__main__":
    main()
