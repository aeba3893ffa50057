"""Gradient accumulation (``--microbatches`` on one GPU): a later micro-batch's backward writes
each weight gradient as a temporary that AccumulateGrad adds in place to the ``.grad`` already
there and drops (``torch/csrc/autograd/functions/accumulate_grad.h`` ``accumulateGrad``). The
timeline's later pass, the allocator's event list and a real CPU step (``memcalc measure
--microbatches``) agree on it."""

from __future__ import annotations

import itertools

import pytest

from memcalc.allocator import step_trace
from memcalc.estimate import Options, estimate
from memcalc.graph.lower import lower_cached
from memcalc.profiles import load_profile
from memcalc.spec.loaders import load_model
from memcalc.spec.training import TrainingSetup

H100 = load_profile("h100-sxm-80gb")
LLAMA = "tests/data/tiny-llama.toml"
GPT2 = load_model("tests/data/gpt2-mini.toml")


def _setup(**kw: object) -> TrainingSetup:
    base: dict[str, object] = dict(batch=1, seq=16, precision="fp32", optimizer="sgd")
    return TrainingSetup(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "recompute", "precision", "microbatches"),
    list(
        itertools.product(
            (LLAMA, "tests/data/hf/tiny/qwen3.json", "tests/data/hf/tiny/mixtral.json"),
            ("none", "selective", "full"),
            ("fp32", "bf16", "amp-bf16"),
            (2, 3),
        )
    ),
)
def test_event_peak_is_the_timeline_peak(
    model: str, recompute: str, precision: str, microbatches: int
) -> None:
    """Byte for byte, as without accumulation (``test_allocator_events.py``)."""
    spec = load_model(model)
    ts = _setup(precision=precision, framework="hf", parallel=dict(microbatches=microbatches))
    b = estimate(spec, ts, H100, Options(recompute=recompute))
    st = step_trace(lower_cached(spec, ts, device="cuda"), b.activation_plan, b.setup, b.params)
    peak, at = st.trace.live_peak(st.measured_from)
    assert peak == b.peak.total_bytes, (st.trace.label_at(at), b.peak.where)


def test_the_head_temporary_sets_the_peak() -> None:
    """tiny-llama b1 s16 fp32 SGD: the LM head's 256 x 64 fp32 new gradient beside every
    gradient and the logits' gradient is the step's peak under accumulation; without it the
    estimate would stop at the loss (36,736 bytes lower)."""
    spec = load_model(LLAMA)
    one = estimate(spec, _setup(), H100, Options(), device="cpu")
    two = estimate(spec, _setup(parallel=dict(microbatches=2)), H100, Options(), device="cpu")
    assert two.peak.where == "micro-batch 2+: lm_head"
    # every gradient held, the head's new one a temporary beside the logits' gradient
    assert two.peak.total_bytes > one.peak.total_bytes
    assert two.peak.gradient_bytes == one.gradient_bytes
    assert two.peak.transient_bytes == 256 * 64 * 4 + 16 * 256 * 4 + 16 * 64 * 4


MEASURED = [
    # (model, precision, recompute, microbatches): where the peak is a later micro-batch's
    (LLAMA, "fp32", "none", 2),  # the LM head's new gradient
    (LLAMA, "bf16-mixed", "none", 3),
    ("gpt2", "fp32", "full", 2),  # the tied weight's sum, a temporary
    ("gpt2", "fp32", "none", 2),  # a block's weights' new gradients
    ("gpt2", "amp-bf16", "selective", 2),
    ("tests/data/hf/tiny/qwen3.json", "bf16", "none", 2),
    ("tests/data/hf/tiny/mixtral.json", "amp-bf16", "selective", 3),
]


