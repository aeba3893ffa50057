"""Per-rank scratch of torch's own ring attention (context parallelism) on CPU, measured against
memcalc's rule (``memcalc.graph.blocks.ring_attention``), as a table with the error per case.

Each case spawns ``cp`` processes (gloo) that call torch's
``torch/distributed/tensor/experimental/_context_parallel/_attention.py``
``_templated_ring_attention`` and ``_templated_ring_attention_backward`` with the CPU flash kernel
(``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward: the op those templates
are handed on CUDA is ``aten._scaled_dot_product_flash_attention``, same outputs), under the
rotate method and load balancing ``context_parallel`` sets (load balance on for causal
attention, off otherwise: ``_templated_ring_attention`` refuses it without ``is_causal``).
``LiveMemoryTracker`` (``memcalc/measure/tracker.py``) counts live tensor storages -- the CPU
allocator keeps no counters -- and reports, per rank, the forward's and the backward's peak
above their inputs (q, k, v; and out, logsumexp, grad_out) and the bytes each returns.

    PYTHONPATH=src python benchmarks/cp_ring_memory.py          # all cases (about 1 minute)
    PYTHONPATH=src python benchmarks/cp_ring_memory.py --quick  # two cases
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _requires import require

require("torch")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from memcalc.graph.blocks.ring_attention import RingShape, ring_scratch
from memcalc.measure.tracker import LiveMemoryTracker

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

# (cp, rotate, causal, batch, heads, seq_local, head_dim, dtype)
CASES = [
    (2, "allgather", True, 1, 4, 64, 16, "fp32"),
    (2, "alltoall", True, 1, 4, 64, 16, "fp32"),
    (2, "allgather", False, 2, 2, 48, 32, "fp32"),
    (2, "alltoall", False, 2, 2, 48, 32, "fp32"),
    (2, "allgather", True, 1, 8, 128, 32, "bf16"),
    (2, "alltoall", True, 1, 8, 128, 32, "bf16"),
    (4, "allgather", True, 1, 4, 64, 16, "fp32"),
    (4, "alltoall", True, 1, 4, 64, 16, "fp32"),
    (4, "allgather", False, 1, 2, 32, 64, "bf16"),
    (4, "alltoall", False, 1, 2, 32, 64, "bf16"),
    (4, "allgather", True, 2, 2, 96, 32, "bf16"),
    (4, "alltoall", True, 2, 2, 96, 32, "bf16"),
]
QUICK = [CASES[0], CASES[1]]


def _measure_all(rank: int, cases: list, init: str, out: dict) -> None:
    cp = cases[0][0]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=cp)
    for n, case in enumerate(cases):
        out[(n, rank)] = _measure(rank, case)
        dist.barrier()
    dist.destroy_process_group()


def _measure(rank: int, case: tuple) -> tuple[int, int, int, int]:
    from torch.distributed.tensor.experimental._context_parallel import _attention as cpa

    cp, rotate, causal, b, h, s, d, dt = case
    cpa.set_rotate_method(rotate)
    cpa._cp_options.enable_load_balance = causal  # as context_parallel: a balancer only if causal
    group = dist.group.WORLD
    dtype = DTYPES[dt]
    fwd_op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    bwd_op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    torch.manual_seed(rank)
    q, k, v = (torch.randn(b, h, s, d, dtype=dtype) for _ in range(3))
    with LiveMemoryTracker() as tr:
        tr.register((q, k, v))
        base = tr.live_bytes
        tr.reset_peak()
        o, lse = cpa._templated_ring_attention(group, 2, fwd_op, q, k, v, is_causal=causal)
        gc.collect()
        fwd_peak, fwd_held = tr.peak_bytes - base, tr.live_bytes - base
    grad_out = torch.randn_like(o)
    with LiveMemoryTracker() as tr:
        tr.register((q, k, v, o, lse, grad_out))
        base = tr.live_bytes
        tr.reset_peak()
        grads = cpa._templated_ring_attention_backward(
            group, 2, bwd_op, grad_out, "grad_out", q, k, v, o, lse, causal, dropout_p=0.0
        )
        gc.collect()
        bwd_peak, bwd_held = tr.peak_bytes - base, tr.live_bytes - base
        del grads
    return fwd_peak, fwd_held, bwd_peak, bwd_held


def measure(cases: list) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """Per (case index, rank): (forward peak, forward returned, backward peak, backward
    returned) bytes; one set of ``cp`` processes runs every case of that world size."""
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{os.path.join(tmp, 'rdzv')}"
        manager = mp.Manager()
        out = manager.dict()
        mp.spawn(_measure_all, args=(cases, init, out), nprocs=cases[0][0], join=True)
        return dict(out)


def estimate(case: tuple, rank: int) -> tuple[int, int, int, int]:
    cp, rotate, causal, b, h, s, d, dt = case
    shape = RingShape(
        batch=b,
        heads=h,
        kv_heads=h,
        seq=s,
        qk_dim=d,
        v_dim=d,
        itemsize=DTYPES[dt].itemsize,
        lse_heads=h,
    )
    r = ring_scratch(shape, cp=cp, rotate=rotate, causal=causal, rank=rank, device="cpu")
    return r.forward_peak, r.forward_returned, r.backward_peak, r.backward_returned


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two cases only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows, exact, total = [], 0, 0
    cases = QUICK if args.quick else CASES
    for cp in sorted({c[0] for c in cases}):
        group = [c for c in cases if c[0] == cp]
        measured = measure(group)
        for (n, rank), m in sorted(measured.items()):
            case, e = group[n], estimate(group[n], rank)
            total += 1
            exact += m == e
            err = [
                f"{(ee - mm) / mm:+.1%}" if mm else ("0" if ee == 0 else "inf")
                for mm, ee in zip(m, e, strict=True)
            ]
            rows.append((case, rank, m, e, err))
    print(
        "| cp | rotate | causal | b h s_local d dtype | rank | fwd peak meas/est (err) "
        "| fwd out | bwd peak meas/est (err) | bwd out |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for case, rank, m, e, err in rows:
        cp, rotate, causal, b, h, s, d, dt = case
        cells = [f"{mm}/{ee} ({er})" for mm, ee, er in zip(m, e, err, strict=True)]
        print(
            f"| {cp} | {rotate} | {causal} | {b} {h} {s} {d} {dt} | {rank} | "
            + " | ".join(cells)
            + " |"
        )
    print(f"\n{exact}/{total} rank cases exact (forward and backward peak and returned bytes)")
    return 0 if exact == total else 1


if __name__ == "__main__":
    sys.exit(main())
