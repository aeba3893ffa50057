"""Parallel layouts per GPU rank: Korthikanti et al. 2022 Table 2 under tensor / sequence
parallelism, Megatron-LM's and DeepSpeed's model-state formulas, the 1F1B pipeline rules, and
the one-line errors of impossible layouts."""

import math

import pytest

from memcalc.cli import main
from memcalc.estimate import Options, estimate
from memcalc.graph.lower import lower
from memcalc.params import count_params
from memcalc.profiles import load_profile
from memcalc.spec.model import ModelSpec
from memcalc.spec.parallel import Parallelism
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.pipeline import in_flight, layer_split
from memcalc.strategies.recompute import Recompute, full, selective

GPU = load_profile("h100-sxm-80gb")
S, B, H, A = 1024, 2, 768, 12


def _gpt(**kw):
    return ModelSpec(
        name="gpt2-shaped",
        family="gpt2",
        vocab_size=50304,
        hidden_size=H,
        num_layers=4,
        num_heads=A,
        activation="gelu",
        embedding_dropout=0.1,
        attention_dropout=0.1,
        residual_dropout=0.1,
        **kw,
    )


def _setup(t, sp, attention="eager"):
    return TrainingSetup(
        batch=B,
        seq=S,
        precision="bf16",
        attention=attention,
        parallel=Parallelism(tp=t, sp=sp),
    )


def _stats(rows: int) -> int:
    """The LayerNorm mean and rstd memcalc keeps and the paper leaves out: 2 fp32 per row,
    2 LayerNorms per layer."""
    return 2 * 2 * 4 * rows


# Korthikanti et al. 2022, Table 2 (per layer, 16-bit, dropout on, fused GeLU):
#   tensor parallel:                   sbh(10 + 24/t + 5as/(ht))
#   tensor + sequence parallel:        sbh(34/t + 5as/(ht))
#   tensor parallel + selective:       sbh(10 + 24/t)
#   tensor + sequence + selective:     sbh(34/t)
#   full recompute:                    2sbh (TP), 2sbh/t (TP + SP)
@pytest.mark.parametrize("t", [1, 2, 4])
def test_table2_tensor_parallel(t):
    block = lower(_gpt(), _setup(t, sp=False)).kinds[0]
    sbh = S * B * H
    assert block.saved_bytes - _stats(S * B) == sbh * 10 + sbh * 24 // t + 5 * A * S * S * B // t
    assert block.selective_saved_bytes - _stats(S * B) == sbh * 10 + sbh * 24 // t


@pytest.mark.parametrize("t", [2, 4])
def test_table2_tensor_and_sequence_parallel(t):
    graph = lower(_gpt(), _setup(t, sp=True))
    block = graph.kinds[0]
    sbh = S * B * H
    rows = S * B // t
    assert block.saved_bytes - _stats(rows) == sbh * 34 // t + 5 * A * S * S * B // t
    assert block.selective_saved_bytes - _stats(rows) == sbh * 34 // t
    outside = graph.prologue_saved_bytes + graph.epilogue_saved_bytes
    extra = sum(s.nbytes for s in graph.checkpoint_extra_inputs)
    assert full(graph).stored_bytes - outside - extra == 4 * 2 * sbh // t  # 2sbh/t per layer
    assert selective(graph).rebuild_bytes == 5 * A * S * S * B // t


