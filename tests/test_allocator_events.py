"""A step's allocation events (``allocator.events``) against the estimate: the event list's
own peak is the step timeline's peak, and its tensors add up to the Breakdown's components."""

from __future__ import annotations

import itertools

import pytest

from memcalc.allocator import AllocConf, replay, step_trace, unmodelled
from memcalc.allocator.events import ALLOC, param_tensors
from memcalc.estimate import Breakdown, Options, estimate
from memcalc.graph.lower import lower_cached
from memcalc.graph.ops import OpGraph
from memcalc.profiles import load_profile
from memcalc.spec.loaders import load_model
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup

H100 = load_profile("h100-sxm-80gb")
RECOMPUTE = ("none", "selective", "full", "every-k")


def _run(model: str, recompute: str = "none", **setup: object) -> tuple[Breakdown, OpGraph]:
    spec = load_model(model) if model.endswith((".json", ".toml")) else preset(model)
    ts = TrainingSetup(**setup)  # type: ignore[arg-type]
    b = estimate(
        spec, ts, H100, Options(recompute=recompute, every=2 if recompute == "every-k" else None)
    )
    return b, lower_cached(spec, ts, device="cuda")


def _peak(b: Breakdown, g: OpGraph) -> tuple[int, str]:
    st = step_trace(g, b.activation_plan, b.setup, b.params)
    peak, at = st.trace.live_peak(st.measured_from)
    return peak, st.trace.label_at(at)


# Families without linear biases, whose op gradients the timeline counts in full.
NO_BIAS = (
    "tests/data/tiny-llama.toml",
    "tests/data/hf/tiny/qwen3.json",
    "tests/data/hf/tiny/mistral.json",
    "tests/data/hf/tiny/gemma3_text.json",
    "tests/data/hf/tiny/mixtral.json",
    "tests/data/hf/tiny/deepseek_v2.json",
    "tests/data/hf/tiny/olmo2.json",
)


@pytest.mark.parametrize(
    ("model", "recompute", "precision", "attention"),
    list(
        itertools.product(NO_BIAS, RECOMPUTE, ("fp32", "bf16-mixed", "amp-bf16"), ("sdpa", "eager"))
    ),
)
def test_event_peak_is_the_timeline_peak(
    model: str, recompute: str, precision: str, attention: str
) -> None:
    """Exact, byte for byte: every moment of the timeline is a point of the event list, and no
    other point of it is higher (b 2 x s 64: the peak moves between the loss, the blocks and
    the optimizer step across this grid)."""
    b, g = _run(model, recompute, precision=precision, attention=attention, batch=2, seq=64)
    peak, where = _peak(b, g)
    assert peak == b.peak.total_bytes, (where, b.peak.where)


@pytest.mark.parametrize("recompute", RECOMPUTE)
def test_gpt2_and_llama_presets(recompute: str) -> None:
    """Full-size presets, at the peaks their timelines report (GPT-2's is the loss or the
    optimizer step, where every bias gradient is written or none is)."""
    for model, setup in (
        ("gpt2", dict(precision="fp32", batch=4, seq=512)),
        ("llama-2-7b", dict(precision="bf16-mixed", batch=1, seq=2048)),
    ):
        b, g = _run(model, recompute, **setup)
        assert _peak(b, g)[0] == b.peak.total_bytes


def test_bias_gradients_the_timeline_leaves_out() -> None:
    """GPT-NeoX's peak is inside a block, where the timeline counts an op's weight gradients
    by ``Op.params``, which leaves out the bias: the events allocate the bias gradient at its
    op, 256 bytes more here (dense_4h_to_h's 64 fp32 bias elements)."""
    b, g = _run(
        "tests/data/hf/tiny/gpt_neox.json", "full", precision="bf16-mixed", batch=2, seq=128
    )
    peak, _ = _peak(b, g)
    assert peak - b.peak.total_bytes == 64 * 4


def test_fused_loss_final_norm_moment() -> None:
    """With a fused linear cross-entropy the final norm's backward (fp32 upcast gradients) is
    higher than any moment the timeline lists (it lists none for the ops after the blocks):
    the events show it."""
    b, g = _run("tests/data/tiny-llama.toml", precision="bf16-mixed", loss="fused", batch=2, seq=64)
    peak, where = _peak(b, g)
    assert where == "backward: head" and peak > b.peak.total_bytes


