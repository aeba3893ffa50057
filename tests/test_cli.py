"""The command line: README examples, formats, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from conftest import run_cli
from memcalc.cli import main
from memcalc.params import count_params
from memcalc.spec.presets import preset


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_default_estimate_prints_every_strategy(capsys):
    code, out, _ = run(capsys, "estimate")
    assert code == 0
    for strategy in (
        "none",
        "selective",
        "full",
        "every-3",
        "offload optimizer=cpu",
        "offload activations=cpu",
    ):
        assert strategy in out
    assert "GiB" in out


def test_json_is_stable_and_in_integer_bytes(capsys):
    code, out, _ = run(
        capsys,
        "estimate",
        "--model",
        "llama-2-7b",
        "--gpu",
        "h100-sxm-80gb",
        "--seq",
        "4096",
        "--batch",
        "1",
        "--format",
        "json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["parameter_count"] == count_params(preset("llama-2-7b")).total
    first = data["strategies"][0]
    for key in (
        "parameter_bytes",
        "gradient_bytes",
        "optimizer_bytes",
        "activation_bytes",
        "peak_bytes",
        "host_bytes",
        "moved_bytes_per_step",
        "extra_forward_flops",
    ):
        assert isinstance(first[key], int), key
    # bf16-mixed AdamW: 2 + 4 + 12 bytes per parameter (Megatron's 18); the step counters of
    # the default (non-fused) AdamW are CPU tensors, not GPU memory.
    p = data["parameter_count"]
    assert first["parameter_bytes"] == 2 * p
    assert first["gradient_bytes"] == 4 * p
    assert first["optimizer_bytes"] == 12 * p


def test_single_strategy_prints_details_and_assumptions(capsys):
    code, out, _ = run(
        capsys,
        "estimate",
        "--model",
        "gpt2",
        "--recompute",
        "full",
        "--offload",
        "optimizer=cpu",
        "--format",
        "table",
    )
    assert code == 0
    assert "assumptions:" in out and "peak on GPU" in out and "host RAM" in out


@pytest.mark.parametrize("fmt", ["csv", "markdown"])
def test_other_formats(capsys, fmt):
    code, out, _ = run(capsys, "estimate", "--format", fmt, "--unit", "GB")
    assert code == 0
    assert ("peak_bytes" in out) if fmt == "csv" else ("| strategy" in out and "(GB)" in out)


def test_budget_and_every(capsys):
    code, out, _ = run(
        capsys,
        "estimate",
        "--recompute",
        "budget",
        "--budget",
        "1.5GiB",
        "--format",
        "json",
        "--batch",
        "4",
    )
    assert code == 0
    data = json.loads(out)["strategies"][0]
    assert data["activation_bytes"] <= 1.5 * 2**30
    code, out, _ = run(
        capsys, "estimate", "--recompute", "every-k", "--every", "4", "--format", "json"
    )
    assert json.loads(out)["strategies"][0]["checkpoints"] == 3


def test_hf_config_json(capsys, tmp_path):
    cfg = {
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "intermediate_size": 11008,
        "tie_word_embeddings": False,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, _ = run(capsys, "estimate", "--model", str(path), "--format", "json")
    assert code == 0
    assert json.loads(out)["parameter_count"] == 6_738_415_616
    assert json.loads(path.read_text()) == cfg  # user input untouched


def test_spec_toml(capsys, tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(
        'family = "gpt2"\nvocab_size = 50257\nhidden_size = 768\n'
        "num_layers = 12\nnum_heads = 12\nmax_position_embeddings = 1024\n"
    )
    code, out, _ = run(capsys, "estimate", "--model", str(path), "--format", "json")
    assert code == 0 and json.loads(out)["parameter_count"] == 124_439_808


BAD_INPUTS = [
    (["estimate", "--model", "gtp2"], "--model: unknown value 'gtp2'; did you mean 'gpt2'?"),
    (
        ["estimate", "--gpu", "h1000"],
        "--gpu: unknown value 'h1000'; did you mean 'h100-sxm-80gb'? choose one of:",
    ),
    (["estimate", "--optimizer", "adamm"], "'adamm' is not one of"),
    (["estimate", "--precision", "fp64"], "'fp64' is not one of"),
    (["estimate", "--batch", "0"], "--batch: must be at least 1 (1 to 1,000,000,000), got 0"),
    (["estimate", "--seq", "-5"], "--seq: must be at least 1"),
    (["estimate", "--offload", "optimizer=disk"], "--offload WHERE: unknown value 'disk'"),
    (["estimate", "--recompute", "budget"], "--budget: required"),
    (["estimate", "--budget", "lots", "--recompute", "budget"], "--budget: cannot read 'lots'"),
    (["profiles", "show", "nope"], "--gpu: unknown value 'nope'"),
]


@pytest.mark.parametrize("argv,message", BAD_INPUTS)
def test_bad_input_is_one_line_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err + out


@pytest.mark.parametrize(
    "content,suffix,message",
    [
        (
            'family = "gpt2"\nvocab_size = 100\nhidden_size = 64\nnum_layers = 2\nnum_heads = 4\n'
            'colour = "red"\n',
            ".toml",
            "colour: unknown key",
        ),
        (
            'family = "gpt2"\nvocab_size = 100\nhidden_size = 64\nnum_layers = 2\nnum_heads = 5\n',
            ".toml",
            "hidden_size (64) must be divisible by num_heads (5)",
        ),
        (
            'family = "gpt2"\nvocab_size = 100\nhidden_size = 64\nnum_layers = 0\nnum_heads = 4\n',
            ".toml",
            "num_layers: must be at least 1 (1 to 1,000,000), got 0",
        ),
        (
            'family = "bert"\nvocab_size = 100\nhidden_size = 64\nnum_layers = 2\nnum_heads = 4\n',
            ".toml",
            "family: unknown value 'bert'; choose one of: gpt2, llama",
        ),
        ("family = [unclosed", ".toml", "malformed TOML"),
        ('{"model_type": "gpt2", "n_embd": 64,', ".json", "malformed JSON"),
        (
            '{"model_type": "bert", "hidden_size": 64}',
            ".json",
            "model_type: unsupported value 'bert'",
        ),
    ],
)
def test_bad_spec_files(capsys, tmp_path, content, suffix, message):
    path = tmp_path / f"spec{suffix}"
    path.write_text(content)
    code, out, err = run(capsys, "estimate", "--model", str(path))
    assert code == 2, out
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert path.read_text() == content


def test_profiles_and_models_lists(capsys):
    code, out, _ = run(capsys, "profiles", "list")
    assert code == 0 and "h100-sxm-80gb" in out and "mi300x-192gb" in out
    code, out, _ = run(capsys, "profiles", "show", "a100-sxm-80gb")
    assert code == 0 and "source" in out
    code, out, _ = run(capsys, "models", "list")
    assert code == 0 and "6,738,415,616" in out


def test_estimate_never_imports_torch():
    code = (
        "import sys; from memcalc.cli import main; main(['estimate', '--format', 'json']); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "memcalc", "estimate", "--model", "gpt2-medium"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and "gpt2-medium" in out.stdout


def test_side_room_commands_keep_their_exit_codes(capsys):
    code, _, err = run(capsys, "quiz", "--topic", "memory")
    assert code == 2 and err.startswith("error: ")
    code, out, _ = run(capsys, "quiz", "--reveal", "--count", "2", "--seed", "1")
    assert code == 0 and out.strip()


def test_parallel_impl_is_a_deprecated_name_of_the_framework():
    """``--parallel-impl torch`` is ``--framework hf`` (one note on stderr); ``megatron`` is
    ``--framework megatron``; the two flags disagreeing is an error."""
    argv = ["estimate", "--model", "gpt2", "--tp", "2", "--recompute", "full", "--format", "json"]
    new = run_cli(*argv, "--framework", "hf")
    old = run_cli(*argv, "--parallel-impl", "torch")
    assert old.exit_code == new.exit_code == 0
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert "--parallel-impl torch is deprecated: use --framework hf" in old.stderr
    megatron = run_cli(*argv, "--framework", "megatron")
    assert json.loads(megatron.stdout) == json.loads(run_cli(*argv).stdout)  # the tp default
    assert json.loads(megatron.stdout) != json.loads(new.stdout)
    both = run_cli(*argv, "--parallel-impl", "torch", "--framework", "megatron")
    assert both.exit_code == 2 and "disagree" in both.stderr


def test_measure_impl_is_a_deprecated_name_of_the_framework(capsys):
    from memcalc.cli.common import measured_code
    from memcalc.errors import MemcalcError
    from memcalc.frameworks import FrameworkName

    assert measured_code(None, None) == "ours"  # memcalc's reference model by default
    assert measured_code(FrameworkName.hf, None) == "hf"
    assert measured_code(None, "ours") == "ours"
    assert "--impl ours is deprecated: use --framework reference" in capsys.readouterr().err
    assert measured_code(FrameworkName.torchtitan, None) == "torchtitan"
    # Megatron-core: why it cannot run here (cli/common.py MEGATRON_ON_CPU)
    with pytest.raises(MemcalcError, match="measure does not run Megatron-core"):
        measured_code(FrameworkName.megatron, None)


def test_a_gpu_without_nvme_gets_no_nvme_row():
    """The V100 profile's server has no local NVMe: the table leaves optimizer=nvme out (it
    was an error that stopped the whole estimate)."""
    r = run_cli("estimate", "--model", "gpt2", "--gpu", "v100-sxm2-16gb", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = [s["strategy"] for s in json.loads(r.stdout)["strategies"]]
    assert "offload optimizer=cpu" in rows and "offload optimizer=nvme" not in rows
