"""Issue 12: every example of its table as a named regression test -- bad input ends in one
``error:`` line naming the field, flag or file and exit code 2; never a traceback, a hang, a
non-finite number, or a value silently accepted. (The ``measure`` examples live with the
measure tests.)"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from conftest import DATA, run_cli

LLAMA = json.loads((DATA / "llama-2-7b-config.json").read_text())
PROFILE = (Path(__file__).parent.parent / "profiles" / "h100-sxm-80gb.toml").read_text()
TINY = (DATA / "tiny-llama.toml").read_text()


def one_error(result, *names: str) -> str:
    """The single ``error:`` line of a run that exited 2, naming each of ``names``."""
    assert result.exit_code == 2, (result.exit_code, result.stdout[-300:], result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for name in names:
        assert name in errors[0], errors[0]
    return errors[0]


def hf_config(tmp_path: Path, **changes: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA | changes))
    return path


def profile_file(tmp_path: Path, field: str, value: str) -> Path:
    lines = [
        f"{field} = {value}" if line.startswith(f"{field} =") else line
        for line in PROFILE.splitlines()
    ]
    path = tmp_path / "gpu.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def spec_file(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def strict_json(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(name)

    return json.loads(text, parse_constant=refuse)


# --- traceback ------------------------------------------------------------------------------


def test_non_utf8_spec_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"model_type": "llama", "name": "\xff\xfe"}')
    one_error(run_cli("estimate", "--model", str(path)), str(path), "UTF-8")


def test_deeply_nested_json(tmp_path):
    path = spec_file(tmp_path, "[" * 100_000, "deep.json")
    one_error(run_cli("estimate", "--model", str(path)), str(path), "nest")


def test_integer_of_5000_digits(tmp_path):
    path = spec_file(
        tmp_path, '{"model_type": "llama", "vocab_size": ' + "9" * 5000 + "}", "big.json"
    )
    one_error(run_cli("estimate", "--model", str(path)), str(path))


def test_unreadable_file(tmp_path, monkeypatch):
    path = spec_file(tmp_path, TINY)
    os.chmod(path, 0)
    if os.access(path, os.R_OK):  # root reads anything: make the read fail as for a user
        real = Path.read_bytes

        def denied(self):
            if self == path:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", denied)
    one_error(run_cli("estimate", "--model", str(path)), str(path), "permission")


def test_path_component_over_255_characters(tmp_path):
    path = tmp_path / ("a" * 300 + ".json")
    one_error(run_cli("estimate", "--model", str(path)), "--model")


def test_directory_as_file(tmp_path):
    path = tmp_path / "adir.json"
    path.mkdir()
    one_error(run_cli("estimate", "--model", str(path)), str(path), "is a directory")


def test_hf_model_type_a_list(tmp_path):
    path = hf_config(tmp_path, model_type=["llama"])
    one_error(run_cli("estimate", "--model", str(path)), str(path), "model_type")


def test_hf_head_dim_a_dict(tmp_path):
    path = hf_config(tmp_path, head_dim={"a": 1})
    one_error(run_cli("estimate", "--model", str(path)), str(path), "head_dim")


def test_budget_1e400():
    one_error(run_cli("estimate", "--recompute", "budget", "--budget", "1e400"), "--budget")


def test_seq_with_200_zeros():
    line = one_error(run_cli("estimate", "--seq", "1" + "0" * 200), "--seq", "1,000,000,000")
    assert len(line) < 300  # the value is shortened, not printed in full


def test_profile_with_denormal_flops(tmp_path):
    path = profile_file(tmp_path, "bf16_flops_per_s", "5e-324")
    one_error(
        run_cli("estimate", "--gpu", str(path), "--recompute", "full"),
        str(path),
        "bf16_flops_per_s",
    )


@pytest.mark.parametrize(
    "shape", ["²x8", "1x", "x8", "0x8", "1x1e400", "-1x8", "1x2x3", "1x" + "9" * 5000]
)
def test_trace_input_shape(shape):
    pytest.importorskip("torch")
    one_error(
        run_cli("trace", str(DATA / "tiny-llama.toml"), "--input-shape", shape), "--input-shape"
    )


# --- hang -----------------------------------------------------------------------------------


@pytest.mark.parametrize("layers", [10**9, 2**63 - 1])
@pytest.mark.parametrize("command", ["estimate", "plan"])
def test_huge_num_layers_in_spec(tmp_path, layers, command):
    path = spec_file(tmp_path, TINY.replace("num_layers = 4", f"num_layers = {layers}"))
    one_error(run_cli(command, "--model", str(path)), str(path), "num_layers", "1,000,000")


def test_huge_num_layers_in_hf_config(tmp_path):
    path = hf_config(tmp_path, num_hidden_layers=10**9)
    one_error(run_cli("estimate", "--model", str(path)), str(path), "num_hidden_layers")


def test_plan_max_gpus_10_to_60():
    one_error(run_cli("plan", "--max-gpus", str(10**60)), "--max-gpus")


# --- exit 0, nonsense ------------------------------------------------------------------------


def test_mfu_1e_320_is_refused():
    one_error(run_cli("estimate", "--mfu", "1e-320", "--format", "json"), "--mfu")


@pytest.mark.parametrize("mfu", ["nan", "inf", "-inf", "0", "1.5", "true"])
def test_mfu_out_of_range(mfu):
    one_error(run_cli("estimate", "--mfu", mfu), "--mfu")


def test_huge_batch_is_refused():
    one_error(run_cli("estimate", "--batch", str(10**9), "--format", "json"), "batch")


def test_tiny_flops_profile_is_refused(tmp_path):
    path = profile_file(tmp_path, "bf16_flops_per_s", "1e-300")
    one_error(run_cli("estimate", "--gpu", str(path), "--format", "json"), str(path))


def test_json_output_is_strict_and_finite():
    result = run_cli("estimate", "--model", "llama-2-7b", "--format", "json")
    assert result.exit_code == 0
    data = strict_json(result.stdout)

    def walk(v):
        if isinstance(v, float):
            assert math.isfinite(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(data)


def test_non_finite_output_is_an_error_not_infinity():
    from memcalc.errors import MemcalcError
    from memcalc.report.finite import dumps

    assert dumps({"a": 1.0}) == '{\n  "a": 1.0\n}'
    with pytest.raises(MemcalcError, match="step_seconds"):
        dumps({"strategies": [{"step_seconds": math.inf}]})


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_profiles_show_infinite_field(tmp_path, value):
    path = profile_file(tmp_path, "fp32_flops_per_s", value)
    one_error(run_cli("profiles", "show", str(path)), str(path), "fp32_flops_per_s")


# --- silently accepted ------------------------------------------------------------------------


def test_bool_num_layers(tmp_path):
    path = spec_file(tmp_path, TINY.replace("num_layers = 4", "num_layers = true"))
    one_error(run_cli("estimate", "--model", str(path)), str(path), "num_layers")


def test_bool_memory_bytes(tmp_path):
    path = profile_file(tmp_path, "memory_bytes", "true")
    one_error(run_cli("estimate", "--gpu", str(path)), str(path), "memory_bytes")


def test_float_num_layers(tmp_path):
    path = spec_file(tmp_path, TINY.replace("num_layers = 4", "num_layers = 4.0"))
    one_error(run_cli("estimate", "--model", str(path)), str(path), "num_layers")


def test_infinite_profile_link(tmp_path):
    path = profile_file(tmp_path, "host_link_bytes_per_s", "inf")
    one_error(
        run_cli("estimate", "--gpu", str(path), "--offload", "optimizer=cpu"),
        str(path),
        "host_link_bytes_per_s",
    )


@pytest.mark.parametrize("value", [0, ""])
def test_hf_kv_heads_zero_or_empty(tmp_path, value):
    path = hf_config(tmp_path, num_key_value_heads=value)
    one_error(run_cli("estimate", "--model", str(path)), str(path), "num_key_value_heads")


@pytest.mark.parametrize("every", ["0", "-0", "-1", "13"])
def test_every_outside_1_to_n(every):
    # gpt2 has 12 blocks: k must be 1..12
    one_error(run_cli("estimate", "--recompute", "every-k", "--every", every), "--every", "12")


def test_conflicting_repeated_offload():
    one_error(
        run_cli("estimate", "--offload", "optimizer=cpu", "--offload", "optimizer=nvme"),
        "--offload",
        "optimizer",
    )


def test_every_without_every_k():
    one_error(run_cli("estimate", "--every", "2"), "--every", "every-k")


def test_mfu_changes_the_strategy_table():
    slow = run_cli("estimate", "--mfu", "0.01", "--format", "json")
    fast = run_cli("estimate", "--mfu", "1", "--format", "json")
    seconds = [
        [s["step_seconds"] for s in json.loads(r.stdout)["strategies"]] for r in (slow, fast)
    ]
    assert all(a > b for a, b in zip(*seconds, strict=True))


# --- vague ------------------------------------------------------------------------------------


def test_missing_gpu_file_names_the_flag_and_the_profiles():
    line = one_error(
        run_cli("estimate", "--gpu", "h100-sxm-80gb.toml"), "--gpu", "h100-sxm-80gb.toml"
    )
    assert "h100" in line.split("h100-sxm-80gb.toml", 1)[1]  # the built-in profiles are listed


def test_more_kv_heads_than_heads(tmp_path):
    path = hf_config(tmp_path, num_key_value_heads=64)
    one_error(run_cli("estimate", "--model", str(path)), str(path), "num_key_value_heads")


# --- other --------------------------------------------------------------------------------------


def test_trace_target_that_exits():
    pytest.importorskip("torch")
    one_error(run_cli("trace", "sys:exit"), "sys:exit")


def test_keyboard_interrupt_is_one_line_and_130(monkeypatch):
    import memcalc.cli.estimate as estimate_cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(estimate_cli, "estimate_inputs", interrupted)
    result = run_cli("estimate")
    assert result.exit_code == 130
    lines = result.stderr.split()
    assert result.stderr.strip().count("\n") == 0 and "interrupted" in result.stderr, lines
    assert "Traceback" not in result.stderr


def test_unexpected_exception_is_a_bug_report_line(monkeypatch):
    import memcalc.cli.estimate as estimate_cli
    from memcalc import __version__

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(estimate_cli, "estimate_inputs", broken)
    monkeypatch.delenv("MEMCALC_DEBUG", raising=False)
    result = run_cli("estimate")
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert (
        __version__ in result.stderr
        and "bug" in result.stderr
        and "ZeroDivisionError" in result.stderr
    )


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback(monkeypatch, how):
    import memcalc.cli.estimate as estimate_cli

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(estimate_cli, "estimate_inputs", broken)
    if how == "env":
        monkeypatch.setenv("MEMCALC_DEBUG", "1")
        result = run_cli("estimate")
    else:
        monkeypatch.delenv("MEMCALC_DEBUG", raising=False)
        result = run_cli("--debug", "estimate")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr
