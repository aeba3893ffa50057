"""Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
sec. 4.1 eq. 1 and sec. 4.2: per transformer layer, 16-bit activations, dropout on,
  no recompute, eager attention:      s*b*h*(34 + 5*a*s/h) bytes
  flash-style attention (no s^2):    34*s*b*h
  full recompute:                       2*s*b*h  (the layer input)
The paper's MLP activation saves its input only (a fused GeLU), so the closed forms are
checked on a GPT-2-shaped spec with ``activation = "gelu"``; memcalc's op graph also keeps the
LayerNorm mean and rstd (2 fp32 per token per LayerNorm, 16*s*b bytes per layer), which the paper
leaves out, and the fp32 logsumexp of flash attention (4*a*s*b bytes)."""

import pytest

from memcalc.graph.lower import lower
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import full

S, B, H, A = 1024, 2, 768, 12


@pytest.fixture
def spec():
    return ModelSpec(
        name="gpt2-shaped",
        family="gpt2",
        vocab_size=50257,
        hidden_size=H,
        num_layers=4,
        num_heads=A,
        activation="gelu",
        embedding_dropout=0.1,
        attention_dropout=0.1,
        residual_dropout=0.1,
    )


def _layer_norm_stats() -> int:
    return 2 * 2 * 4 * S * B


def test_eager_no_recompute(spec):
    graph = lower(spec, TrainingSetup(batch=B, seq=S, precision="bf16", attention="eager"))
    block = graph.kinds[0].saved_bytes - _layer_norm_stats()
    assert block == S * B * H * 34 + 5 * A * S * S * B  # sbh(34 + 5as/h)


def test_flash_no_recompute(spec):
    graph = lower(spec, TrainingSetup(batch=B, seq=S, precision="bf16", attention="sdpa"))
    logsumexp = 4 * A * S * B
    assert graph.kinds[0].saved_bytes - _layer_norm_stats() - logsumexp == 34 * S * B * H


def test_full_recompute_keeps_the_layer_input(spec):
    graph = lower(spec, TrainingSetup(batch=B, seq=S, precision="bf16", attention="sdpa"))
    plan = full(graph)
    outside = graph.prologue_saved_bytes + graph.epilogue_saved_bytes
    assert plan.stored_bytes - outside == spec.num_layers * 2 * S * B * H


def test_selective_removes_exactly_the_s_squared_term(spec):
    graph = lower(spec, TrainingSetup(batch=B, seq=S, precision="bf16", attention="eager"))
    block = graph.kinds[0]
    assert block.saved_bytes - block.selective_saved_bytes == 5 * A * S * S * B
