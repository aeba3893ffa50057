"""The estimate against real HF GPT-2 training steps (shared/reference, 85 cases)."""

import pytest

from memcalc.profiles import load_profile
from memcalc.reference import estimate_reference_case

ACTIVATION_TOLERANCE = 0.01
"""The issue's bar for saved activations; the lowering currently matches to the byte."""
PEAK_TOLERANCE = 0.01
"""The step timeline is an approximation of the allocator-free live bytes (CPU tracker)."""


def _estimate(case):
    return estimate_reference_case(case, load_profile("h100-sxm-80gb"))


def test_there_are_85_cases(reference_cases):
    assert len(reference_cases) == 85


def test_every_case(reference_cases):
    failures = []
    for case in reference_cases:
        m = case["measured"]
        graph, b = _estimate(case)
        exact = {
            "params_bytes": b.parameter_bytes,
            "grads_bytes": b.gradient_bytes,
            "optimizer_state_bytes": b.optimizer_detail.state_bytes,
            "optimizer_step_tensor_bytes": b.optimizer_detail.step_tensor_bytes,
            "params_count": b.params.total,
        }
        for key, value in exact.items():
            if value != m[key]:
                failures.append(f"{case['id']}: {key} {value} != {m[key]}")
        act_err = (
            abs(b.activation_bytes - m["saved_activation_bytes"]) / m["saved_activation_bytes"]
        )
        if act_err > ACTIVATION_TOLERANCE:
            failures.append(
                f"{case['id']}: activations {b.activation_bytes} vs "
                f"{m['saved_activation_bytes']} ({act_err:.2%})"
            )
        peak_err = abs(b.peak.total_bytes - m["peak_live_bytes"]) / m["peak_live_bytes"]
        if peak_err > PEAK_TOLERANCE:
            failures.append(
                f"{case['id']}: peak {b.peak.total_bytes} vs {m['peak_live_bytes']} "
                f"({peak_err:.2%})"
            )
        if b.peak.phase != m["peak_phase"]:
            failures.append(f"{case['id']}: peak phase {b.peak.phase} != {m['peak_phase']}")
        if "recompute_block_saved_bytes_max" in m:
            rebuilt = max(blk.saved_bytes for blk in graph.kinds)
            if rebuilt != m["recompute_block_saved_bytes_max"]:
                failures.append(
                    f"{case['id']}: rebuilt block {rebuilt} != "
                    f"{m['recompute_block_saved_bytes_max']}"
                )
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "case_id",
    [
        "gpt2-S-s128-b1-eager-fp32-do0.1-adamw-rc-none",
        "gpt2-M-s512-b4-eager-bf16-do0.1-adamw-rc-none",
        "gpt2-M-s1024-b4-eager-fp32-do0.1-adamw-rc-full",
    ],
)
def test_per_layer_and_non_layer_split(reference_cases, case_id):
    case = next(c for c in reference_cases if c["id"] == case_id)
    graph, b = _estimate(case)
    m = case["measured"]
    if case["inputs"]["recompute"] == "none":
        assert [blk.saved_bytes for blk in graph.per_layer()] == m["saved_per_layer_bytes"]
        assert graph.prologue_saved_bytes + graph.epilogue_saved_bytes == m["saved_non_layer_bytes"]
    else:
        assert b.activation_bytes == m["saved_activation_bytes"]
