"""One rank of ``memcalc measure --nproc N``, started by torchrun (``launch.py``).

``python -m memcalc.measure.distributed.worker --request FILE --out DIR``: joins the process
group (gloo on CPU, nccl on CUDA), builds the model with the request's seed (the same weights
and token ids on every rank), applies the recompute strategy and the parallel layout
(``layouts.py``, ``pipeline.py``), runs the runner's protocol (warm-up, then one measured step)
and writes ``DIR/rank<r>.json``: its Measurement, or the one-line error that stopped it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import pickle
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from memcalc.errors import MemcalcError
from memcalc.frameworks import ShardingEngine
from memcalc.measure.build import Impl, build_model
from memcalc.measure.distributed.launch import Request, result_path
from memcalc.measure.distributed.layouts import (
    Applied,
    data_parallel,
    fully_sharded,
    tensor_parallel,
)
from memcalc.measure.runner import (
    Extras,
    Measurement,
    _measure_cpu,
    _measure_cuda,
    _oom_as_error,
    _trainer,
    device_notes,
    token_ids,
)
from memcalc.measure.strategies import apply_strategy, bool_dropout_masks


def run_rank(request: Request, rank: int, local_rank: int) -> Measurement:
    """This rank's Measurement of one training step under ``request``'s layout."""
    spec, setup = request.spec, request.setup
    if setup.sharding_engine is ShardingEngine.deepspeed:
        from memcalc.measure.distributed.deepspeed import run_deepspeed_rank

        return run_deepspeed_rank(request, rank)  # type: ignore[no-any-return]
    par = setup.parallel
    dev = torch.device(f"cuda:{local_rank}" if request.device == "cuda" else "cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if setup.dropout is not None:
        spec, setup = spec.with_dropout(setup.dropout), setup.replace(dropout=None)
    notes = device_notes(spec, setup, dev)
    phase = ["building the model"]
    say = (lambda msg: print(f"[rank {rank}] {msg} ...", file=sys.stderr)) if rank == 0 else None
    if request.impl is Impl.torchtitan:
        from memcalc.measure.torchtitan.step import measure_rank

        with _oom_as_error(phase):
            m = measure_rank(request, dev, phase, say or _quiet)
        label = request.recompute.value
        notes += titan_notes(request)
        return Measurement(
            device=dev.type, impl="torchtitan", strategy=label, notes=tuple(notes), **m
        )
    with (
        _oom_as_error(phase),
        bool_dropout_masks() if dev.type == "cpu" else contextlib.nullcontext(),
    ):
        base = torch.cuda.memory_allocated() if dev.type == "cuda" else 0
        model = build_model(spec, setup, request.impl, dev, request.seed)
        if par.pp > 1:
            from memcalc.measure.distributed.pipeline import measure_stage

            return measure_stage(model, request, spec, setup, rank, dev, notes, phase)
        applied = Applied(model)
        if par.tp > 1:
            applied = tensor_parallel(model, spec, request.impl, par, dev)
        label = apply_strategy(model, request.recompute, every=request.every)
        if par.dp > 1 and par.zero == 0:
            applied = data_parallel(model, par, dev)
        elif par.dp > 1:
            applied = fully_sharded(model, par, dev, setup.precision.is_fsdp_policy)
        notes += applied.notes
        trainer = _trainer(applied.model, setup, offload_optimizer=False)
        ids = token_ids(spec, setup, request.seed, dev)
        context = applied.context() if applied.context else contextlib.nullcontext()
        with context:
            if dev.type == "cuda":
                torch.cuda.synchronize()
                params_b = torch.cuda.memory_allocated() - base
                m = _measure_cuda(
                    trainer, ids, request.recompute, phase, say or _quiet, base, params_b
                )
            else:
                extras = Extras(applied.warmup_steps, applied.live, applied.unsharded)
                m = _measure_cpu(trainer, ids, request.recompute, phase, say or _quiet, extras)
    return Measurement(
        device=str(dev.type), impl=request.impl.value, strategy=label, notes=tuple(notes), **m
    )


def _quiet(_msg: str) -> None:
    pass


def titan_notes(request: Request) -> list[str]:
    """What the torchtitan rank ran differently from a GPU (measure/torchtitan/__init__.py)."""
    fw = request.setup.framework_def
    notes = [
        f"torchtitan {fw.version} on CPU (gloo): its model, parallelize_llama and fused AdamW; "
        "ScaledDotProductAttention (FlexAttention has no CPU backward); FSDP2 reduce-scatter "
        "as SUM (gloo has no PREMUL_SUM)"
    ]
    if fw.grads_kept:
        notes.append(
            "gradients kept across steps (zero_grad(set_to_none=False), as 0.3's CUDA-graphed "
            "trainer); the graphs themselves are CUDA only"
        )
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memcalc.measure.distributed.worker")
    parser.add_argument("--request", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    # our own request, written by launch.py into a private temporary directory
    request: Request = pickle.loads(args.request.read_bytes())
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    result: dict[str, Any] = {"rank": rank}
    code = 0
    try:
        backend = "nccl" if request.device == "cuda" else "gloo"
        dist.init_process_group(backend)
        result["measurement"] = dataclasses.asdict(run_rank(request, rank, local_rank))
    except MemcalcError as e:
        result["error"] = str(e)
        code = 1
    except Exception as e:  # any failure of torch's mechanism: one line to the launcher
        traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0]
        result["error"] = f"rank {rank}: {type(e).__name__}: {first}"
        code = 1
    finally:
        result_path(args.out, rank).write_text(json.dumps(result))
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
