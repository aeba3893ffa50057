"""Recompute and offload strategies: orderings, the budget knapsack, conservation of bytes."""

import itertools

import pytest

from memcalc.errors import MemcalcError
from memcalc.estimate import Options, estimate
from memcalc.graph.lower import lower
from memcalc.profiles import load_profile
from memcalc.spec.model import ModelSpec
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.offload import Offload
from memcalc.strategies.recompute import Recompute, budget, every_k, full, keep_all, selective

GPU = load_profile("h100-sxm-80gb")
CASES = [
    ("gpt2", TrainingSetup(batch=4, seq=1024, attention="eager", precision="bf16-mixed")),
    ("llama-2-7b", TrainingSetup(batch=1, seq=4096, attention="sdpa")),
    ("llama-3-8b", TrainingSetup(batch=2, seq=8192, attention="eager", precision="bf16")),
    ("gpt2-xl", TrainingSetup(batch=8, seq=1024, attention="sdpa", precision="fp32")),
]


@pytest.mark.parametrize("name,setup", CASES)
def test_strategy_orderings(name, setup):
    """Stored across the forward: every-k (sqrt N checkpoints) <= full <= selective <= none.
    Alive at the worst moment of backward (stored + the rebuilt segment): full <= every-k and
    full <= selective <= none. every-k vs selective has no fixed order: every-k rebuilds k
    whole blocks at once, which at long sequences with eager attention (llama-3-8b, s=8192)
    exceeds what selective keeps -- see test_every_k_can_exceed_selective."""
    graph = lower(preset(name), setup)
    n, s, k, f = keep_all(graph), selective(graph), every_k(graph, _k(graph)), full(graph)
    assert k.stored_bytes <= f.stored_bytes <= s.stored_bytes <= n.stored_bytes
    assert f.peak_activation_bytes <= k.peak_activation_bytes
    assert f.peak_activation_bytes <= s.peak_activation_bytes <= n.peak_activation_bytes


def test_every_k_can_exceed_selective():
    graph = lower(preset("llama-3-8b"), CASES[2][1])
    k, s = every_k(graph, _k(graph)), selective(graph)
    assert k.peak_activation_bytes > s.peak_activation_bytes


def _k(graph):
    from memcalc.strategies.recompute import sqrt_k

    return sqrt_k(graph.num_layers)


def test_every_k_with_k_1_is_full():
    graph = lower(preset("gpt2"), TrainingSetup(batch=2, seq=512, attention="eager"))
    assert every_k(graph, 1).stored_bytes == full(graph).stored_bytes


def test_full_recompute_costs_one_forward_of_the_blocks():
    graph = lower(preset("llama-2-7b"), TrainingSetup(batch=1, seq=4096))
    assert full(graph).extra_forward_flops == graph.over_layers(lambda b: b.flops)
    # Chen et al. 2016 / Korthikanti et al. 2022: about +33% of a step when the blocks
    # dominate the FLOPs (3 forwards' worth per step; the LM head is not recomputed).
    b = estimate(
        preset("llama-2-7b"),
        TrainingSetup(batch=1, seq=4096),
        GPU,
        Options(recompute=Recompute.full),
    )
    assert 0.30 < b.extra_flops_fraction < 1 / 3


def _brute_force(graph, budget_bytes):
    fixed = graph.prologue_saved_bytes + graph.epilogue_saved_bytes
    extra = sum(s.nbytes for s in graph.checkpoint_extra_inputs)
    best = None
    options = []
    for blk in graph.per_layer():
        options.append(
            [
                ("none", blk.saved_bytes, 0),
                ("selective", blk.selective_saved_bytes, blk.core_flops),
                ("full", blk.input.nbytes, blk.flops),
            ]
        )
    for choice in itertools.product(*options):
        stored = fixed + sum(c[1] for c in choice)
        stored += extra if any(c[0] in ("full", "selective") for c in choice) else 0
        flops = sum(c[2] for c in choice)
        if stored <= budget_bytes and (best is None or flops < best):
            best = flops
    return best


@pytest.mark.parametrize("fraction", [0.2, 0.45, 0.7, 0.95])
def test_budget_is_optimal_against_brute_force(fraction):
    spec = ModelSpec(
        name="toy",
        family="gpt2",
        vocab_size=1000,
        hidden_size=256,
        num_layers=6,
        num_heads=4,
        attention_dropout=0.1,
    )
    graph = lower(spec, TrainingSetup(batch=2, seq=512, attention="eager"))
    limit = int(graph.saved_bytes * fraction)
    try:
        plan = budget(graph, limit)
    except MemcalcError:
        assert _brute_force(graph, limit) is None
        return
    assert plan.stored_bytes <= limit
    assert plan.extra_forward_flops == _brute_force(graph, limit)


def test_budget_below_the_floor_is_a_clear_error():
    graph = lower(preset("gpt2"), TrainingSetup(batch=1, seq=1024))
    with pytest.raises(MemcalcError, match="--budget"):
        budget(graph, 1000)


@pytest.mark.parametrize("where", ["cpu", "nvme"])
def test_optimizer_offload_moves_bytes_without_creating_or_losing_them(where):
    spec, setup = preset("llama-2-7b"), TrainingSetup(batch=1, seq=2048)
    base = estimate(spec, setup, GPU)
    off = estimate(spec, setup, GPU, Options(offload=(Offload.parse(f"optimizer={where}"),)))
    assert off.optimizer_bytes == 0
    # Everything the optimizer held is now on the host or NVMe; gradients get a host copy.
    assert off.host_bytes + off.nvme_bytes == base.optimizer_bytes + base.gradient_bytes
    assert off.parameter_bytes == base.parameter_bytes
    assert off.peak_bytes < base.peak_bytes
    assert off.moved_bytes_per_step > 0 and off.transfer_seconds > 0


def test_activation_offload_moves_block_activations_to_host():
    spec, setup = preset("gpt2"), TrainingSetup(batch=8, seq=1024, attention="eager")
    base = estimate(spec, setup, GPU)
    off = estimate(spec, setup, GPU, Options(offload=(Offload.parse("activations=cpu"),)))
    assert off.activation_bytes + off.host_bytes == base.activation_bytes
    assert off.moved_bytes_per_step == 2 * off.host_bytes  # down in forward, up in backward


def test_offload_parse_errors_name_the_options():
    with pytest.raises(MemcalcError, match="choose one of: optimizer, params, activations"):
        Offload.parse("weights=cpu")
    with pytest.raises(MemcalcError, match="WHAT=WHERE"):
        Offload.parse("optimizer")
