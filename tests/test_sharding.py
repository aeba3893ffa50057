"""ZeRO / FSDP sharding (Rajbhandari et al. 2020, sec. 5.1): per-GPU model states."""

import pytest

from memcalc.estimate import estimate
from memcalc.params import count_params
from memcalc.profiles import load_profile
from memcalc.spec.parallel import Parallelism
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup

GPU = load_profile("h100-sxm-80gb")
SPEC = preset("llama-2-7b")
P = count_params(SPEC).total
STEP_TENSORS = 0  # non-fused AdamW keeps its step counters on the host


def _ceil_div(a, b):
    return -(-a // b)


@pytest.mark.parametrize("gpus", [2, 8, 64])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_model_states_per_gpu(gpus, stage):
    b = estimate(SPEC, TrainingSetup(seq=2048, parallel=Parallelism(dp=gpus, zero=stage)), GPU)
    opt = 12 * P + STEP_TENSORS  # bf16-mixed AdamW: fp32 master + m + v
    assert b.optimizer_bytes == (_ceil_div(opt, gpus) if stage >= 1 else opt)
    assert b.gradient_bytes == (_ceil_div(4 * P, gpus) if stage >= 2 else 4 * P)
    assert b.parameter_bytes == (_ceil_div(2 * P, gpus) if stage >= 3 else 2 * P)


def test_zero2_matches_the_papers_2p_plus_16p_over_n():
    """ZeRO paper, Fig. 1 with fp32 main grads: 2P + (4 + 12)P / N_d per GPU."""
    n = 16
    b = estimate(SPEC, TrainingSetup(seq=2048, parallel=Parallelism(dp=n, zero=2)), GPU)
    states = b.parameter_bytes + b.gradient_bytes + b.optimizer_bytes
    assert states == pytest.approx(2 * P + 16 * P / n + STEP_TENSORS / n, rel=1e-6)


def test_zero3_peak_includes_gathered_blocks_and_sharding_lowers_the_peak():
    plain = estimate(SPEC, TrainingSetup(seq=4096), GPU)
    z3 = estimate(SPEC, TrainingSetup(seq=4096, parallel=Parallelism(dp=8, zero=3)), GPU)
    assert z3.peak_bytes < plain.peak_bytes
    counts = count_params(SPEC)
    root = counts.total - SPEC.num_layers * counts.per_block  # embedding, final norm, head
    # FSDP2 (fully_shard per block, then the root): two blocks' full bf16 weights (current +
    # prefetched) and the root group's (gathered from the forward to the end of backward,
    # torch's default for the root) sit on top of the shard; block 0 prefetches nothing.
    block_moment = z3.timeline.block(31)
    assert block_moment.parameter_bytes == z3.parameter_bytes + 2 * (2 * counts.per_block + root)
    assert z3.timeline.block(0).parameter_bytes == z3.parameter_bytes + 2 * (
        counts.per_block + root
    )


def test_zero_stage_with_one_gpu_says_it_has_no_effect():
    b = estimate(SPEC, TrainingSetup(seq=2048, parallel=Parallelism(zero=3)), GPU)
    assert b.parameter_bytes == 2 * P
    assert any("no effect" in a for a in b.assumptions)
