"""DeepSpeed ZeRO 1 / 2 / 3 x bf16 / fp32 x optimizer offload off / on: memcalc's estimate
against DeepSpeed itself, per rank, on 2 CPU ranks (DeepSpeed's CPU accelerator, gloo, exact
byte counts: ``memcalc measure --zero-engine deepspeed --nproc 2``), as a markdown table.

Each case is a DeepSpeed JSON config: DeepSpeed runs it, and memcalc reads the same JSON
(``--config ds.json``, ``memcalc/configs/deepspeed.py``) into its options. Done means, on every
rank: parameters, gradients and optimizer states exact, stored activations within 1%, the step's
peak within 2%. Two configs: DeepSpeed's defaults (a 5e8-element gradient bucket, which
dominates these small models' peak) and small buckets (``reduce_bucket_size`` and
``stage3_prefetch_bucket_size`` 1e5: several reductions per backward, the peak set by the
model's own bytes). About a minute a case here once DeepSpeed's ops are built (the first run
builds them: minutes).

    DS_BUILD_OPS=0 pip install --no-build-isolation torch==2.13.0 -e '.[deepspeed]'
    PYTHONPATH=src python benchmarks/deepspeed_accuracy.py [--configs defaults,small] [--out F]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _requires import require

require("torch", "transformers", "deepspeed")

from memcalc.estimate import Options
from memcalc.inputs import catalog, keyword_values, with_configs
from memcalc.inputs.read import setup_fields
from memcalc.measure.build import Impl
from memcalc.measure.compare import compare_ranks, estimate_for, estimates_by_rank
from memcalc.measure.distributed.launch import DEEPSPEED_TIMEOUT_S, Request, launch
from memcalc.measure.runner import Measurement
from memcalc.profiles import load_profile
from memcalc.spec.loaders import load_model, training_setup
from memcalc.strategies.offload import Offload
from memcalc.strategies.recompute import Recompute

MODEL = "tests/data/deepspeed/tiny-c.toml"
SEQ = 32
RANKS = 2
ACTIVATION_TOLERANCE = 0.01
PEAK_TOLERANCE = 0.02
CONFIGS = {
    "defaults": {},
    "small": {"reduce_bucket_size": 100_000, "stage3_prefetch_bucket_size": 100_000},
}


def ds_json(stage: int, dtype: str, offload: bool, extra: dict[str, Any]) -> dict[str, Any]:
    """The DeepSpeed config of one case."""
    zero: dict[str, Any] = {"stage": stage, **extra}
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": zero,
    }
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def run_case(cfg: dict[str, Any], tmp: Path) -> list[tuple[int, dict[str, Any]]]:
    """Measure one config on RANKS ranks; each rank's rows. memcalc reads the config as
    ``memcalc estimate --config ds.json --seq SEQ --dp RANKS`` does."""
    path = tmp / "ds.json"
    path.write_text(json.dumps(cfg))
    given = {"model": MODEL, "config": [str(path)], "seq": SEQ, "dp": RANKS}
    values, names = keyword_values(catalog.ESTIMATE, "estimate", given)
    merged, names, said = with_configs(values, names, catalog.ESTIMATE, "estimate")
    assert not said[1:], said  # the "read as" note only: every key is modelled
    offload = tuple(Offload.parse(o) for o in merged["offload"])
    setup = training_setup(**setup_fields(merged))
    spec = load_model(MODEL)
    gpu = load_profile("h100-sxm-80gb")
    options = Options(offload=offload)
    request = Request(spec, setup, Impl.hf, Recompute.none, None, "cpu", 0, offload)
    results = launch(request, RANKS, timeout_s=DEEPSPEED_TIMEOUT_S)
    measurements = [Measurement.from_dict(r) for r in results]
    b = estimate_for(spec, setup, gpu, options, "cpu")
    estimates = estimates_by_rank(b, spec, setup, gpu, options, "cpu")
    ranks = compare_ranks(b, measurements, setup.parallel, estimates)
    return [(r.rank, {row.component: row for row in r.rows}) for r in ranks]


def verdict(rows: dict[str, Any]) -> bool:
    states = all(
        rows[c].estimate_bytes == rows[c].measured_bytes
        for c in ("parameters", "gradients", "optimizer states")
    )
    acts = abs(rows["stored activations"].error) <= ACTIVATION_TOLERANCE
    return states and acts and abs(rows["peak of the step"].error) <= PEAK_TOLERANCE


def table_row(case: str, rank: int, rows: dict[str, Any]) -> str:
    def pair(c: str) -> str:
        r = rows[c]
        same = "=" if r.estimate_bytes == r.measured_bytes else "!="
        return f"{r.estimate_bytes:,} {same} {r.measured_bytes:,}"

    acts, peak = rows["stored activations"], rows["peak of the step"]
    return (
        f"| {case} | {rank} | {pair('parameters')} | {pair('gradients')} "
        f"| {pair('optimizer states')} | {acts.error:+.2%} | {peak.estimate_bytes:,} "
        f"| {peak.measured_bytes:,} | {peak.error:+.2%} | {'ok' if verdict(rows) else 'FAIL'} |"
    )


HEADER = (
    "| case (config, ZeRO, dtype, offload) | rank | parameters est = meas | gradients est = meas "
    "| optimizer states est = meas | activations error | peak est | peak measured "
    "| peak error | |\n|---|---|---|---|---|---|---|---|---|---|"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--stages", default="1,2,3")
    ap.add_argument("--dtypes", default="bf16,fp32", help="bf16, fp32 or both")
    ap.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = ap.parse_args(argv)
    lines, ok = [HEADER], True
    grid = itertools.product(
        args.configs.split(","),
        map(int, args.stages.split(",")),
        args.dtypes.split(","),
        (False, True),
    )
    for config, stage, dtype, offload in grid:
        case = f"{config}, {stage}, {dtype}, {'cpu' if offload else '-'}"
        with tempfile.TemporaryDirectory() as tmp:
            measured = run_case(ds_json(stage, dtype, offload, CONFIGS[config]), Path(tmp))
        for rank, rows in measured:
            lines.append(table_row(case, rank, rows))
            ok &= verdict(rows)
            print(lines[-1], flush=True)
    table = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(table)
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
