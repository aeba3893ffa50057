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
    block = lower(_gpt(), _setup(t, sp=True, attention="sdpa")).kinds[0]
    logsumexp = 4 * (A // t) * S * B
    assert block.saved_bytes - _stats(S * B // t) - logsumexp == 34 * S * B * H // t


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
        (["--ep", "3", "--dp", "2"], "--ep: expert parallelism runs inside dp x tp"),
        (["--shard-size", "3", "--dp", "8", "--zero", "3"], "--shard-size: must divide dp"),
    ],
)
def test_impossible_layouts_are_one_line_errors(capsys, argv, message):
    code = main(["estimate", "--model", "llama-2-7b", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
