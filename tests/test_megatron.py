"""``--framework megatron``: Megatron-core's GPT layer with Transformer Engine, rule by rule.

Each expected value is written out from the source rule it mirrors (Megatron-LM ``d98e8a64``,
TransformerEngine ``d0067d0d``; file and function beside each), not read back from memcalc.
The model is Megatron-LM's functional-test "gpt3_mcore" shape (12 layers, h 512, 8 heads,
seq 1024, micro-batch 4, ffn 4h, LayerNorm, GeLU with bias, dropout 0.1, GPT-2 vocabulary).
"""

import json

import pytest

from memcalc.errors import MemcalcError
from memcalc.graph.lower import lower
from memcalc.optimizer import optimizer_bytes
from memcalc.params import setup_param_counts
from memcalc.spec.megatron import AttentionBackend, MegatronOptions, resolve_backend
from memcalc.spec.megatron_args import from_megatron_args, read_megatron_args
from memcalc.spec.megatron_setup import for_gpu
from memcalc.strategies.residency.megatron_ddp import padded_numel
from memcalc.strategies.residency.megatron_schedule import chunk_layers, peak_in_flight
from memcalc.strategies.residency.workspaces import te_cublas_workspaces

S, B, H, A, F, L = 1024, 4, 512, 8, 2048, 12
T = S * B
V_PADDED = 50304
"""GPT-2's 50,257 rounded up to a multiple of make_vocab_size_divisible_by (128) x tp
(``megatron/core/tokenizers/utils/build_tokenizer.py`` ``vocab_size_with_padding``)."""

GPT3_MCORE = {
    "num_layers": L,
    "hidden_size": H,
    "num_attention_heads": A,
    "ffn_hidden_size": F,
    "seq_length": S,
    "max_position_embeddings": S,
    "micro_batch_size": B,
    "global_batch_size": 32,
    "vocab_size": 50257,
    "bf16": True,
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
}


def _setup(cc=9.0, world_size=8, **args):
    run = from_megatron_args({**GPT3_MCORE, **args}, world_size=world_size)
    return run.spec, for_gpu(run.setup, cc)


def _saves(graph, i=0):
    return {s.name: s.nbytes for op in graph.block(i).ops for s in op.saves}


def test_dense_te_layer_saves_what_each_fused_module_saves():
    spec, setup = _setup()
    saves = _saves(lower(spec, setup))
    # TE _LayerNormLinear.forward (layernorm_linear.py, prepare_for_saving): the bf16 input,
    # ln_out, and LayerNorm's fp32 mu and rsigma (normalization.cpp layernorm_fwd)
    assert saves["layer.in"] == 2 * T * H
    assert saves["self_attention.linear_qkv.ln_out"] == 2 * T * H
    assert saves["self_attention.linear_qkv.mu"] == saves["self_attention.linear_qkv.rsigma"]
    assert saves["self_attention.linear_qkv.rsigma"] == 4 * T
    # FusedAttnFunc.forward (backends.py): q, k, v as views of the mixed QKV output (sbh3d),
    # out (the tensor linear_proj saves too), fp32 softmax stats [b, a, s, 1], rng int64[2]
    assert saves["self_attention.linear_qkv.out"] == 2 * T * 3 * H
    assert saves["self_attention.core_attention.out"] == 2 * T * H
    assert saves["self_attention.core_attention.softmax_stats"] == 4 * B * A * S
    assert saves["self_attention.core_attention.rng_state"] == 16
    # compiled bias_dropout_add (fused_bias_dropout.py under jit_fuser): a bool mask
    assert saves["self_attn_bda.mask"] == saves["mlp_bda.mask"] == T * H
    # fused bias-GeLU (fused_bias_gelu.py GeLUFunction): the fc1 output; fc2 saves its input
    assert saves["mlp.linear_fc1.out"] == saves["mlp.activation.out"] == 2 * T * F
    per_layer = (
        (2 + 2) * T * H + 8 * T  # linear_qkv
        + 6 * T * H + 2 * T * H + 4 * B * A * S + 16  # core attention (out shared with proj)
        + T * H  # attention dropout mask
        + (2 + 2) * T * H + 8 * T  # linear_fc1
        + 2 * T * F + 2 * T * F  # GeLU input, fc2 input
        + T * H  # MLP dropout mask
    )  # fmt: skip
    assert lower(spec, setup).block(0).saved_bytes == per_layer == 71_499_792


def test_attention_backend_follows_te_on_each_gpu():
    # get_attention_backend (dot_product_attention/utils.py): FusedAttention preferred on
    # Hopper+, FlashAttention below, neither below sm80
    auto = MegatronOptions()
    assert resolve_backend(auto, 9.0) is AttentionBackend.fused
    assert resolve_backend(auto, 10.0) is AttentionBackend.fused
    assert resolve_backend(auto, 8.0) is AttentionBackend.flash
    assert resolve_backend(auto, 7.0) is AttentionBackend.unfused


def test_flash_attention_saves_a_second_copy_of_the_output():
    # FlashAttention.forward (backends.py): bshd copies of q, k, v, flash's own out, then the
    # sbhd output linear_proj saves: 2 T h more than FusedAttention (A100 vs H100)
    spec, fused = _setup(9.0)
    _, flash = _setup(8.0)
    diff = lower(spec, flash).block(0).saved_bytes - lower(spec, fused).block(0).saved_bytes
    assert diff == 2 * T * H


