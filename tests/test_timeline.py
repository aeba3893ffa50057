"""The step timeline's rules for what autograd frees during a block's backward, on toy sizes
in whole MiB, and its closed form (per block kind x count) against a walk over every layer."""

from __future__ import annotations

import pytest

from memcalc.estimate import Options, estimate
from memcalc.graph.lower import lower
from memcalc.graph.ops import Block
from memcalc.profiles import load_profile
from memcalc.spec.model import ModelSpec
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute
from memcalc.timeline import _coarse

MiB = 1 << 20
GPU = load_profile("h100-sxm-80gb")

# b=1, s=512, 4 heads of 64: the scores are 1 Mi elements (4 MiB in fp32); T x a*d in fp32 is
# 0.5 MiB, and T x g*d (2 key/value heads) 0.25 MiB.
TOY = ModelSpec(
    name="toy-llama",
    family="llama",
    vocab_size=512,
    hidden_size=256,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=512,
    max_position_embeddings=512,
)


def _block(precision: str = "fp32") -> Block:
    setup = TrainingSetup(batch=1, seq=512, precision=precision, attention="eager")
    return lower(TOY, setup).block(0)


def _op(blk: Block, name: str) -> int:
    (i,) = [i for i, op in enumerate(blk.ops) if op.name == name]
    return i


def test_eager_softmax_backward_holds_two_score_gradients_and_the_pending_v_gradient():
    """``_softmax_backward_data``: its output gradient and its new input gradient (2 x 4 MiB in
    fp32), beside the v gradient the AV matmul's backward wrote (0.5 MiB), which waits for
    ``repeat_kv``'s backward. Under bf16 Llama's softmax still runs in fp32; the bf16 gradient
    of its ``.to(bf16)`` copy is freed before (``ToCopyBackward0`` ran): 8 + 0.25 MiB."""
    fp32 = _block("fp32")
    assert fp32.ops[_op(fp32, "attn.softmax")].grad_bytes == 8 * MiB + MiB // 2
    bf16 = _block("bf16")
    assert bf16.ops[_op(bf16, "attn.softmax")].grad_bytes == 8 * MiB + MiB // 4


def test_selective_walk_rebuilds_the_core_only_for_its_own_backward():
    """Selective recompute: while the MLP's backward runs the core's saved tensors (softmax
    4 MiB, the repeated k and v 0.5 MiB each) do not exist; from the AV matmul's backward on
    they do, beside the checkpoint's inputs nothing else saves (k and v before repeat_kv,
    0.25 MiB each) and the rebuilt repeat_kv copy of k (0.5 MiB); before the core, the same
    as without recompute."""
    blk = _block()
    assert blk.core_only_bytes == 5 * MiB
    kept = {st.name: st.held for st in _coarse(blk, Recompute.none)}
    rebuilt = {st.name: st.held for st in _coarse(blk, Recompute.selective)}
    core = [op.name for op in blk.ops if op.attention_core]
    first, last = _op(blk, core[0]), _op(blk, core[-1])
    for j, op in enumerate(blk.ops):
        diff = rebuilt[op.name] - kept[op.name]
        if j > last:
            assert diff == MiB // 2 - 5 * MiB, op.name
        elif j >= first:
            assert diff == MiB // 2 + MiB // 2, op.name
        else:
            assert diff == 0, op.name


CLOSED_FORM_CASES = [
    ("gemma-3-4b", "sdpa"),  # five sliding-window layers to one full: two block kinds
    ("gemma-3-4b", "eager"),  # each span's mask held from its first layer up
    ("deepseek-v2-lite", "sdpa"),  # a dense first layer, then MoE blocks
    ("qwen3-30b-a3b", "eager"),
    ("llama-3.2-1b", "eager"),
    ("gpt2", "eager"),
]


@pytest.mark.parametrize("recompute", ["none", "selective", "full", "every-k"])
@pytest.mark.parametrize(("model", "attention"), CLOSED_FORM_CASES)
def test_closed_form_peak_equals_the_walk_over_every_layer(model, attention, recompute):
    """The peak found among a few candidate layers per block kind is the first largest of
    every layer's moments, in step order (``Timeline.moments`` walks each layer)."""
    setup = TrainingSetup(batch=1, seq=1024, precision="bf16-mixed", attention=attention)
    b = estimate(preset(model), setup, GPU, Options(recompute=Recompute(recompute), every=3))
    moments = b.timeline.moments()
    assert b.peak == max(moments, key=lambda m: m.total_bytes)
    assert len(moments) > b.timeline.num_layers


def test_a_span_mask_and_rotary_tables_go_with_their_lowest_layer():
    """Gemma 3 (sliding, full, sliding, full): under full recompute the full-attention mask
    (b x s x s fp32, 128 KiB at b=2, s=128) and its rotary cos and sin (2 x s x 32 fp32,
    32 KiB) are kept by the checkpoints of layers 1 and 3 only, so block 0's backward runs
    without them (measured: tests/test_timeline_measured.py). An every-2 segment holds both
    spans' keywords until its last layer is through: nothing goes early."""
    from memcalc.spec.loaders import load_model
    from memcalc.strategies.recompute import every_k, full
    from memcalc.timeline import span_inputs_freed

    spec = load_model("tests/data/hf/tiny/gemma3_text.json").replace(max_position_embeddings=4096)
    setup = TrainingSetup(batch=2, seq=128, precision="fp32", attention="eager")
    graph = lower(spec, setup, device="cpu")
    KiB = 1024
    per_layer = full(graph)
    assert [span_inputs_freed(graph, per_layer, i) for i in range(4)] == [160 * KiB, 0, 0, 0]
    pairs = every_k(graph, 2)
    assert [span_inputs_freed(graph, pairs, i) for i in range(4)] == [0, 0, 0, 0]
