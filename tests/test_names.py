"""The names people type: preset names in any case, Hugging Face hub ids, near misses; and the
setups a GPU or model cannot run by default (replaced, said so) or that make no sense."""

import json

import pytest

from memcalc.cli import main
from memcalc.spec.names import HUB_IDS, normalized
from memcalc.spec.presets import PRESETS, preset


@pytest.mark.parametrize(
    "typed,name",
    [
        ("llama3-8b", "llama-3-8b"),
        ("LLAMA-3-8B", "llama-3-8b"),
        ("meta-llama/Meta-Llama-3-8B", "llama-3-8b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
    ],
)
def test_typed_names_resolve_to_the_preset(typed, name):
    assert preset(typed).name == name


def test_every_hub_id_and_preset_name_is_unambiguous():
    keys = {}
    for name in PRESETS:
        keys.setdefault(normalized(name), set()).add(name)
    for name, ids in HUB_IDS.items():
        assert name in PRESETS
        for hub_id in ids:
            keys.setdefault(normalized(hub_id), set()).add(name)
    assert all(len(v) == 1 for v in keys.values()), {k: v for k, v in keys.items() if len(v) > 1}


@pytest.mark.parametrize(
    "typed,guess", [("mixtral", "mixtral-8x7b"), ("llama-3-8bb", "llama-3-8b"), ("gtp2", "gpt2")]
)
def test_near_misses_say_did_you_mean(capsys, typed, guess):
    assert main(["estimate", "--model", typed]) == 2
    err = capsys.readouterr().err
    assert f"did you mean {guess!r}?" in err and len(err.strip().splitlines()) == 1


def _json(capsys, argv):
    code = main([*argv, "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out), captured.err


def test_a_gpu_without_bf16_falls_back_to_fp16_and_says_so(capsys):
    out, err = _json(capsys, ["estimate", "--gpu", "t4-16gb"])
    assert out["precision"] == "fp16-mixed"
    assert "note: --precision: using fp16-mixed (NVIDIA T4 16GB has no bf16" in err
    # asked for explicitly, it is an error, not a silent change
    assert main(["estimate", "--gpu", "t4-16gb", "--precision", "bf16-mixed"]) == 2


def test_gemma_2_runs_eager_by_default_as_hf_does_without_sdpa(capsys):
    out, err = _json(capsys, ["estimate", "--model", "gemma-2-9b"])
    assert out["attention"] == "eager"
    assert "note: --attention: using eager" in err


def test_learned_positions_bound_the_sequence(capsys):
    assert main(["estimate", "--model", "gpt2", "--seq", "8192"]) == 2
    assert "over gpt2's 1024 learned positions" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,warning",
    [
        (["--gpus", "8"], "warning: --dp 8 without --zero: plain DDP"),
        (["--zero", "3"], "warning: --zero 3 on one data-parallel GPU shards nothing"),
        (["--model", "llama-3-8b", "--seq", "16384"], "over llama-3-8b's max_position_embeddings"),
    ],
)
def test_setups_a_user_probably_did_not_mean_warn(capsys, argv, warning):
    _, err = _json(capsys, ["estimate", *argv])
    assert warning in err


def test_gpu_memory_and_host_memory_flags(capsys):
    out, _ = _json(capsys, ["estimate", "--gpu-memory", "48GB"])
    assert out["gpu"] == "custom@48GB" and out["gpu_memory_bytes"] == 48 * 10**9
    out, _ = _json(capsys, ["estimate", "--gpu", "a100", "--gpu-memory", "40GiB"])
    assert out["gpu"] == "a100-sxm-80gb@40GiB" and out["gpu_memory_bytes"] == 40 * 2**30
    base = ["estimate", "--model", "llama-2-7b", "--offload", "optimizer=cpu"]
    fits, _ = _json(capsys, base)
    tight, _ = _json(capsys, [*base, "--host-memory", "64GiB"])
    assert fits["strategies"][0]["fits"] and not tight["strategies"][0]["fits"]
    assert tight["strategies"][0]["host_memory_per_node"] == 64 * 2**30


def test_headroom_sets_the_reserve(capsys):
    zero, _ = _json(capsys, ["estimate", "--headroom", "0"])
    ten, _ = _json(capsys, ["estimate", "--headroom", "10%"])
    auto, _ = _json(capsys, ["estimate"])
    assert zero["strategies"][0]["reserve_bytes"] == 0
    assert ten["strategies"][0]["reserve_bytes"] == int(0.1 * ten["gpu_memory_bytes"])
    # auto: none where reserved memory is replayed (no strategy), 10% where not (offload)
    rows = {s["strategy"]: s for s in auto["strategies"]}
    assert rows["none"]["reserve_bytes"] == 0
    assert rows["offload optimizer=cpu"]["reserve_bytes"] == int(0.1 * auto["gpu_memory_bytes"])
    assert main(["estimate", "--headroom", "95%"]) == 2
