"""The engine works per block kind: its closed forms equal the same quantities computed layer by
layer, on stacks of several kinds laid out in random patterns."""

import itertools
from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcalc.errors import MemcalcError
from memcalc.estimate import Options, estimate, estimate_graph
from memcalc.graph import lower as lower_module
from memcalc.graph.layout import LayerLayout
from memcalc.graph.lower import lower
from memcalc.params import count_params
from memcalc.profiles import load_profile
from memcalc.spec.model import ModelSpec
from memcalc.spec.parallel import Parallelism
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.offload import Offload
from memcalc.strategies.recompute import Recompute, Roles, budget, plan_for

GPU = load_profile("h100-sxm-80gb")


def _spec(layers=4, mlp=None, family="gpt2", **kw):
    fields = dict(
        name="toy",
        family=family,
        vocab_size=512,
        hidden_size=64,
        num_layers=layers,
        num_heads=4,
        intermediate_size=mlp,
    )
    if family == "llama":
        fields["intermediate_size"] = mlp or 96
        fields["num_kv_heads"] = 2
    return ModelSpec(**fields, **kw)


def _kinds(setup):
    """Three different block kinds of the same width (different MLP widths and families)."""
    a = lower(_spec(mlp=256, attention_dropout=0.1), setup)
    b = lower(_spec(mlp=128), setup)
    c = lower(_spec(family="llama", mlp=160), setup)
    return a, (a.kinds[0], b.kinds[0], c.kinds[0])


@st.composite
def stacks(draw):
    setup = TrainingSetup(
        batch=draw(st.integers(1, 2)),
        seq=draw(st.sampled_from([16, 32])),
        attention=draw(st.sampled_from(["eager", "sdpa"])),
        precision=draw(st.sampled_from(["fp32", "bf16", "bf16-mixed"])),
        parallel=Parallelism(
            dp=draw(st.sampled_from([1, 4])), zero=draw(st.sampled_from([0, 2, 3]))
        ),
    )
    base, kinds = _kinds(setup)
    head = draw(st.lists(st.integers(0, 2), max_size=3))
    period = draw(st.lists(st.integers(0, 2), min_size=1, max_size=4))
    n = draw(st.integers(max(1, len(head)), len(head) + 14))
    layout = LayerLayout.periodic(period, n, head=head)
    graph = replace(base, kinds=kinds, layout=layout)
    return setup, graph


def _options(draw, n):
    recompute = draw(st.sampled_from(list(Recompute)))
    every = draw(st.integers(1, n)) if recompute is Recompute.every_k else None
    offload = draw(st.sampled_from([(), ("params=cpu",), ("activations=cpu",), ("optimizer=cpu",)]))
    return Options(
        recompute=recompute,
        every=every,
        budget_bytes=draw(st.integers(0, 400_000_000)) if recompute is Recompute.budget else None,
        offload=tuple(Offload.parse(o) for o in offload),
    )


@settings(max_examples=150, deadline=None)
@given(stacks(), st.data())
def test_closed_form_peak_is_the_largest_moment_of_every_layer(stack, data):
    """The timeline lists one moment per layer only on request; the peak it reports was found
    among a few candidate layers. It must be the first largest of all moments, in step order."""
    setup, graph = stack
    options = _options(data.draw, graph.num_layers)
    counts = count_params(_spec(layers=graph.num_layers))
    try:
        b = estimate_graph("toy", graph, counts, setup, GPU, options)
    except MemcalcError:
        return  # a budget below the floor
    moments = b.timeline.moments()
    first_max = max(moments, key=lambda m: m.total_bytes)
    assert b.peak == first_max
    assert b.timeline.summary()[0] == moments[0]


@settings(max_examples=150, deadline=None)
@given(stacks(), st.data())
def test_plans_equal_their_layer_by_layer_sums(stack, data):
    setup, graph = stack
    options = _options(data.draw, graph.num_layers)
    try:
        plan = plan_for(
            graph, options.recompute, every=options.every, budget_bytes=options.budget_bytes
        )
    except MemcalcError:
        return
    n = graph.num_layers
    layers = [plan.layer_stored(i) for i in range(n)]
    outside = graph.prologue_saved_bytes + graph.epilogue_saved_bytes
    assert plan.stored_bytes == outside + sum(layers)
    assert sum(plan.stored_by_component.values()) == plan.stored_bytes
    for i in range(n):
        if isinstance(plan.stack, Roles):  # every earlier layer holds what it stored
            assert plan.held_below(i) == sum(layers[:i])
        else:  # and a segment's earlier layers are rebuilt, their input among their tensors
            start = i - i % plan.stack.k
            rebuilt = sum(graph.block(t).saved_bytes for t in range(start, i))
            own = rebuilt - graph.block(start).input.nbytes if i > start else 0
            assert plan.held_below(i) == sum(layers[:i]) + own


def _brute_force_budget(graph, limit):
    fixed = graph.prologue_saved_bytes + graph.epilogue_saved_bytes
    extra = sum(s.nbytes for s in graph.checkpoint_extra_inputs)
    options = []
    for blk in graph.per_layer():
        opts = [(0, blk.saved_bytes, 0), (2, blk.input.nbytes, blk.flops)]
        if blk.core_only_bytes:
            opts.append((1, blk.selective_saved_bytes, blk.core_flops))
        options.append(opts)
    best = None
    for choice in itertools.product(*options):
        stored = fixed + sum(c[1] for c in choice) + (extra if any(c[0] for c in choice) else 0)
        flops = sum(c[2] for c in choice)
        if stored <= limit and (best is None or flops < best):
            best = flops
    return best


@pytest.mark.parametrize("pattern", [(0, 1), (0, 0, 2), (1, 2, 0)])
@pytest.mark.parametrize("fraction", [0.15, 0.4, 0.75])
def test_budget_over_several_kinds_is_optimal_against_brute_force(pattern, fraction):
    setup = TrainingSetup(batch=2, seq=32, attention="eager")
    base, kinds = _kinds(setup)
    graph = replace(base, kinds=kinds, layout=LayerLayout.periodic(pattern, 7))
    limit = int(graph.saved_bytes * fraction)
    want = _brute_force_budget(graph, limit)
    try:
        plan = budget(graph, limit)
    except MemcalcError:
        assert want is None
        return
    assert plan.stored_bytes <= limit
    assert plan.extra_forward_flops == want


def test_cost_does_not_grow_with_depth():
    """A 2-layer and a 200-layer model of one width lower the same number of blocks (one)."""
    calls = []
    real = lower_module.decoder_block

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    with mock.patch.object(lower_module, "decoder_block", counting):
        setup = TrainingSetup(seq=64, attention="eager")
        lowered = []
        for layers in (2, 200):
            calls.clear()
            for r in Recompute:
                options = Options(recompute=r, budget_bytes=10**12)
                estimate(_spec(layers=layers), setup, GPU, options)
            lowered.append(len(calls))
        # one lowering of the one block kind (then remembered), whatever the depth
        assert lowered == [1, 1]
    deep = lower(_spec(layers=10**6), TrainingSetup(seq=8))
    assert len(deep.kinds) == 1 and deep.layout.size == 2