@pytest.mark.parametrize("t", [2, 4])
def test_flash_tensor_sequence_parallel_is_34_over_t(t):
    # Megatron-core with TE FusedAttention (the tp default's, --framework megatron): q, k, v,
    # out, the fp32 softmax statistics and an int64[2] RNG state (FusedAttnFunc.forward)
    block = lower(_gpt(), _setup(t, sp=True, attention="sdpa")).kinds[0]
    logsumexp = 4 * (A // t) * S * B
    rng_state = 16
    assert block.saved_bytes - _stats(S * B // t) - logsumexp - rng_state == 34 * S * B * H // t


# Megatron-LM, megatron/training/theoretical_memory_usage.py,
# compute_weight_and_optimizer_memory: parameters on the most loaded shard (the first stage)
# = (transformer block / pp + embedding) / tp, times 18 bytes (bf16 weights, fp32 grads, fp32
# master + Adam m, v) or 6 + 12 / dp with the distributed optimizer.
LLAMA = ModelSpec(
    name="llama-shaped",
    family="llama",
    vocab_size=131072,
    hidden_size=4096,
    num_layers=32,
    num_heads=32,
    num_kv_heads=8,
    intermediate_size=14336,
)


def _megatron_most_loaded_params(spec, tp, pp):
    h, f, a, g = spec.hidden_size, spec.mlp_size, spec.num_heads, spec.kv_heads
    q = spec.q_size
    self_attn = 2 * h * h * ((1 + g / a) * (q / h))
    layer = 2 * h * (f * 3 / 2 + 1) + self_attn  # swiglu, RMSNorm (norm_size 1)
    block = layer * spec.num_layers + h  # + final layernorm
    embedding = h * spec.vocab_size
    shard = (block / pp + embedding) / tp
    if not spec.tie_embeddings and pp == 1:
        shard += embedding / tp
    return shard


@pytest.mark.parametrize("tp,pp", [(1, 1), (8, 1), (4, 4), (8, 8)])
@pytest.mark.parametrize("distributed_optimizer", [False, True])
def test_model_states_equal_megatrons_formula(tp, pp, distributed_optimizer):
    dp = 4
    par = Parallelism(
        dp=dp, tp=tp, pp=pp, microbatches=max(pp, 1), zero=1 if distributed_optimizer else 0
    )
    b = estimate(
        LLAMA, TrainingSetup(seq=2048, parallel=par), GPU, Options(recompute=Recompute.full)
    )
    first = b.stages[0] if b.stages else b
    ours = first.parameter_bytes + first.gradient_bytes + first.optimizer_bytes
    per_param = 6 + 12 / dp if distributed_optimizer else 18
    megatron = _megatron_most_loaded_params(LLAMA, tp, pp) * per_param
    # Where memcalc differs, and why: Megatron divides the RMSNorm weights by tp (they are
    # replicated on every tensor-parallel rank) and spreads the final norm over the stages
    # (it lives on the last); memcalc counts them where they are.
    h = LLAMA.hidden_size
    norms = 2 * h * LLAMA.num_layers // pp  # the first stage's, replicated over tp
    final = h  # the final norm: on the last stage only
    if pp == 1:
        correction = (norms + final) * (1 - 1 / tp)
    else:
        correction = norms * (1 - 1 / tp) - final / (pp * tp)
    assert ours == pytest.approx(megatron + correction * per_param, abs=dp * 16)


# ZeRO (Rajbhandari et al. 2020, Fig. 1): per GPU 2P + 2P/N + 12P/N with 16-bit gradients
# (stage 2), 16P/N with everything sharded (stage 3) -- plus memcalc's fp32 main gradients
# here: 2P + 16P/N and 18P/N. DeepSpeed's estimators (deepspeed/runtime/zero/stage_1_and_2.py
# estimate_zero2_model_states_mem_needs: 4P + 16P/N; stage3.py: 18P/N + the largest layer)
# keep a full 16-bit gradient buffer at stage 2, which memcalc does not count as resident.
@pytest.mark.parametrize("n", [2, 8, 64])
def test_zero_stages_match_the_paper(n):
    p = count_params(LLAMA).total
    for stage, want in ((2, 2 * p + 16 * p / n), (3, 18 * p / n)):
        b = estimate(LLAMA, TrainingSetup(seq=2048, parallel=Parallelism(dp=n, zero=stage)), GPU)
        states = b.parameter_bytes + b.gradient_bytes + b.optimizer_bytes
        assert states == pytest.approx(want, abs=3 * n)


# 1F1B: stage i holds min(p - i, m) micro-batches at its first backward (Korthikanti sec.
# 4.2.3: the first stage p micro-batches of L/p layers).
def test_in_flight_micro_batches():
    par = Parallelism(pp=4, microbatches=8)
    assert [in_flight(i, par)[0] for i in range(4)] == [4, 3, 2, 1]
    few = Parallelism(pp=4, microbatches=4)
    assert [in_flight(i, few) for i in range(4)] == [(4, 3), (3, 3), (2, 2), (1, 1)]
    interleaved = Parallelism(pp=4, vpp=2, microbatches=8)
    assert in_flight(0, interleaved)[0] == math.ceil(4 * (1 + 3 / 8))


def test_uneven_layer_split_and_stage_contents():
    assert layer_split(10, 4) == [(0, 3), (3, 3), (6, 2), (8, 2)]
    spec = LLAMA.replace(num_layers=10)
    b = estimate(spec, TrainingSetup(seq=1024, parallel=Parallelism(pp=4, microbatches=4)), GPU)
    assert [st.stage for st in b.stages] == [
        "stage 0 (layers 0-2)",
        "stage 1 (layers 3-5)",
        "stage 2 (layers 6-7)",
        "stage 3 (layers 8-9)",
    ]
    first, last = b.stages[0], b.stages[-1]
    assert first.params.embedding and not first.params.head
    assert last.params.head and not last.params.embedding
    # the first stage holds the most micro-batches: it is the most loaded here
    assert b.peak_bytes == max(st.peak_bytes for st in b.stages)
    assert first.activation_bytes > last.activation_bytes


def test_tied_head_gets_its_own_copy_on_the_last_stage():
    spec = LLAMA.replace(tie_embeddings=True, num_layers=8)
    b = estimate(spec, TrainingSetup(seq=512, parallel=Parallelism(pp=2, microbatches=2)), GPU)
    emb = spec.vocab_size * spec.hidden_size
    assert b.stages[0].params.embedding == emb and b.stages[1].params.head == emb


def test_gradient_accumulation_raises_the_later_micro_batches_peak():
    one = estimate(LLAMA, TrainingSetup(seq=2048), GPU)
    acc = estimate(LLAMA, TrainingSetup(seq=2048, parallel=Parallelism(microbatches=4)), GPU)
    assert acc.peak_bytes >= one.peak_bytes
    assert acc.time.compute_seconds == pytest.approx(4 * one.time.compute_seconds)


def test_ddp_bucket_copy_and_bucket_view():
    setup = TrainingSetup(seq=512, precision="bf16", parallel=Parallelism(dp=4))
    copy = estimate(LLAMA, setup, GPU)
    view = estimate(LLAMA, setup.replace(parallel=setup.parallel.replace(bucket_view=True)), GPU)
    assert copy.buffer_bytes == copy.gradient_bytes and view.buffer_bytes == 0


def test_fsdp_without_resharding_keeps_gathered_weights():
    par = Parallelism(dp=8, zero=3)
    reshard = estimate(LLAMA, TrainingSetup(seq=2048, parallel=par), GPU)
    keep = estimate(LLAMA, TrainingSetup(seq=2048, parallel=par.replace(fsdp_reshard=False)), GPU)
    assert keep.timeline.block(31).parameter_bytes > reshard.timeline.block(31).parameter_bytes


def test_communication_is_counted_per_dimension():
    par = Parallelism(dp=2, tp=8, pp=4, microbatches=16, zero=1)
    b = estimate(LLAMA, TrainingSetup(seq=8192, parallel=par), GPU)
    dims = {t.dimension for t in b.transfers}
    assert dims == {"tp", "pp", "dp"}
    tp = [t for t in b.transfers if t.dimension == "tp"]
    assert all(t.link.startswith("NVLink") for t in tp)  # 8 ranks fit in a node
    assert b.time.bubble_seconds > 0 and b.time.communication_seconds > 0


def test_sequence_parallel_moves_what_the_all_reduce_moves():
    """Korthikanti et al. 2022 sec. 4.2.2: with SP each all-reduce becomes a reduce-scatter and
    an all-gather of the full b s h activation, so the bytes on the wire per layer match (the
    2 all-gathers that rebuild the weight-gradient inputs come on top)."""
    seq = TrainingSetup(seq=4096, parallel=Parallelism(tp=8))
    plain = TrainingSetup(seq=4096, parallel=Parallelism(tp=8, sp=False))
    wire = {}
    for name, s in (("sp", seq), ("plain", plain)):
        b = estimate(LLAMA, s, GPU)
        wire[name] = {t.collective.value: t.wire_bytes for t in b.transfers}
    act = 4096 * LLAMA.hidden_size * 2 * 7 / 8  # one b s h bf16 activation x (n - 1) / n
    layers = LLAMA.num_layers
    assert wire["plain"]["all-reduce"] == pytest.approx(layers * 4 * 2 * act)
    assert wire["sp"]["reduce-scatter"] == pytest.approx(layers * 4 * act)
    assert wire["sp"]["all-gather"] == pytest.approx(layers * 6 * act)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--tp", "3"], "--tp: 3 does not divide num_heads (32)"),
        (["--pp", "64", "--microbatches", "64"], "--pp: 64 stages for 32 layers"),
        (["--pp", "4"], "--microbatches: the 1F1B schedule needs at least pp (4) micro-batches"),
        (["--vpp", "2"], "--vpp: interleaving needs pipeline parallelism"),
        (["--cp", "3", "--seq", "1024"], "--seq: context parallelism splits the sequence"),
        (["--cp", "2", "--attention", "eager"], "--attention: context parallelism"),
        (
            ["--ep", "3", "--dp", "2"],
            "--ep: expert parallelism runs inside the 2 data-parallel ranks",
        ),
        (["--shard-size", "3", "--dp", "8", "--zero", "3"], "--shard-size: must divide dp"),
    ],
)
def test_impossible_layouts_are_one_line_errors(capsys, argv, message):
    code = main(["estimate", "--model", "llama-2-7b", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


# --- what torch's own mechanisms hold (measured: tests/test_distributed.py) ------------------

TINY = ModelSpec(
    name="tiny-llama",
    family="llama",
    vocab_size=256,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=160,
)


@pytest.mark.parametrize("t", [2, 4])
def test_dtensor_sequence_parallel_saves_the_gathered_projection_inputs(t):
    # torch DTensor (torchtitan's plan): PrepareModuleInput all-gathers the attention and MLP
    # inputs before the column-parallel projections, which save the gathered 2sbh tensor
    # each, where Megatron's ColumnParallelLinear saves the 2sbh/t shard:
    #   Table 2's sbh(34/t + 5as/(ht)) becomes sbh(30/t + 4 + 5as/(ht)).
    par = Parallelism(tp=t)
    setup = TrainingSetup(
        batch=B, seq=S, precision="bf16", attention="eager", parallel=par, framework="hf"
    )
    block = lower(_gpt(), setup).kinds[0]
    sbh = S * B * H
    expected = sbh * 30 // t + 4 * sbh + 5 * A * S * S * B // t
    assert block.saved_bytes - _stats(S * B // t) == expected


def test_dtensor_tensor_parallel_keeps_a_replicated_embedding_gradient_and_loss_buffer():
    setup = TrainingSetup(batch=2, seq=32, precision="fp32")
    megatron = estimate(TINY, setup.replace(parallel=Parallelism(tp=2)), GPU)
    torch_tp = estimate(TINY, setup.replace(parallel=Parallelism(tp=2), framework="hf"), GPU)
    V, h, T = TINY.vocab_size, TINY.hidden_size, 64
    # DTensor's embedding backward has no vocab-sharded rule: the gradient is V x h, replicated
    assert torch_tp.gradient_bytes - megatron.gradient_bytes == (V - V // 2) * h * 4
    assert torch_tp.parameter_bytes == megatron.parameter_bytes
    # loss_parallel's log-softmax keeps x - max beside its input and output
    loss = [m for m in torch_tp.timeline.moments() if m.where.startswith("loss: _log")][0]
    assert loss.transient_bytes == 3 * T * (V // 2) * 4


def test_fsdp2_holds_the_root_group_and_the_pending_reduce_scatter():
    # FSDP2 as fully_shard per block, then on the root (torch _fully_shard): the root group
    # (embedding, final norm, head) stays gathered through the step's forward and backward and
    # its gradients full until its post-backward, after the embedding's; block i's backward
    # sees block i's weights, block i-1's prefetched all-gather, the full gradients written so
    # far and the reduce-scatter input of block i+1 (reduce_scatter_max_input_buffers = 1).
    setup = TrainingSetup(batch=2, seq=32, precision="fp32", parallel=Parallelism(dp=2, zero=3))
    b = estimate(TINY, setup, GPU)
    counts = count_params(TINY)
    per_block, w = counts.per_block, 4
    root = counts.total - TINY.num_layers * per_block
    shard = b.parameter_bytes
    assert shard == counts.total * w // 2
    blk = b.timeline.block(2)
    assert blk.parameter_bytes == shard + (root + 2 * per_block) * w
    head = (counts.lm_head_numel + counts.final_norm) * w
    # block 3 reduced (a shard), block 3's reduce-scatter input pending (full), the head's
    # gradients full; block 2's own at most all of them
    low, high = per_block * w // 2 + per_block * w + head, per_block * w * 5 // 2 + head
    assert low <= blk.gradient_bytes <= high
    assert b.timeline.block(0).parameter_bytes == shard + (root + per_block) * w
    # at the embedding's backward: every block reduced, the root's gradients full, block 0's
    # reduce-scatter input still pending
    embedding = b.timeline.moments()[-2]
    assert embedding.where == "embedding"
    blocks = TINY.num_layers * per_block * w
    assert embedding.gradient_bytes == blocks // 2 + root * w + per_block * w
    assert embedding.parameter_bytes == shard + root * w


def test_fsdp2_keeps_one_step_counter_per_parameter_on_every_rank():
    # torch Adam keeps a step tensor per parameter tensor; over FSDP2's DTensor shards every
    # rank's optimizer holds all of them (on the device here: a CPU step)
    setup = TrainingSetup(batch=2, seq=32, precision="fp32", parallel=Parallelism(dp=2, zero=3))
    b = estimate(TINY, setup, GPU, device="cpu")
    counts = count_params(TINY)
    assert b.optimizer_bytes == 2 * counts.total * 4 // 2 + 4 * counts.tensors


def test_ddp_bucket_view_gradients_exist_from_the_start():
    setup = TrainingSetup(seq=512, precision="bf16", parallel=Parallelism(dp=4, bucket_view=True))
    b = estimate(LLAMA, setup, GPU)
    loss = b.timeline.moments()[0]
    assert loss.phase == "forward" and loss.gradient_bytes == b.gradient_bytes


@pytest.mark.parametrize("framework, tables", [("hf", 2), ("megatron", 1)])
def test_every_pipeline_stage_makes_its_own_rotary_tables(framework, tables):
    # Megatron's GPTModel.forward computes rotary_pos_emb on every stage (one fp32 s x d
    # frequency table, saved by the fused rope of every layer), and so does each stage module
    # under torch.distributed.pipelining (HF's s x d cos and sin): saved on stage 1 too
    par = Parallelism(pp=2, microbatches=2)
    setup = TrainingSetup(batch=2, seq=32, precision="fp32", parallel=par, framework=framework)
    b = estimate(TINY, setup, GPU)
    d = TINY.head_size
    assert b.stages[1].activation_plan.stored_bytes >= tables * 32 * d * 4
    graph = lower(TINY, setup)
    from memcalc.strategies.pipeline import pipeline_stages

    stages = pipeline_stages(graph, par, tied=False)
    assert stages[1].graph.prologue_saved_bytes == tables * 32 * d * 4


def test_torch_pipeline_keeps_a_receive_buffer_per_micro_batch():
    # torch.distributed.pipelining: a stage receives each micro-batch into its own buffer,
    # made once and kept across steps -- activations on every stage but the first, their
    # gradients on every stage but the last
    m, T, h = 4, 64, 64
    par = Parallelism(pp=3, microbatches=m)
    spec = TINY.replace(num_layers=6)
    setup = TrainingSetup(batch=2, seq=32, precision="fp32", parallel=par, framework="hf")
    b = estimate(spec, setup, GPU)
    stream = T * h * 4
    assert [st.buffer_bytes for st in b.stages] == [m * stream, 2 * m * stream, m * stream]
    megatron = estimate(spec, setup.replace(framework="megatron"), GPU)
    # Megatron receives into fresh tensors: no receive buffers, only the GEMM workspaces
    workspaces = 32 * 2**20 + 1024 + 2 * 32 * 2**20  # TE's and PyTorch's two, on an H100
    assert all(st.buffer_bytes == workspaces for st in megatron.stages)


# Expert parallelism (Megatron-core: the expert-parallel group is formed from data-parallel
# ranks, each keeps its tensor-parallel slice of its E/ep experts; ZeRO shards the experts'
# states over the dp/ep ranks that hold the same experts).
MIXTRAL = "mixtral-8x7b"


def _moe(ep: int, zero: int, dp: int = 8, **kw: object):
    from memcalc.spec.presets import preset

    spec = preset(MIXTRAL)
    setup = TrainingSetup(batch=1, seq=1024, parallel=Parallelism(dp=dp, ep=ep, zero=zero), **kw)
    return spec, estimate(spec, setup, GPU, Options(recompute=Recompute.none))


def test_expert_parallelism_splits_the_routed_experts_weights():
    spec, one = _moe(ep=1, zero=0)
    _, eight = _moe(ep=8, zero=0)
    counts = count_params(spec)
    assert counts.expert > 0.9 * counts.total  # Mixtral: nearly all weights are experts
    bf16 = 2
    assert one.parameter_bytes - eight.parameter_bytes == counts.expert * bf16 * 7 // 8
    assert one.gradient_bytes > eight.gradient_bytes


def test_under_zero3_expert_parallelism_leaves_the_state_shares_unchanged():
    """Local experts (E/ep) sharded over dp/ep ranks: E/dp of them per rank, as without EP."""
    _, one = _moe(ep=1, zero=3)
    _, eight = _moe(ep=8, zero=3)
    for field in ("parameter_bytes", "gradient_bytes", "optimizer_bytes"):
        a, b = getattr(one, field), getattr(eight, field)
        assert abs(a - b) <= 1e-6 * a, (field, a, b)  # rounding of the two shard groups


def test_imbalance_scales_the_busiest_expert_rank_only_under_expert_parallelism():
    _, fair = _moe(ep=8, zero=1, moe_imbalance=1.0)
    _, busy = _moe(ep=8, zero=1, moe_imbalance=2.0)
    _, local = _moe(ep=1, zero=1, moe_imbalance=2.0)
    _, local_fair = _moe(ep=1, zero=1, moe_imbalance=1.0)
    assert busy.activation_bytes > fair.activation_bytes
    assert local.activation_bytes == local_fair.activation_bytes
    # fair share under EP = all t*k rows; only the grouped_mm offsets (int32, one per local
    # expert) shrink: 7 fewer experts x 4 bytes x 32 layers
    assert local_fair.activation_bytes - fair.activation_bytes == 7 * 4 * 32


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "gpt2", "--ep", "2", "--dp", "2"], "--ep: gpt2 has no experts"),
        (["--model", MIXTRAL, "--ep", "3", "--dp", "3"], "--ep: 3 must divide"),
    ],
)
def test_expert_parallelism_errors(capsys, argv, message):
    code = main(["estimate", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err


def test_routing_flags_on_a_dense_model_warn(capsys):
    assert main(["estimate", "--model", "gpt2", "--moe-imbalance", "2", "--format", "json"]) == 0
    assert "--moe-imbalance has no effect: gpt2 has no experts" in capsys.readouterr().err
