"""Issue 25's small defects, each a regression test: the input a new user types, and what
memcalc must answer."""

from __future__ import annotations

import json
import shutil

import pytest

import memcalc
from conftest import DATA, run_cli
from memcalc.advice import LOSS_SHARE, loss_advice
from memcalc.errors import MemcalcError
from memcalc.profiles import load_profile
from memcalc.spec.parallel import Parallelism
from memcalc.spec.presets import PRESETS
from memcalc.units import Unit, parse_size
from test_robust import one_error


@pytest.mark.parametrize("seq", ["1", "3", "8", "16"])
def test_plan_of_a_short_sequence_skips_layouts_that_split_it_to_nothing(seq):
    """Was a ZeroDivisionError in norms.layer_norm: sequence parallelism gave a rank zero
    rows (seq / cp < tp)."""
    result = run_cli(
        "plan", "--model", "gpt2", "--seq", seq, "--max-gpus", "16", "--format", "json"
    )
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["min_gpus"] == {"h100-sxm-80gb": 1}
    for row in record["rows"]:
        layout = row["layout"]
        assert (int(seq) // layout["cp"]) % layout["tp"] == 0, layout


def test_sequence_parallel_split_that_leaves_no_tokens_is_an_error():
    line = one_error(run_cli("estimate", "--seq", "8", "--tp", "4", "--cp", "4"), "--seq")
    assert "tp (4)" in line and "--no-sp" in line
    assert run_cli("estimate", "--seq", "8", "--tp", "4", "--cp", "4", "--no-sp").exit_code == 0


def test_gpus_errors_name_gpus():
    assert "--dp" not in one_error(run_cli("estimate", "--gpus", "-1"), "--gpus")
    one_error(run_cli("estimate", "--dp", "-1"), "--dp")
    one_error(run_cli("estimate", "--gpus", "2", "--dp", "4"), "--gpus", "--dp")
    with pytest.raises(MemcalcError, match="^--gpus: must be at least 1"):
        memcalc.estimate("gpt2", gpus=0)
    assert memcalc.estimate("gpt2", gpus=4, zero=1).setup.parallel.dp == 4


@pytest.mark.parametrize("model", ["../gpt2", "./gpt2", "models/../gpt2", "/no/such/gpt2"])
def test_a_path_is_never_read_as_a_preset(model):
    line = one_error(run_cli("estimate", "--model", model), "--model")
    assert "no such file or folder" in line or "no such" in line


def test_a_folder_with_a_config_json_is_read(tmp_path):
    folder = tmp_path / "my-llama"
    folder.mkdir()
    shutil.copy(DATA / "llama-2-7b-config.json", folder / "config.json")
    result = run_cli("estimate", "--model", str(folder), "--recompute", "full", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["parameter_count"] == 6_738_415_616


@pytest.mark.parametrize(("flag", "value"), [("--gpu-memory", "48"), ("--host-memory", "512")])
def test_a_size_without_a_unit_suggests_one(flag, value):
    line = one_error(run_cli("estimate", flag, value), flag)
    assert f"did you mean {value}GB or {value}GiB?" in line
    assert parse_size("2097152", flag) == 2**21  # a bare number of bytes still reads


@pytest.mark.parametrize(("text", "tokens"), [("4k", 4096), ("4K", 4096), ("128k", 131072)])
def test_seq_takes_k_as_people_write_context_lengths(text, tokens):
    assert memcalc.estimate("llama-3-8b", seq=text).setup.seq == tokens
    result = run_cli(
        "estimate",
        "--model",
        "llama-3-8b",
        "--seq",
        text,
        "--recompute",
        "none",
        "--format",
        "json",
    )
    assert json.loads(result.stdout)["seq"] == tokens


def test_seq_refuses_what_is_not_a_token_count():
    result = run_cli("estimate", "--seq", "4x")
    assert result.exit_code == 2 and "not a whole number of tokens" in result.stderr


def test_one_gpu_and_one_rank_are_singular():
    assert Parallelism().describe() == "1 GPU: dp 1"
    assert Parallelism(dp=2, tp=2).describe().startswith("4 GPUs")
    with pytest.raises(MemcalcError, match="inside the 1 data-parallel rank "):
        Parallelism(ep=2)


def test_profiles_show_fits_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "50")
    out = run_cli("profiles", "show", "h100-sxm-80gb").stdout
    assert max(len(line) for line in out.splitlines()) <= 50
    assert "NVIDIA H100 SXM5" in out
    monkeypatch.setenv("COLUMNS", "200")
    wide = run_cli("profiles", "show", "h100-sxm-80gb").stdout
    assert len(wide.splitlines()) < len(out.splitlines())


@pytest.mark.hf
def test_trace_fits_columns_and_warns_past_the_positions(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("COLUMNS", "64")
    spec = str(DATA / "tiny-llama.toml")  # max_position_embeddings 2048 (the default)
    result = run_cli("trace", spec, "--input-shape", "1x4096", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 64
    warnings = [w for w in result.stderr.splitlines() if "max_position_embeddings" in w]
    assert warnings == [
        "warning: --input-shape: sequence 4096 is over tiny-llama's max_position_embeddings "
        "(2048): it was not trained on positions past them"
    ]
    quiet = run_cli("trace", spec, "--input-shape", "1x64", "--quiet")
    assert "max_position_embeddings" not in quiet.stderr


def test_the_loss_dominating_the_peak_suggests_a_fused_loss():
    """LoRA on Gemma 3 (262k vocabulary) at 4096 tokens: the fp32 logits are half the peak."""
    args = ["--model", "gemma-3-4b", "--gpu", "4090", "--seq", "4096", "--lora-rank", "16"]
    result = run_cli("estimate", *args, "--recompute", "full")
    notes = [n for n in result.stderr.splitlines() if n.startswith("note: --loss")]
    standard = memcalc.estimate("gemma-3-4b", gpu="4090", seq=4096, lora_rank=16, recompute="full")
    fused = memcalc.estimate(
        "gemma-3-4b", gpu="4090", seq=4096, lora_rank=16, recompute="full", loss="fused"
    )
    saved = standard.peak_bytes - fused.peak_bytes
    assert saved >= LOSS_SHARE * standard.peak_bytes
    assert len(notes) == 1, result.stderr
    assert f"set {saved / 2**30:.2f} of the {standard.peak_bytes / 2**30:.2f} GiB peak" in notes[0]
    assert f"peak {fused.peak_bytes / 2**30:.2f} GiB" in notes[0]
    assert "--loss fused" in notes[0] and "Liger" in notes[0] and "chunked" in notes[0]
    assert "note: --loss" not in run_cli("estimate", *args, "--loss", "fused").stderr


def test_no_loss_advice_where_the_loss_is_small():
    b = memcalc.estimate("llama-3-8b", seq=1024)
    assert loss_advice(PRESETS["llama-3-8b"], b.setup, load_profile("h100"), [b], Unit.GiB) is None


def test_header_states_total_parameters_and_the_ranks_share():
    args = [
        "--model",
        "llama-3-70b",
        "--seq",
        "8192",
        "--tp",
        "8",
        "--pp",
        "4",
        "--dp",
        "2",
        "--microbatches",
        "16",
        "--zero",
        "1",
    ]
    out = run_cli("estimate", *args).stdout
    # the rank's share under Megatron (the --tp default): the vocabulary padded to a multiple of
    # 128 x tp (vocab_size_with_padding): 128,256 -> 129,024 rows, 96 more per rank x 8,192
    share = 2_270_756_864 + (129_024 - 128_256) // 8 * 8192
    assert out.startswith(f"llama-3-70b (70,553,706,496 parameters; {share:,} on this rank)")
    single = run_cli("estimate", "--model", "llama-3-70b").stdout
    assert single.startswith("llama-3-70b (70,553,706,496 parameters) on")


def test_header_counts_adapters_in_the_total():
    b = memcalc.estimate("llama-3-8b", lora_rank=16, tp=2)
    whole = memcalc.estimate("llama-3-8b", lora_rank=16)
    assert b.model_parameter_count == whole.params.total > b.params.total


def test_a_hub_like_name_that_is_no_preset_says_what_to_pass():
    line = one_error(run_cli("estimate", "--model", "Llama-4-Scout-17B-16E"), "--model")
    assert "meta-llama/Llama-4-Scout-17B-16E" in line and "config.json" in line
    line = one_error(run_cli("estimate", "--model", "gtp2"), "--model")
    assert "did you mean 'gpt2'" in line and "hub id" in line
