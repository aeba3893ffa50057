"""Estimate vs measured per rank under torchrun (2 ranks, gloo, exact CPU byte counts) for DDP,
FSDP2, DTensor tensor parallelism and torch.distributed.pipelining, as a markdown table: the
"Parallel layouts, per rank" part of the README's "How accurate is it?" (about 3 minutes on a
2-core machine; each row is what ``memcalc measure --nproc 2 ...`` prints for that rank).

    PYTHONPATH=src python benchmarks/distributed_accuracy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _requires import require

require("torch")

from memcalc.estimate import Options
from memcalc.measure.build import Impl
from memcalc.measure.compare import compare_ranks, estimate_for
from memcalc.measure.distributed.launch import Request, launch
from memcalc.measure.distributed.layouts import mechanism
from memcalc.measure.runner import Measurement
from memcalc.profiles import load_profile
from memcalc.spec.loaders import load_model
from memcalc.spec.model import ModelSpec
from memcalc.spec.parallel import Parallelism
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute

LLAMA = load_model("tests/data/tiny-llama.toml")
GPT2 = ModelSpec(
    name="tiny-gpt2",
    family="gpt2",
    vocab_size=256,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    max_position_embeddings=64,
    embedding_dropout=0.1,
    attention_dropout=0.1,
    residual_dropout=0.1,
)
CASES = [
    # (spec, impl, precision, attention, recompute, layout)
    (LLAMA, Impl.ours, "fp32", "sdpa", Recompute.none, Parallelism(dp=2)),
    (LLAMA, Impl.ours, "fp32", "sdpa", Recompute.none, Parallelism(dp=2, bucket_view=True)),
    (LLAMA, Impl.ours, "fp32", "sdpa", Recompute.none, Parallelism(dp=2, zero=3)),
    (LLAMA, Impl.ours, "bf16", "sdpa", Recompute.full, Parallelism(dp=2, zero=3)),
    (
        LLAMA,
        Impl.ours,
        "fp32",
        "sdpa",
        Recompute.none,
        Parallelism(dp=2, zero=3, fsdp_reshard=False),
    ),
    (LLAMA, Impl.ours, "fp32", "sdpa", Recompute.none, Parallelism(tp=2)),
    (LLAMA, Impl.ours, "fp32", "eager", Recompute.selective, Parallelism(tp=2, sp=False)),
    (LLAMA, Impl.ours, "fp32", "sdpa", Recompute.none, Parallelism(pp=2, microbatches=4)),
    (LLAMA, Impl.hf, "bf16", "sdpa", Recompute.none, Parallelism(dp=2, zero=3)),
    (LLAMA, Impl.hf, "fp32", "sdpa", Recompute.none, Parallelism(tp=2)),
    (GPT2, Impl.ours, "fp32", "eager", Recompute.none, Parallelism(dp=2)),
    (GPT2, Impl.hf, "bf16", "eager", Recompute.none, Parallelism(dp=2, zero=3)),
    (GPT2, Impl.ours, "fp32", "eager", Recompute.none, Parallelism(pp=2, microbatches=2)),
]
COMPONENTS = (
    "parameters",
    "gradients",
    "optimizer states",
    "stored activations",
    "peak of the step",
)


def _cell(estimate: int | None, measured: int | None, error: float | None) -> str:
    if measured is None:
        return "-"
    return f"{measured:,} ({'-' if error is None else f'{error:+.1%}'})"


def main() -> None:
    gpu = load_profile("h100-sxm-80gb")
    print(
        "| model | impl | precision | attention | recompute | layout (torch mechanism) | rank "
        "| " + " | ".join(COMPONENTS) + " |"
    )
    print("|" + "---|" * (7 + len(COMPONENTS)))
    for spec, impl, precision, attention, recompute, par in CASES:
        setup = TrainingSetup(
            batch=2, seq=32, precision=precision, attention=attention, parallel=par
        )
        results = launch(Request(spec, setup, impl, recompute), par.world_size)
        measurements = [Measurement.from_dict(r) for r in results]
        b = estimate_for(spec, setup, gpu, Options(recompute=recompute), "cpu")
        for rank in compare_ranks(b, measurements, par):
            rows = {r.component: r for r in rank.rows}
            cells = [_cell(*_values(rows[c])) for c in COMPONENTS]
            where = f"{rank.rank}" + (f" ({rank.stage.split(' (')[0]})" if rank.stage else "")
            print(
                f"| {spec.name} b2 s32 | {impl.value} | {precision} | {attention} "
                f"| {recompute.value} | {mechanism(par)} | {where} | " + " | ".join(cells) + " |",
                flush=True,
            )


def _values(row: object) -> tuple[int | None, int | None, float | None]:
    return row.estimate_bytes, row.measured_bytes, row.error  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
