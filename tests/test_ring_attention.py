"""Context parallelism under torch's ``context_parallel``: the ring-attention scratch rule
(``graph/blocks/ring_attention.py``), its place in the estimate, and one real 2-rank run of
torch's own ring attention on CPU (gloo) compared byte for byte."""

import json
import sys
from pathlib import Path

import pytest

from memcalc import api
from memcalc.cli import main
from memcalc.graph.blocks.ring_attention import RingShape, ring_scratch, worst_rank_scratch

SHAPE = RingShape(batch=1, heads=8, kv_heads=8, seq=256, qk_dim=64, v_dim=64, itemsize=2)
KV = (SHAPE.k + SHAPE.v) * SHAPE.itemsize


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_allgather_materialises_every_ranks_kv(cp):
    # _AllGatherRotater: all_gather_single of the cat([k, v]) buffer, kept to the end
    r = ring_scratch(SHAPE, cp, "allgather", causal=False)
    assert r.forward_peak >= cp * KV
    assert r.backward_peak >= cp * KV


def test_alltoall_ring_does_not_grow_with_cp():
    # _AllToAllRotater: a few K/V buffers in flight whatever the ring's length
    peaks = {cp: ring_scratch(SHAPE, cp, "alltoall", causal=True, rank=1) for cp in (4, 8, 16)}
    assert len({p.forward_peak for p in peaks.values()}) == 1
    assert len({p.backward_peak for p in peaks.values()}) == 1
    assert peaks[16].forward_peak < ring_scratch(SHAPE, 16, "allgather", rank=1).forward_peak


@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
def test_returned_bytes_are_the_kernels_outputs(rotate):
    r = ring_scratch(SHAPE, 4, rotate, causal=True, rank=2)
    assert r.forward_returned == SHAPE.o * 2 + SHAPE.lse * 4  # out (bf16) + logsumexp (fp32)
    assert r.backward_returned == (SHAPE.q + SHAPE.k + SHAPE.v) * 2
    worst = worst_rank_scratch(SHAPE, 4, rotate)
    assert worst.backward_peak >= r.backward_peak


@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
def test_sampled_ranks_find_the_worst_rank(rotate):
    every = [ring_scratch(SHAPE, 40, rotate, causal=True, rank=r) for r in range(40)]
    worst = worst_rank_scratch(SHAPE, 40, rotate)
    assert worst.forward_peak == max(r.forward_peak for r in every)
    assert worst.backward_peak == max(r.backward_peak for r in every)


KW = dict(gpu="h100", seq=65536, batch=1, framework="torchtitan", attention="sdpa", loss="fused")


def _peak(**kw):
    return api.estimate("llama-2-7b", recompute="none", **{**KW, **kw}).peak_bytes


@pytest.mark.slow
def test_estimate_counts_the_ring_on_the_cp_rank():
    base = _peak(cp=8, cp_rotate="alltoall")
    gathered = _peak(cp=8, cp_rotate="allgather")
    assert gathered > base  # the full sequence's K/V on every rank
    assert _peak(cp=1, cp_rotate="alltoall") == _peak(cp=1)  # no CP: nothing moves


def test_megatron_cp_is_not_torchs_ring():
    from memcalc.frameworks import framework

    assert framework("torchtitan").torch_context_parallel
    assert not framework("megatron").torch_context_parallel


def test_bad_rotate_is_one_line_exit_2(capsys):
    code = main(["estimate", "--cp", "2", "--cp-rotate", "ring"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--cp-rotate" in err and "alltoall" in err and "\n" not in err


def test_layout_json_names_the_rotate_method_only_under_cp(capsys):
    for cp, expect in ((1, False), (2, True)):
        main(["estimate", "--seq", "512", "--cp", str(cp), "--format", "json"])
        layout = json.loads(capsys.readouterr().out)["layout"]
        assert ("cp_rotate" in layout) is expect


@pytest.mark.slow
def test_torch_ring_attention_two_ranks_exact():
    """torch's own _templated_ring_attention (+ backward) on 2 gloo ranks: every rank's peak
    and returned bytes, forward and backward, as the rule says."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    import cp_ring_memory as bench

    cases = [
        (2, "alltoall", True, 1, 2, 32, 16, "fp32"),
        (2, "allgather", False, 1, 2, 32, 16, "bf16"),
    ]
    measured = bench.measure(cases)
    for (n, rank), m in measured.items():
        assert m == bench.estimate(cases[n], rank), (cases[n], rank)


def test_torchtitan_toml_sets_the_rotate_method(tmp_path, capsys):
    path = tmp_path / "train.toml"
    path.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\n'
        "seq_len = 8192\n[parallelism]\ndata_parallel_shard_degree = 2\n"
        'context_parallel_degree = 2\ncontext_parallel_rotate_method = "alltoall"\n'
    )
    assert main(["estimate", "--config", str(path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["cp_rotate"] == "alltoall"


def test_rotate_method_is_in_the_lowering_key_under_cp():
    from memcalc.graph.lower import lower, lowering_key
    from memcalc.spec.parallel import Parallelism
    from memcalc.spec.presets import preset
    from memcalc.spec.training import TrainingSetup

    spec = preset("llama-3.2-1b")
    setups = [
        TrainingSetup(batch=1, seq=256, parallel=Parallelism(cp=2, cp_rotate=r))
        for r in ("allgather", "alltoall")
    ]
    assert lowering_key(spec, setups[0], "cuda") != lowering_key(spec, setups[1], "cuda")
    sdpa = [
        next(op for op in lower(spec, s).kinds[0].ops if op.name.endswith("sdpa")) for s in setups
    ]
    assert sdpa[0].backward_scratch > sdpa[1].backward_scratch > 0
