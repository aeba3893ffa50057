"""The step-time model's rules, each against the arithmetic it states (issue 23): context-
parallel and causal attention work, the CPU optimizer step under expert parallelism, LoRA's
offload traffic, the expert all-to-all, one NIC per GPU across nodes, activation offload by
direction, fp8 GEMM rates, the gradient-reduction dtype, GEMM efficiency by shape and the
pipeline's traffic per virtual stage."""

import math

import pytest

from memcalc.estimate import Options, estimate
from memcalc.graph.lower import lower
from memcalc.graph.ops import AttentionWork, Gemm
from memcalc.profiles import load_profile
from memcalc.spec.parallel import Parallelism
from memcalc.spec.presets import preset
from memcalc.spec.training import Attention, DType, TrainingSetup
from memcalc.steptime import RUNTIMES, micro_batch
from memcalc.steptime.kernels import (
    TILE_OVERHEAD_RIDGES,
    attention_flops,
    attention_pass_seconds,
    causal_fraction,
    gemm_pass_seconds,
    gemm_seconds,
    tile_utilisation,
)
from memcalc.steptime.schedule import OVERLAP_SLOWDOWN, edge_seconds
from memcalc.strategies.comms import Collective, Links, Window, ring_latency_s
from memcalc.strategies.runtime import AttentionKernel

H100 = load_profile("h100-sxm-80gb")
A100 = load_profile("a100-sxm-80gb")
MEGATRON = RUNTIMES["megatron-core"]


def _attention_seconds(setup, spec="llama-3-8b"):
    graph = lower(preset(spec), setup)
    mb = micro_batch(graph, H100, MEGATRON, cp=setup.parallel.cp)
    return sum(mb.total.attention)