def test_tensor_totals_match_the_breakdown() -> None:
    """The persistent tensors are the parameters and optimizer states of the estimate, the
    gradients add up to its gradient bytes."""
    b, g = _run("tests/data/tiny-llama.toml", precision="bf16-mixed", batch=2, seq=64)
    assert sum(w.storage_bytes(2) for w in param_tensors(g)) == b.parameter_bytes
    st = step_trace(g, b.activation_plan, b.setup, b.params)
    tr = st.trace
    # before the measured step: parameters, masters and states alive, nothing else
    live = sum(
        s if k == ALLOC else -s
        for k, s in zip(tr.kinds[: st.measured_from], tr.sizes, strict=False)
    )
    assert live == b.parameter_bytes + b.optimizer_bytes


@pytest.mark.parametrize("recompute", RECOMPUTE)
def test_kept_bytes_per_layer_are_the_plan(recompute: str) -> None:
    """What the forward keeps is the plan's stored activations (its loss moment's activations)."""
    b, g = _run("tests/data/hf/tiny/gemma3_text.json", recompute, precision="bf16", batch=2, seq=64)
    st = step_trace(g, b.activation_plan, b.setup, b.params)
    tr = st.trace
    i = next(
        i for i, label in tr.marks if label == "forward: head and loss" and i > st.measured_from
    )
    start = next(i for i, label in tr.marks if label == "forward" and i >= st.measured_from)
    kept = sum(
        s if k == ALLOC else -s for k, s in zip(tr.kinds[start:i], tr.sizes[start:i], strict=True)
    )
    blocks = b.activation_plan.stored_bytes - g.prologue_saved_bytes - g.epilogue_saved_bytes
    weight_cache = sum(
        c * blk.weight_cast_bytes
        for blk, c in zip(g.kinds, b.activation_plan.fully_recomputed, strict=False)
    )
    assert kept == g.prologue_saved_bytes + blocks + weight_cache


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (dict(parallel=dict(dp=2, zero=3)), "ZeRO / FSDP data parallelism"),
        (
            dict(parallel=dict(pp=2, microbatches=4)),
            "pipeline, context and expert parallelism",
        ),
        (dict(optimizer="adamw-8bit"), "adamw-8bit's per-tensor state"),
    ],
)
def test_unmodelled_setups(setup: dict[str, object], reason: str) -> None:
    why = unmodelled(TrainingSetup(**setup), offloaded=False, device="cuda")  # type: ignore[arg-type]
    assert why is not None and reason in why
    assert (
        unmodelled(TrainingSetup(), offloaded=True, device="cuda")
        == "offload is not in the event model yet"
    )
    assert unmodelled(TrainingSetup(), offloaded=False, device="cuda") is None


def test_replay_reserves_at_least_the_allocations() -> None:
    """The replay's requested peak is the events' peak; allocated rounds it up, reserved adds
    the cache (Llama-2-7B, b1 s2048, full recompute: every figure exact to the event list)."""
    b, g = _run("llama-2-7b", "full", precision="bf16-mixed", batch=1, seq=2048)
    st = step_trace(g, b.activation_plan, b.setup, b.params)
    r = replay(st, AllocConf(), device_memory=H100.memory_bytes)
    assert r.requested_peak_bytes == b.peak.total_bytes
    assert r.requested_peak_bytes <= r.allocated_peak_bytes <= r.reserved_peak_bytes
    assert r.alloc_retries == 0 and not r.out_of_memory


def test_replay_does_not_depend_on_the_hash_seed() -> None:
    """The event order is the graph's, never a set's: two processes with different
    PYTHONHASHSEED replay the same reserved bytes (Gemma 2 eager, selective: the attention
    core rebuilt in backward)."""
    import os
    import subprocess
    import sys

    code = (
        "from memcalc.estimate import estimate, Options;"
        "from memcalc.spec.presets import preset;"
        "from memcalc.spec.training import TrainingSetup;"
        "from memcalc.profiles import load_profile;"
        "b = estimate(preset('gemma-2-9b'), TrainingSetup(seq=2048, attention='eager'),"
        " load_profile('h100-sxm-80gb'), Options(recompute='selective'));"
        "print(b.reserved.demand.reserved_peak_bytes)"
    )
    out = {
        seed: subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(set(out.values())) == 1, out
