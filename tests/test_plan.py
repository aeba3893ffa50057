"""memcalc plan: the cheapest fitting strategy per GPU count and ZeRO stage."""

import json

from memcalc.cli import main
from memcalc.estimate import Options, estimate
from memcalc.plan import added_seconds, candidate_options, cheapest_fit, plan
from memcalc.profiles import load_profile
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup

GPU = load_profile("h100-sxm-80gb")


def test_cheapest_fit_is_the_minimum_added_time_among_fitting_candidates():
    spec, setup = preset("llama-2-7b"), TrainingSetup(seq=4096)
    candidates = [estimate(spec, setup, GPU, o) for o in candidate_options(spec.num_layers)]
    best = cheapest_fit(candidates)
    assert best is not None and best.fits
    assert all(added_seconds(best) <= added_seconds(b) for b in candidates if b.fits)
    # Plain bf16-mixed AdamW does not fit one H100 (12 + 4 + 2 bytes/param > 80 GB).
    assert not estimate(spec, setup, GPU, Options()).fits


def test_more_gpus_never_cost_more_added_time():
    spec, setup = preset("llama-2-7b"), TrainingSetup(seq=4096)
    rows = {(r.gpus, r.zero): r for r in plan(spec, setup, GPU, [1, 2, 4, 8]).rows}
    assert set(rows) == {(1, 0)} | {(n, z) for n in (2, 4, 8) for z in (1, 2, 3)}
    for z in (1, 2, 3):
        costs = [added_seconds(rows[(n, z)].best) for n in (2, 4, 8)]
        assert costs == sorted(costs, reverse=True)
    # With 8 GPUs and ZeRO-3 no recompute or offload is needed.
    assert rows[(8, 3)].best.strategy == "none"


def test_plan_nothing_fits_is_reported(capsys):
    code = main(
        [
            "plan",
            "--model",
            "llama-2-70b",
            "--gpu",
            "t4-16gb",
            "--max-gpus",
            "2",
            "--precision",
            "fp16-mixed",
            "--format",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert any(not r["fits"] for r in out["plan"])
    assert all(r["strategy"] is None for r in out["plan"] if not r["fits"])