def test_context_parallel_rank_does_its_share_of_the_whole_causal_attention():
    """Ring / all-gather CP with causal load balancing: each of cp ranks runs s/cp queries
    against all s keys, half of them masked -- 1/cp of the one-GPU work at the same s, not
    the (s/cp)^2 square of its own chunk (what the lowering, which stores s/cp tokens, has)."""
    s = 65536
    one = TrainingSetup(seq=s)
    cp8 = TrainingSetup(seq=s, parallel=Parallelism(cp=8))
    short = TrainingSetup(seq=s // 8)
    work_one = next(
        op.work
        for op in lower(preset("llama-3-8b"), one).kinds[0].ops
        if isinstance(op.work, AttentionWork)
    )
    work_cp = next(
        op.work
        for op in lower(preset("llama-3-8b"), cp8).kinds[0].ops
        if isinstance(op.work, AttentionWork)
    )
    # the rank's flops: 2 heads (s/8) s (d + d) (1/2 + 64 / (s/8))
    d, heads = 128, 32
    expected = 2 * heads * (s // 8) * s * 2 * d * (0.5 + 64 / (s // 8))
    assert attention_flops(work_cp, cp=8) == pytest.approx(expected, rel=1e-12)
    whole = attention_flops(work_one)
    # 8 ranks together: the whole causal triangle, plus their chunks' diagonal blocks
    assert attention_flops(work_cp, cp=8) * 8 == pytest.approx(whole, rel=0.02)
    t_one, t_cp, t_short = (_attention_seconds(x) for x in (one, cp8, short))
    assert t_cp == pytest.approx(t_one / 8, rel=0.02)
    assert t_cp == pytest.approx(8 * t_short, rel=0.01)  # not the (s/8)^2 of seq s/8 on one GPU


def test_causal_flash_attention_computes_half_the_scores_eager_computes_all():
    """FlashAttention / cuDNN skip the key blocks above the diagonal: at s = 8192 and 128-row
    blocks (64 + 1) / 128 of the square; eager attention multiplies full s x s matrices."""
    w = AttentionWork(32, 8192, 8192, 128, 128, DType.bf16)
    assert causal_fraction(w, 8192) == (64 + 1) / 128
    assert attention_flops(w) == 2 * 32 * 8192 * 8192 * 256 * 65 / 128
    eager = lower(preset("llama-3-8b"), TrainingSetup(seq=8192, attention=Attention.eager))
    gemms = [
        op.work for op in eager.kinds[0].ops if op.name in ("attn.qk_matmul", "attn.av_matmul")
    ]
    assert [(g.m, g.k, g.n, g.groups) for g in gemms] == [
        (8192, 128, 8192, 32),
        (8192, 8192, 128, 32),
    ]


def test_cpu_optimizer_step_does_not_shrink_with_expert_parallelism():
    """Mixtral-8x7B, dp 8, ZeRO-3, params and optimizer on the CPU: every rank updates its
    1/8 of the dense parameters and of all experts -- E/ep experts over dp/ep ranks -- so the
    CPU step, like the host RAM, is the same at ep 1, 2, 4, 8."""
    spec = preset("mixtral-8x7b")
    steps, hosts = [], []
    for ep in (1, 2, 4, 8):
        setup = TrainingSetup(seq=4096, parallel=Parallelism(dp=8, ep=ep, zero=3))
        b = estimate(
            spec, setup, H100, Options(recompute="full", offload=("params=cpu", "optimizer=cpu"))
        )
        steps.append(b.time.cpu_optimizer_seconds)
        hosts.append(b.host_bytes)
    assert max(steps) == pytest.approx(min(steps), rel=1e-6)
    assert max(hosts) == pytest.approx(min(hosts), rel=1e-6)  # rounding of the shards only
    counts = estimate(
        spec, TrainingSetup(seq=4096, parallel=Parallelism(dp=8, zero=3)), H100
    ).params
    assert steps[0] == pytest.approx(counts.trainable / 8 / H100.cpu_adam_params_per_s, rel=1e-6)


def test_lora_optimizer_offload_moves_what_is_trained_not_the_frozen_base():
    """LoRA r=16 with the optimizer on the CPU: the adapters' gradients go down and their
    updated weights come back (trainable elements x (gradient + weight bytes)); the frozen
    base never moves."""
    setup = TrainingSetup(seq=2048, lora={"rank": 16})
    b = estimate(
        preset("llama-3-8b"),
        setup,
        load_profile("rtx-4090-24gb"),
        Options(offload=("optimizer=cpu",)),
    )
    c = b.params  # PEFT keeps the adapters in fp32: 4-byte gradients, 4-byte weights
    trained = c.grad_bytes(setup.gradient_dtype.itemsize)
    trained += c.trainable_weight_bytes(setup.weight_dtype.itemsize)
    assert b.moved_bytes_per_step == trained == 8 * c.trainable
    assert b.moved_bytes_per_step < 0.01 * c.total * setup.weight_dtype.itemsize


def test_expert_parallel_all_to_all_is_charged():
    """Qwen3-30B-A3B, ep 8: per MoE layer and micro-batch a dispatch and a combine in forward
    and again in backward, each of the rows this rank's experts receive x h x 2 bytes."""
    spec = preset("qwen3-30b-a3b")
    setup = TrainingSetup(seq=4096, parallel=Parallelism(dp=8, ep=8, zero=1), moe_imbalance=1.0)
    b = estimate(spec, setup, H100)
    (a2a,) = [t for t in b.transfers if t.dimension == "ep"]
    rows = 4096 * spec.moe.top_k  # balanced: each rank receives its own tokens' share
    assert a2a.collective is Collective.all_to_all
    assert a2a.payload_bytes == spec.moe_layers * 4 * rows * spec.hidden_size * 2
    assert a2a.intra_bytes == pytest.approx(7 / 8 * a2a.payload_bytes)


def test_each_gpu_drives_its_own_nic_across_nodes():
    """An all-gather of S bytes over 8 nodes x 8 GPUs: (8-1)/8 S inside each node on NVLink,
    and the inter-node ring of the 1/8 shards on each GPU's own NIC, (8-1)/8 x S/8 -- not the
    whole ring through one NIC. One rank per node (stride 8): all of it on the NIC."""
    lk = Links(8, 450e9, 50e9, "NVLink", "IB", efficiency=1.0, inter_latency_s=0.0)
    s = 64e9
    intra, inter = lk.wire(Collective.all_gather, 1, 64, s)
    assert (intra, inter) == (7 / 8 * s, 7 / 8 * s / 8)
    assert lk.wire(Collective.all_gather, 8, 8, s) == (0.0, 7 / 8 * s)
    t = lk.transfer("dp", Collective.all_gather, 1, 64, s, 0)
    assert t.seconds == pytest.approx(max(7 / 8 * s / 450e9, 7 / 64 * s / 50e9))


def test_ring_latency_grows_with_the_ring():
    """NCCL's ring model (tuning.cc): 8.4 us + 3.4 us per NVLink step + 9.6 us per node
    crossing. FSDP's per-block all-gather over 512 GPUs (64 nodes): 511 steps, 63 across nodes
    = 8.4 + 448 x 3.4 + 63 x 9.6 = 2136.4 us a call, where 8 GPUs pay 8.4 + 7 x 3.4 = 32.2 us;
    a large 2-node all-reduce of 16 ranks: (8.4 + 28 x 3.4 + 2 x 9.6) x 1.9 = 233.32 us."""
    assert ring_latency_s(Collective.all_gather, 512, 64, 2**30) == pytest.approx(2136.4e-6)
    assert ring_latency_s(Collective.all_gather, 8, 1, 2**30) == pytest.approx(32.2e-6)
    assert ring_latency_s(Collective.all_reduce, 16, 2, 2**30) == pytest.approx(233.32e-6)
    assert ring_latency_s(Collective.send_recv, 2, 2, 2**30) == 0.0
    lk = Links(8, 450e9, 50e9, "NVLink", "IB", efficiency=1.0)
    t = lk.transfer("dp", Collective.all_gather, 1, 512, 2**30, 10)
    assert t.nodes == 64
    bandwidth = max(t.intra_bytes / 450e9, t.inter_bytes / 50e9)
    assert t.seconds == pytest.approx(10 * 2136.4e-6 + bandwidth)


def test_mpt13b_fsdp_on_64_gpus_hides_its_collectives_as_on_8():
    """llm-foundry measured MPT-13B at 4792 tokens/s/GPU on 8 H100s and 4800 on 64 (README @
    4952183): with a NIC per GPU the 64-GPU all-gathers fit the compute, the step is about as
    long. What each step still pays: the first block's all-gather and the last block's
    reduce-scatter (one call each, nothing to hide behind) and, for the rest, the compute it
    runs beside slowed by OVERLAP_SLOWDOWN: exposed = edges + hidden x s / (1 + s)."""
    spec = preset("llama-2-13b")
    runs = [
        estimate(spec, TrainingSetup(seq=2048, batch=2, parallel=Parallelism(dp=n, zero=3)), H100)
        for n in (8, 64)
    ]
    share = OVERLAP_SLOWDOWN / (1 + OVERLAP_SLOWDOWN)
    for b in runs:
        assert b.time is not None
        dp = [t for t in b.transfers if t.dimension == "dp"]
        assert {t.window for t in dp} == {Window.forward, Window.backward}
        edges = sum(edge_seconds(t, 1) for t in dp)
        # one call of each kind per micro-batch: 40 layers -> 1/40 of the gathers' and the
        # reduce-scatter's seconds, none of the backward re-gathers'
        calls = {t.collective: t.calls for t in dp}
        assert calls[Collective.all_gather] == calls[Collective.reduce_scatter] == 40
        hidden = sum(t.seconds for t in dp) - edges
        assert b.time.communication_seconds == pytest.approx(edges + hidden * share)
    # the same kernels; the 64-GPU step only updates a smaller optimizer shard
    assert runs[1].time.compute_seconds == runs[0].time.compute_seconds
    assert runs[1].time.total_seconds / runs[0].time.total_seconds < 1.02


def test_activation_offload_hides_each_direction_behind_its_own_pass():
    """save_on_cpu: the saved tensors go down during the forward and come back during the
    backward, each direction on its own PCIe lanes: exposed = m x (max(0, down/link - F) +
    max(0, up/link - B))."""
    spec = preset("llama-3-70b")
    setup = TrainingSetup(
        seq=8192, batch=4, parallel=Parallelism(dp=32, tp=8, zero=1, microbatches=4)
    )
    b = estimate(spec, setup, H100, Options(offload=("activations=cpu",)))
    graph = lower(spec, setup)
    mb = micro_batch(graph, H100, MEGATRON)
    per_mb = b.moved_bytes_per_step / 2 / 4  # each direction, per micro-batch
    link = H100.host_link_bytes_per_s
    expected = 4 * (
        max(0.0, per_mb / link - mb.forward_seconds) + max(0.0, per_mb / link - mb.backward_seconds)
    )
    assert b.time.offload_seconds == pytest.approx(expected, rel=1e-9)
    assert b.time.offload_seconds > 0


def test_fp8_runs_the_block_linears_at_the_fp8_rate_and_nothing_else():
    """fp8-mixed: the block linears' GEMMs at the fp8 peak (x its measured ceiling), the LM
    head and attention in bf16; casts cost HBM time. The step gains less than 2x."""
    spec = preset("llama-3-8b")
    graph = lower(spec, TrainingSetup(seq=8192, precision="fp8-mixed"))
    dtypes = {op.name: op.work.dtype for op in graph.kinds[0].ops if isinstance(op.work, Gemm)}
    assert set(dtypes.values()) == {DType.fp8}
    head = next(op.work for op in graph.epilogue if isinstance(op.work, Gemm))
    assert head.dtype is DType.bf16
    bf16 = estimate(spec, TrainingSetup(seq=8192), H100).time.total_seconds
    fp8 = estimate(spec, TrainingSetup(seq=8192, precision="fp8-mixed"), H100).time.total_seconds
    assert 1.1 < bf16 / fp8 < 1.6


def test_gradient_reduction_travels_in_the_gradient_dtype():
    """ZeRO-1 reduce-scatter: fp32 main grads move 4 bytes per parameter, --grad-dtype bf16
    (Megatron-Bridge's grad_reduce_in_fp32: false) 2."""
    spec = preset("llama-3-8b")
    par = Parallelism(dp=8, zero=1)
    rs = {}
    for grad in (None, DType.bf16):
        b = estimate(spec, TrainingSetup(seq=4096, parallel=par, grad_dtype=grad), H100)
        rs[grad] = next(t for t in b.transfers if t.collective is Collective.reduce_scatter)
    assert rs[None].payload_bytes == 4 * b.params.trainable
    assert rs[DType.bf16].payload_bytes == 2 * b.params.trainable
    assert rs[None].window is Window.last_backward


def test_gemm_utilisation_follows_tiles_waves_and_depth():
    """The tile/wave rule (NVIDIA's Matrix Multiplication guide) and the depth rule fitted to
    DeepGEMM's FP8 table on H800: at M = 4096, N >= 7168 the model is within 4 points of
    every measured depth (k = 512: 30%, 1536: 50%, 2048: 52%, 7168: 66%, 16384: 69%)."""
    assert tile_utilisation(8192, 8192, 8192, 1, 132) == pytest.approx(2048 / (16 * 132))
    measured = {(24576, 1536): 0.50, (32768, 512): 0.30, (7168, 16384): 0.69, (7168, 2048): 0.52}
    for (n, k), eff in measured.items():
        t = gemm_seconds(4096, k, n, 1, DType.fp8, H100)
        model = 2 * 4096 * k * n / t / H100.fp8_flops_per_s
        assert model == pytest.approx(eff, abs=0.04), (n, k)
    k0 = TILE_OVERHEAD_RIDGES * H100.bf16_flops_per_s / H100.memory_bandwidth_bytes_per_s
    assert k0 == pytest.approx(358.5, abs=0.1)
    # tensor parallelism thins the GEMMs: Llama-3-70B's o-projection at tp 8 (k = 1024)
    # runs at a lower fraction of peak than at tp 1 (k = 8192)
    frac = {
        k: 2 * 8192 * k * 8192 / gemm_seconds(8192, k, 8192, 1, DType.bf16, H100)
        for k in (1024, 8192)
    }
    assert frac[1024] < 0.85 * frac[8192]


def test_pipeline_traffic_counts_every_virtual_stage():
    """Interleaved 1F1B: each micro-batch crosses v x pp stage boundaries, so a rank sends
    2 m v activations (forward) and gradients (backward) of T h p / tp (sequence parallel)."""
    spec = preset("llama-3-70b")
    par = Parallelism(tp=8, pp=4, vpp=2, microbatches=8)
    b = estimate(spec, TrainingSetup(seq=4096, parallel=par), H100)
    (pp,) = [t for t in b.transfers if t.dimension == "pp"]
    assert pp.payload_bytes == 2 * 8 * 2 * 4096 * spec.hidden_size * 2 // 8


def test_single_mfu_model_is_still_available():
    """--mfu 0.4: the single-utilisation model -- one micro-batch is 3 x its forward FLOPs at
    40% of the bf16 peak, recompute its extra forward FLOPs at the same rate."""
    spec = preset("gpt2")
    b = estimate(spec, TrainingSetup(seq=1024), H100, Options(recompute="full", mfu=0.4))
    rate = 0.4 * H100.bf16_flops_per_s
    assert math.isclose(b.time.compute_seconds, 3 * b.forward_flops / rate, rel_tol=1e-9)
    assert math.isclose(b.time.recompute_seconds, b.extra_forward_flops / rate, rel_tol=1e-9)


def test_fp8_gemms_on_a_gpu_without_fp8_tensor_cores_run_at_the_16_bit_rate():
    """An A100 has no fp8 tensor cores (its profile has no fp8 peak): fp8-mixed keeps its
    memory, its GEMMs are timed as bf16 GEMMs and it casts nothing (the estimate used to stop
    with "no dense fp8 tensor throughput")."""
    g = Gemm(8192, 4096, 14336, DType.fp8, 1, True, True)
    bf16 = Gemm(8192, 4096, 14336, DType.bf16, 1, True, True)
    assert A100.fp8_flops_per_s <= 0
    assert gemm_pass_seconds(g, A100) == gemm_pass_seconds(bf16, A100)
    assert gemm_pass_seconds(g, H100) != gemm_pass_seconds(bf16, H100)
    spec = preset("llama-3-8b")
    fp8 = estimate(spec, TrainingSetup(seq=2048, precision="fp8-mixed"), A100)
    ref = estimate(spec, TrainingSetup(seq=2048, precision="bf16-mixed"), A100)
    assert fp8.time is not None and ref.time is not None
    assert fp8.time.matmul_seconds == pytest.approx(ref.time.matmul_seconds)


def test_llm_foundry_runs_the_triton_flash_kernel_at_its_own_rate():
    """llm-foundry's MPT benchmark tables ran ``attn_impl: triton`` (its sweep's default until
    2024-03): FlashAttention's Triton kernel, forward 0.37 / backward 0.25 of the A100 peak
    (Triton's regression figures), where FlashAttention-2 reaches 0.70 / 0.60. One causal
    MPT-13B layer at 32K tokens (40 heads of 128): forward 2 x 40 x 32768^2 x 256 FLOPs x
    (half the square + half of each 128-row diagonal block) = (256 + 1) / 512."""
    assert RUNTIMES["llm-foundry"].attention is AttentionKernel.flash1_triton
    w = AttentionWork(40, 32768, 32768, 128, 128, DType.bf16)
    flops = 2 * 40 * 32768 * 32768 * 256 * (256 + 1) / 512
    assert attention_flops(w) == flops
    fwd, bwd = attention_pass_seconds(w, A100, AttentionKernel.flash1_triton)
    assert fwd == pytest.approx(flops / (312e12 * 0.37))
    assert bwd == pytest.approx(2.5 * flops / (312e12 * 0.25))
    fa2_fwd, fa2_bwd = attention_pass_seconds(w, A100, AttentionKernel.flash2)
    # fwd + bwd: (1/0.37 + 2.5/0.25) / (1/0.70 + 2.5/0.60) = 2.27x FlashAttention-2's time
    assert (fwd + bwd) / (fa2_fwd + fa2_bwd) == pytest.approx(2.270, abs=1e-3)
