"""memcalc measure, safe and honest by default (issue 13; the measure rows of issue 12): the CPU
comparison is against the CPU's kernels with the GPU estimate beside it; what does not fit is
refused before anything is built; devices, flags, allocator failures and Ctrl-C end in one
line; progress goes to stderr."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import DATA, run_cli  # noqa: E402
from memcalc.measure import preflight  # noqa: E402
from memcalc.measure.progress import Mode, Progress  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = str(DATA / "tiny-llama.toml")
SMALL = ("--model", TINY, "--batch", "2", "--seq", "32", "--device", "cpu")
GIB = 2**30


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


# ---------------------------------------------------------------------------------------------
# 1. On CPU: the estimate of what the CPU runs, the GPU estimate beside it


TINY_GPT2 = """
family = "gpt2"
name = "tiny-gpt2"
vocab_size = 256
hidden_size = 64
num_layers = 4
num_heads = 4
max_position_embeddings = 64
embedding_dropout = 0.1
attention_dropout = 0.1
residual_dropout = 0.1
"""


def test_dropout_with_sdpa_is_ok_on_cpu_and_shows_the_gpu_estimate(tmp_path):
    """GPT-2 has dropout 0.1 and measure defaults to SDPA: on CPU that is torch's math kernel,
    which keeps fp32 s x s scores; the comparison is against it (every row ok) and the GPU
    estimate, without them, is shown beside it (what ``memcalc measure`` with no arguments
    runs, at 1/12 of GPT-2's width)."""
    spec = tmp_path / "tiny-gpt2.toml"
    spec.write_text(TINY_GPT2)
    argv = ("--model", str(spec), "--seq", "64", "--device", "cpu", "--format", "json")
    r = run_cli("measure", *argv)
    assert r.exit_code == 0, r.stderr + r.stdout
    report = json.loads(r.stdout)
    assert report["ok"] is True
    rows = {row["component"]: row for row in report["rows"]}
    assert all(abs(row["error"]) <= 0.03 for row in rows.values() if row["checked"]), rows
    acts = rows["stored activations"]
    scores = 1 * 4 * 64 * 64 * 4  # b a s s, fp32
    assert acts["estimate_bytes"] == acts["measured_bytes"]
    assert acts["estimate_bytes"] - acts["gpu_estimate_bytes"] >= 3 * scores * 4
    assert rows["parameters"]["gpu_estimate_bytes"] == rows["parameters"]["measured_bytes"]
    assert (report["model"], report["batch"], report["seq"]) == ("tiny-gpt2", 1, 64)
    table = run_cli("measure", *argv[:-2])
    assert table.stdout.splitlines()[1].split()[-3:] == ["gpu", "estimate", "(bytes)"]


@pytest.mark.slow
def test_measure_with_no_arguments_exits_0_with_every_component_ok():
    """The first ``memcalc measure`` a user runs (gpt2, b1 s512, fp32, SDPA, dropout 0.1)."""
    if torch.cuda.is_available():
        pytest.skip("no arguments measures on the GPU here")
    r = run_cli("measure")
    assert r.exit_code == 0, r.stdout
    body = r.stdout.splitlines()[3:8]
    assert all(line.split()[-2] == "ok" for line in body), r.stdout
    assert "gpu estimate (bytes)" in r.stdout


def test_header_names_model_impl_device_batch_seq_precision_strategy():
    r = run_cli("measure", *SMALL, "--recompute", "full", "--quiet")
    assert r.exit_code == 0, r.stdout
    assert r.stdout.splitlines()[0] == (
        "tiny-llama (ours) on cpu: batch 2, seq 32, fp32, sdpa attention, adamw, "
        "recompute full; tolerance 3%"
    )


# ---------------------------------------------------------------------------------------------
# 2. Preflight: the estimated need against the memory available


def _never_built(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the model was built although the run does not fit")

    monkeypatch.setattr("memcalc.measure.runner.build_model", fail)


def test_llama_2_7b_is_refused_before_building(monkeypatch):
    """README's old example (7B in fp32 on a CPU: killed by the OOM killer after 80 s) is refused
    at once with both numbers: 4 bytes per parameter just to build it, 16 to train it."""
    _never_built(monkeypatch)
    monkeypatch.setattr(preflight, "host_available_bytes", lambda: 20 * GIB)
    start = time.monotonic()
    model = str(DATA / "llama-2-7b-config.json")
    r = run_cli("measure", "--model", model, "--framework", "hf", "--device", "cpu")
    assert time.monotonic() - start < 30
    assert r.exit_code == 2
    line = _one_error_line(r.stderr)
    assert line.startswith("error: does not fit: the estimated need on the host is ")
    assert "20.00 GiB is available in RAM on this host" in line, line
    assert "--force" in line


def test_force_runs_what_the_check_would_refuse(monkeypatch):
    monkeypatch.setattr(preflight, "host_available_bytes", lambda: 1024)
    refused = run_cli("measure", *SMALL)
    assert refused.exit_code == 2
    assert "0.0 MiB is available in RAM" in _one_error_line(refused.stderr)
    forced = run_cli("measure", *SMALL, "--force")
    assert forced.exit_code == 0, forced.stderr
    assert "note: --force: run although the estimated need on the host is" in forced.stdout


def test_cuda_need_is_checked_against_free_device_memory(monkeypatch):
    """On CUDA the step's peak is compared with ``torch.cuda.mem_get_info``'s free bytes."""
    monkeypatch.setattr(preflight, "host_available_bytes", lambda: 64 * GIB)
    monkeypatch.setattr(preflight, "device_free_bytes", lambda dev: 10 * GIB)
    need = preflight.need_for(12 * GIB, 0, 1000, torch.device("cuda", 0))
    with pytest.raises(preflight.MemcalcError) as e:
        preflight.check_memory(need, force=False)
    assert "on the GPU is 12.00 GiB (13.20 GiB with a 10% margin)" in str(e.value)
    assert "10.00 GiB is free on cuda:0" in str(e.value)
    fits = preflight.need_for(9 * GIB, 0, 1000, torch.device("cuda", 0))
    assert preflight.check_memory(fits, force=False) == []


def test_host_available_bytes_is_at_most_what_the_kernel_reports():
    available = preflight.host_available_bytes()
    assert available is not None and 0 < available
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        line = next(x for x in meminfo.read_text().splitlines() if x.startswith("MemAvailable"))
        assert available <= int(line.split()[1]) * 1024


# ---------------------------------------------------------------------------------------------
# 3. Devices, allocator failures, flags, Ctrl-C: one line


DEVICES = ["cuda", "cuda:7", "mps", "tpu", "foo", "meta", "xla:0"]


# ids without "cuda": conftest skips every test with a ``cuda`` keyword on a machine without one
@pytest.mark.parametrize("device", DEVICES, ids=[f"device-{i}" for i in range(len(DEVICES))])
def test_unavailable_devices_are_one_line(device):
    if device.startswith("cuda") and torch.cuda.is_available() and device == "cuda":
        pytest.skip("this machine has CUDA")
    r = run_cli("measure", "--model", TINY, "--device", device)
    assert r.exit_code == 2
    assert _one_error_line(r.stderr).startswith(f"error: --device {device.split(':')[0]}")


CPU_MALLOC_FAILED = (
    "[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: not enough memory: "
    "you tried to allocate 1073741824 bytes."
)


def test_host_allocator_failure_is_the_does_not_fit_report(monkeypatch):
    def build(*args, **kwargs):
        raise RuntimeError(CPU_MALLOC_FAILED)

    monkeypatch.setattr("memcalc.measure.runner.build_model", build)
    r = run_cli("measure", *SMALL, "--quiet")
    assert r.exit_code == 2
    assert _one_error_line(r.stderr) == (
        "error: does not fit: out of host memory at building the model "
        "(an allocation of 1,073,741,824 bytes failed)"
    )


def test_cuda_out_of_memory_is_the_does_not_fit_report(monkeypatch):
    def forward(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr("memcalc.measure.runner.forward_loss", forward)
    r = run_cli("measure", *SMALL, "--quiet")
    assert r.exit_code == 2
    assert _one_error_line(r.stderr) == "error: does not fit: out of memory at forward"


BAD_FLAGS = [
    (("--tolerance", "0"), "--tolerance"),
    (("--tolerance", "-1"), "--tolerance"),
    (("--tolerance", "nan"), "--tolerance"),
    (("--tolerance", "inf"), "--tolerance"),
    (("--tolerance", "1.5"), "--tolerance"),
    (("--batch", "0"), "--batch"),
    (("--batch", str(10**30)), "--batch"),
    (("--seq", "-3"), "--seq"),
    (("--seed", "-1"), "--seed"),
    (("--seed", str(10**30)), "--seed"),
    (("--every", "2"), "--every"),
    (("--every", "0", "--recompute", "every-k"), "--every"),
    (("--every", "9", "--recompute", "every-k"), "--every"),
    (("--recompute", "budget"), "--recompute"),
    (("--dropout", "nan"), "--dropout"),
    (("--dropout", "1.5"), "--dropout"),
    (("--timeout", "nan", "--nproc", "2", "--dp", "2"), "--timeout"),
    (("--offload", "activations=cpu"), "--offload"),
]


@pytest.mark.parametrize(("argv", "flag"), BAD_FLAGS)
def test_bad_measure_flags_are_one_line_exit_2(argv, flag, monkeypatch):
    _never_built(monkeypatch)
    r = run_cli("measure", "--model", TINY, "--device", "cpu", *argv)
    assert r.exit_code == 2, r.stdout
    assert flag in _one_error_line(r.stderr)


def test_fp8_mixed_is_refused_naming_the_precisions_measure_runs(monkeypatch):
    _never_built(monkeypatch)
    r = run_cli("measure", *SMALL, "--precision", "fp8-mixed")
    assert r.exit_code == 2
    line = _one_error_line(r.stderr)
    assert line.startswith("error: --precision fp8-mixed: not measured")
    assert line.endswith(
        "choose one of: fp32, bf16, fp16, bf16-mixed, fp16-mixed, amp-bf16, amp-fp16, fsdp-bf16"
    )


def test_ctrl_c_in_measure_is_one_line_exit_130(monkeypatch):
    def build(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("memcalc.measure.runner.build_model", build)
    r = run_cli("measure", *SMALL)
    assert r.exit_code == 130
    assert r.stderr.splitlines()[-1] == (
        "interrupted: memcalc measure stopped at building the model (Ctrl-C)"
    )
    assert "Traceback" not in r.stderr


def _interrupt(argv: list[str], wait_for: str, cwd: Path, prelude: str = "") -> tuple[int, str]:
    """Run memcalc in a real process, send SIGINT once ``wait_for`` is on its stderr."""
    code = f"{prelude}\nfrom memcalc.cli import main\nraise SystemExit(main({argv!r}))"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=cwd, env=env, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if wait_for in line:
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read()
    return proc.wait(timeout=60), "".join(seen) + rest


SLOW_BUILD = """
import sys, time
import memcalc.measure.runner as runner
def build(*args, **kwargs):
    print("building", file=sys.stderr, flush=True)
    time.sleep(120)
runner.build_model = build
"""


def test_sigint_during_measure_in_a_real_process(tmp_path):
    rc, stderr = _interrupt(["measure", *SMALL], "building", tmp_path, prelude=SLOW_BUILD)
    assert rc == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == (
        "interrupted: memcalc measure stopped at building the model (Ctrl-C)"
    )


def test_sigint_during_trace_in_a_real_process(tmp_path):
    (tmp_path / "slow_model.py").write_text(
        "import sys, time\n\ndef build():\n    print('building', file=sys.stderr, flush=True)\n"
        "    time.sleep(120)\n"
    )
    rc, stderr = _interrupt(
        ["trace", "slow_model:build", "--input-shape", "1x8"], "building", tmp_path
    )
    assert rc == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == (
        "interrupted: memcalc trace stopped at tracing: building the model (Ctrl-C)"
    )


# ---------------------------------------------------------------------------------------------
# 4. Progress on stderr


def test_progress_bar_on_a_terminal_shows_the_phase_and_is_cleared():
    out = io.StringIO()
    with Progress("memcalc measure", total=7, mode=Mode.live, stream=out) as say:
        say("building the model")
        say("warm-up step: forward")
        time.sleep(0.6)  # a redraw (4 per second)
    text = out.getvalue()
    assert "memcalc measure" in text and "warm-up step: forward" in text
    assert "1/7" in text


def test_progress_is_off_without_a_terminal():
    """Captured stderr is not a terminal: no bar, no lines (an error stays one line)."""
    r = run_cli("measure", *SMALL)
    assert r.exit_code == 0
    assert r.stderr == ""
    trace = run_cli("trace", TINY, "--input-shape", "2x32", "--format", "json")
    assert trace.exit_code == 0, trace.stderr
    assert "memcalc trace" not in trace.stderr


def test_quiet_turns_the_bar_off_on_a_terminal(monkeypatch):
    from memcalc.measure.progress import mode_of

    assert mode_of(True) is Mode.off
    out = io.StringIO()
    out.isatty = lambda: True  # type: ignore[method-assign]
    with Progress("memcalc trace", total=6, mode=mode_of(True), stream=out) as say:
        say("tracing: forward")
    assert out.getvalue() == ""
    with Progress("memcalc trace", total=6, mode=mode_of(False), stream=out) as say:
        say("tracing: forward")
    assert "tracing: forward" in out.getvalue()


def _readme_measure_commands() -> list[list[str]]:
    import re
    import shlex

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    lines = [ln.split("  #")[0].strip() for b in blocks for ln in b.splitlines()]
    return [shlex.split(ln)[1:] for ln in lines if ln.startswith("memcalc measure")]


def test_readme_measure_examples_pass_the_preflight_on_a_24_gb_machine(monkeypatch):
    """Every README ``measure`` example gets past the memory check with 20 GiB free (it reaches
    the build, stopped there by a Ctrl-C) -- the old Llama-2-7B example did not."""
    commands = _readme_measure_commands()
    assert len(commands) >= 3
    monkeypatch.setattr(preflight, "host_available_bytes", lambda: 20 * GIB)

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("memcalc.measure.runner.build_model", stop)
    monkeypatch.setattr("memcalc.measure.distributed.launch.launch", stop)
    monkeypatch.chdir(ROOT)
    for argv in commands:
        if "--framework" in argv and "hf" in argv:
            pytest.importorskip("transformers")
        r = run_cli(*argv, "--device", "cpu", "--quiet")
        assert r.exit_code == 130, (argv, r.stderr)


@pytest.mark.hf
def test_readme_hf_measure_example_runs():
    pytest.importorskip("transformers")
    argv = next(a for a in _readme_measure_commands() if "hf" in a and "--nproc" not in a)
    r = run_cli(*argv, "--device", "cpu", "--quiet")
    assert r.exit_code == 0, r.stdout