def test_unfused_attention_saves_five_bytes_per_score():
    # UnfusedDotProductAttention (backends.py): FusedScaleMaskSoftmax saves its bf16 output,
    # dropout a bool mask and its bf16 output (read by the second bmm): 5 B per score element,
    # beside the same q, k, v and context as FusedAttention minus the stats and rng
    spec, fused = _setup(9.0)
    _, unfused = _setup(9.0, attention_backend="unfused")
    got = lower(spec, unfused).block(0).saved_bytes - lower(spec, fused).block(0).saved_bytes
    scores = B * A * S * S
    assert got == 5 * scores - 4 * B * A * S - 16


def test_vocab_parallel_cross_entropy_keeps_one_fp32_copy_in_place():
    # _VocabParallelCrossEntropy.forward (tensor_parallel/cross_entropy.py): logits.float()
    # once, softmax in place, saved with the target mask and masked targets; the bf16 logits
    # stay referenced in GPTModel.forward beside it (forward peak 6 B/elem)
    spec, setup = _setup()
    graph = lower(spec, setup)
    loss = {s.name: s.nbytes for op in graph.epilogue for s in op.saves}
    assert loss["loss.softmax"] == 4 * T * V_PADDED == 824_180_736
    assert graph.loss_peaks.forward_bytes == 2 * T * V_PADDED
    # backward: the gradient written into the fp32 buffer, then the bf16 cast's gradient
    assert graph.loss_peaks.backward_bytes == 2 * T * V_PADDED


def test_te_fused_adam_adds_no_step_temporaries():
    # TE FusedAdam.step (optimizers/fused_adam.py): multi-tensor kernel in place, step a
    # Python int -- no foreach temporaries, no step tensors; fp32 main params + m + v
    spec, setup = _setup(world_size=1)
    counts = setup_param_counts(spec, setup)
    opt = optimizer_bytes(setup, counts, "cuda")
    assert opt.step_temporary_bytes == 0
    assert opt.master_weight_bytes == 4 * counts.trainable


def test_distributed_optimizer_padding_follows_param_layout():
    # optimizer/param_layout.py: starts padded to 64 elements, laid out in reverse, each bucket
    # end to lcm(dp, 128); one bucket without overlap_grad_reduce
    assert padded_numel(((100, False), (10, False)), 8, None) == 256  # 10 -> 64, 164 -> 256
    assert padded_numel(((130, False),), 8, None) == 256
    # a bucket closes once it reaches bucket_size: 100 then 100 -> two buckets of 128
    assert padded_numel(((100, False), (100, False)), 8, 64) == 256


def test_gemm_workspaces_by_compute_capability():
    # gemm.py get_cublas_workspace_size_bytes: 32 MiB + 1 KiB on sm >= 9, 4 MiB below;
    # CUBLAS_WORKSPACE_CONFIG=:4096:8 -> 32 MiB per torch cuBLAS handle, two threads
    assert te_cublas_workspaces(9.0, 32 * 2**20, False).buffer_bytes == 96 * 2**20 + 1024
    assert te_cublas_workspaces(8.0, 32 * 2**20, False).buffer_bytes == 68 * 2**20
    # the H100 - A100 difference of the golden static memory: 29,361,152 B exactly
    h100 = te_cublas_workspaces(9.0, 32 * 2**20, False).buffer_bytes
    assert h100 - te_cublas_workspaces(8.0, 32 * 2**20, False).buffer_bytes == 29_361_152


def test_interleaved_schedule_holds_nine_chunks_on_the_last_rank():
    # schedules.py get_pp_rank_microbatches: warm-up (p - r - 1) * 2 + (v - 1) * g, g = p;
    # last rank of p 4, v 3, 4 micro-batches: 0 + 2 * 4 = 8 warm-up forwards + 1
    chunks = chunk_layers(12, 4, 3)
    assert chunks[3] == [1, 1, 1]
    one = 1000
    assert peak_in_flight(4, 3, 3, 4, 4, [one, one, one]) == 9 * one
    # the first rank: (p - 1) * 2 + (v - 1) * p = 14 warm-up forwards + 1, of 12 chunks
    # of which the first is the embedding's
    assert peak_in_flight(4, 0, 3, 8, 4, [one, one, one]) == 15 * one


def test_megatron_args_read_a_functional_test_config(tmp_path):
    path = tmp_path / "model_config.json"
    path.write_text(
        json.dumps(
            {
                "MODEL_ARGS": {**GPT3_MCORE, "tensor_model_parallel_size": 2},
                "ENV_VARS": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"},
                "world_size": 8,
            }
        )
    )
    run = read_megatron_args(str(path))
    assert (run.setup.parallel.tp, run.setup.parallel.dp) == (2, 4)
    assert run.setup.framework_def.name.value == "megatron"
    assert run.spec.vocab_size == 50257


def test_megatron_args_refuse_what_is_not_modelled():
    with pytest.raises(MemcalcError, match="multi_latent_attention"):
        from_megatron_args({**GPT3_MCORE, "multi_latent_attention": True}, world_size=8)
