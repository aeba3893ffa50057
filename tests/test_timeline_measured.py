"""The step timeline's peak against real PyTorch CPU training steps (HF models, exact live
bytes from ``measure``'s tracker): the moments where the backward frees what autograd frees.

The full grid is ``benchmarks/peak_grid.py``; these are the configs whose peak sits where the
timeline's modelling of autograd matters (eager attention's backward, selective and full
recompute, an MoE block), each measured in about a second.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memcalc.spec.loaders import load_model
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute

torch = pytest.importorskip("torch")

DATA = Path(__file__).parent / "data"
PEAK_TOLERANCE = 0.01
"""The estimate's step peak within 1% of the measured one (on the grid of
benchmarks/peak_grid.py the dense families land within 0.1%)."""


def _spec(family: str) -> ModelSpec:
    if family == "gpt2":
        return load_model(str(DATA / "gpt2-mini.toml"))
    if family == "llama":
        return load_model(str(DATA / "tiny-llama.toml"))
    spec = load_model(str(DATA / "hf" / "tiny" / f"{family}.json"))
    return spec.replace(max_position_embeddings=4096)


CASES = [
    # (family, precision, attention, recompute, seq): where the peak is a block's backward
    ("llama", "bf16", "eager", "none", 256),  # softmax backward after the .to() copy's
    ("llama", "fp32", "eager", "selective", 256),  # the rebuilt core, its inputs held
    ("mistral", "fp32", "eager", "selective", 128),
    ("llama", "fp32", "sdpa", "full", 256),  # a rebuilt block beside the checkpoint input
    ("mixtral", "fp32", "eager", "selective", 128),  # MoE backward before the core's rebuild
    ("olmo2", "bf16", "sdpa", "full", 256),  # RMSNorm's pow backward
    ("gpt2", "fp32", "eager", "every-k", 256),
    # Gemma 3: each span's mask and rotary tables go with its lowest layer's backward; an
    # every-2 segment runs each of its layers with that layer's own mask
    ("gemma3_text", "amp-bf16", "eager", "full", 128),
    ("gemma3_text", "fp32", "sdpa", "every-k", 256),
]


def _compare(family: str, precision: str, attention: str, recompute: str, seq: int) -> None:
    pytest.importorskip("transformers")
    from memcalc.estimate import Options
    from memcalc.measure.build import Impl
    from memcalc.measure.compare import estimate_for
    from memcalc.measure.runner import measure
    from memcalc.profiles import load_profile

    spec = _spec(family)
    setup = TrainingSetup(
        batch=2,
        seq=seq,
        precision=precision,
        attention=attention,
        dropout=0.0 if attention == "sdpa" else None,  # CPU SDPA with dropout: a math kernel
    )
    rc = Recompute(recompute)
    m = measure(spec, setup, impl=Impl.hf, recompute=rc, every=2, device="cpu")
    b = estimate_for(
        spec, setup, load_profile("h100-sxm-80gb"), Options(recompute=rc, every=2), "cpu"
    )
    error = (b.peak.total_bytes - m.peak_bytes) / m.peak_bytes
    assert abs(error) <= PEAK_TOLERANCE, (
        f"estimated peak {b.peak.total_bytes} ({b.peak.where}) vs measured {m.peak_bytes}: "
        f"{error:+.2%}"
    )


@pytest.mark.hf
@pytest.mark.parametrize(("family", "precision", "attention", "recompute", "seq"), CASES)
def test_timeline_peak_matches_a_measured_cpu_step(family, precision, attention, recompute, seq):
    _compare(family, precision, attention, recompute, seq)


@pytest.mark.hf
@pytest.mark.slow
@pytest.mark.parametrize("seq", [128, 256])
@pytest.mark.parametrize("recompute", ["none", "selective", "full", "every-k"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp-bf16"])
@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral", "qwen3", "olmo2", "gemma3_text"])
def test_timeline_peak_grid(family, precision, attention, recompute, seq):
    _compare(family, precision, attention, recompute, seq)