@pytest.mark.hf
@pytest.mark.parametrize(("model", "precision", "recompute", "microbatches"), MEASURED)
def test_accumulated_peak_matches_a_measured_cpu_step(
    model: str, precision: str, recompute: str, microbatches: int
) -> None:
    """Within 1% of a real CPU step of the HF model (``measure``'s live-bytes tracker)."""
    pytest.importorskip("transformers")
    from memcalc.measure.build import Impl
    from memcalc.measure.runner import measure
    from memcalc.strategies.recompute import Recompute

    spec = GPT2 if model == "gpt2" else load_model(model)
    ts = _setup(precision=precision, framework="hf", parallel=dict(microbatches=microbatches))
    b = estimate(spec, ts, H100, Options(recompute=recompute), device="cpu")
    m = measure(spec, ts, impl=Impl.hf, recompute=Recompute(recompute), device="cpu")
    error = (b.peak.total_bytes - m.peak_bytes) / m.peak_bytes
    assert abs(error) <= 0.01, f"{b.peak.total_bytes} ({b.peak.where}) vs {m.peak_bytes}"
    assert b.peak.where.startswith("micro-batch 2+") or b.peak.where == "step()"


@pytest.mark.parametrize(
    ("model", "precision", "microbatches"),
    [
        (LLAMA, "fp32", 1),
        (LLAMA, "bf16-mixed", 2),
        # a tied embedding (at b1 s16 Gemma 3's embedding moment differs by its scaled
        # output's 2,048-byte gradient with or without DDP: b2 s64 as the events' own grid)
        ("tests/data/hf/tiny/gemma3_text.json", "bf16", 1),
        ("tests/data/hf/tiny/qwen3.json", "amp-bf16", 3),
    ],
)
def test_ddp_events_peak_is_the_timeline_peak(
    model: str, precision: str, microbatches: int
) -> None:
    """DDP (``--dp 2``, no ZeRO): the buckets are persistent tensors that add up to the
    timeline's DDP buffer, so the event peak is still the timeline's, byte for byte."""
    from memcalc.allocator.events import ddp_buckets

    spec = load_model(model)
    size = dict(batch=2, seq=64) if "gemma3" in model else {}
    parallel = dict(dp=2, microbatches=microbatches)
    ts = _setup(precision=precision, framework="hf", parallel=parallel, **size)
    b = estimate(spec, ts, H100, Options())
    g = lower_cached(spec, ts, device="cuda")
    assert sum(ddp_buckets(g, ts.gradient_dtype.itemsize)) == b.params.grad_bytes(
        ts.gradient_dtype.itemsize
    )
    st = step_trace(g, b.activation_plan, b.setup, b.params)
    peak, at = st.trace.live_peak(st.measured_from)
    assert peak == b.peak.total_bytes, (st.trace.label_at(at), b.peak.where)
    assert b.reserved.modelled


def test_later_micro_batches_repeat_the_third() -> None:
    """The replay stops at ``REPLAYED_MICROBATCHES``: replaying every one of 8 gives the same
    reserved peak and allocated peak (the events of micro-batches 2..8 are alike)."""
    from memcalc.alloc_conf import AllocConf
    from memcalc.allocator import events, replay

    spec = load_model("tests/data/hf/tiny/qwen3.json")
    ts = _setup(precision="bf16", framework="hf", batch=2, seq=64, parallel=dict(microbatches=8))
    b = estimate(spec, ts, H100, Options())
    g = lower_cached(spec, ts, device="cuda")
    capped = replay(
        step_trace(g, b.activation_plan, b.setup, b.params),
        AllocConf(),
        device_memory=H100.memory_bytes,
    )
    saved = events.REPLAYED_MICROBATCHES
    try:
        events.REPLAYED_MICROBATCHES = 8
        full = replay(
            step_trace(g, b.activation_plan, b.setup, b.params),
            AllocConf(),
            device_memory=H100.memory_bytes,
        )
    finally:
        events.REPLAYED_MICROBATCHES = saved
    assert full.reserved_peak_bytes == capped.reserved_peak_bytes
    assert full.allocated_peak_bytes == capped.allocated_peak_bytes
