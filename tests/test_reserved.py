"""``fits`` judged on reserved memory: the estimate, its JSON and the command line's
``--alloc-conf`` / ``PYTORCH_CUDA_ALLOC_CONF``."""

from __future__ import annotations

import json

import pytest

from memcalc.cli import main
from memcalc.estimate import Options, estimate
from memcalc.profiles import load_profile
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _strategies(out: str) -> list[dict[str, object]]:
    return json.loads(out)["strategies"]  # type: ignore[no-any-return]


def test_json_reports_reserved_per_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    """Replayed strategies carry reserved, fragmentation and retries; offloads are not
    replayed and say why."""
    code, out, _ = run(capsys, "estimate", "--format", "json")
    assert code == 0
    rows = {s["strategy"]: s for s in _strategies(out)}
    none = rows["none"]
    assert none["reserved_not_modelled"] is None
    assert none["reserved_peak_bytes"] >= none["peak_bytes"] - none["overhead_bytes"]
    assert none["fragmentation_bytes"] >= 0 and none["alloc_retries"] == 0
    assert none["options"]["headroom"] == 0.0
    assert none["headroom_bytes"] == (
        none["gpu_memory_bytes"] - none["reserved_peak_bytes"] - none["overhead_bytes"]
    )
    off = rows["offload optimizer=cpu"]
    assert off["reserved_peak_bytes"] is None
    assert off["reserved_not_modelled"] == "offload is not in the event model yet"
    assert off["options"]["headroom"] == 0.1


def test_alloc_conf_flag_and_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flag in PYTORCH_CUDA_ALLOC_CONF syntax changes the replay; without it the
    variable's value is read, as torch reads it; the flag wins."""
    args = ("estimate", "--model", "llama-2-7b", "--seq", "4096", "--recompute", "full")

    def reserved(*extra: str) -> int:
        code, out, _ = run(capsys, *args, *extra, "--format", "json")
        assert code == 0
        return int(_strategies(out)[0]["reserved_peak_bytes"])  # type: ignore[call-overload]

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    default = reserved()
    grown = reserved("--alloc-conf", "expandable_segments:True")
    assert grown != default
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert reserved() == grown
    assert reserved("--alloc-conf", "expandable_segments:False") == default


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("foo:1", "error: --alloc-conf: unknown key 'foo'; torch accepts:"),
        ("max_split_size_mb:4", "error: --alloc-conf: max_split_size_mb: must be >= 20 (MiB)"),
    ],
)
def test_alloc_conf_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    code, out, err = run(capsys, "estimate", "--alloc-conf", value)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1


def test_fits_after_cache_flushes() -> None:
    """TinyLlama-1.1B, b4 s2048, every-5 recompute on an RTX 4090: the step's reserved demand
    is above what the device leaves, but torch's release-and-retry path finishes it (one
    num_alloc_retries a step), so it fits; the allocated peak alone would have been refused
    by the 10% reserve."""
    b = estimate(
        preset("tinyllama-1.1b"),
        TrainingSetup(batch=4, seq=2048),
        load_profile("rtx-4090-24gb"),
        Options(recompute="every-k", every=5),
    )
    r = b.reserved
    assert r.modelled and r.demand is not None and r.bounded is not None
    assert r.demand.reserved_peak_bytes + b.overhead_bytes > b.gpu.memory_bytes
    assert b.fits and r.alloc_retries == 1 and not r.out_of_memory
    assert b.peak_bytes > 0.9 * b.gpu.memory_bytes


def test_explicit_headroom_applies_to_the_replay() -> None:
    """--headroom stays a user margin: 10% on a replayed step shrinks what the allocator may
    obtain, and the same step no longer fits."""
    args = (preset("tinyllama-1.1b"), TrainingSetup(batch=4, seq=2048), load_profile("4090"))
    b = estimate(*args, Options(recompute="every-k", every=5, headroom=0.10))
    assert b.headroom_fraction == 0.10 and not b.fits and b.reserved.out_of_memory


def test_api_takes_the_same_allocator_flags(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``alloc_conf`` and ``headroom`` are catalog flags: ``memcalc.estimate`` replays the same
    allocator settings as the command line, byte for byte, and rejects bad ones the same way."""
    import memcalc

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    conf = "expandable_segments:True"
    code, out, _ = run(
        capsys, "estimate", "--recompute", "full", "--alloc-conf", conf, "--format", "json"
    )
    assert code == 0
    cli = _strategies(out)[0]
    b = memcalc.estimate("gpt2", recompute="full", alloc_conf=conf)
    assert b.options.alloc_conf.expandable_segments and b.options.headroom is None
    assert b.reserved.reserved_peak_bytes == cli["reserved_peak_bytes"]
    assert b.headroom_fraction == 0.0
    fixed = memcalc.estimate("gpt2", recompute="full", alloc_conf=conf, headroom="5%")
    assert fixed.headroom_fraction == 0.05
    with pytest.raises(memcalc.MemcalcError, match="--alloc-conf: unknown key 'foo'"):
        memcalc.estimate("gpt2", alloc_conf="foo:1")
