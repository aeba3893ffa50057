"""Start N ranks under torchrun and collect one Measurement per rank.

``python -m torch.distributed.run --standalone --nproc-per-node N -m
memcalc.measure.distributed.worker --request FILE --out DIR``: a single-node rendezvous on
the loopback interface (``--standalone`` picks a free local port), one JSON result per rank
in a private temporary directory. A run that does not finish within ``timeout_s`` is killed
(its whole process group) and reported in one line, as is any rank's failure.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.measure.build import Impl
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.offload import Offload
from memcalc.strategies.recompute import Recompute

DEFAULT_TIMEOUT_S = 600.0
"""Seconds the N ranks may take together (a small model takes seconds; most of it imports)."""
DEEPSPEED_TIMEOUT_S = 2400.0
"""Under DeepSpeed: its C++ Adam ops (fused_adam, cpu_adam) and its shm communication op are
built on first use, minutes each on a small machine (cached in ~/.cache/torch_extensions)."""


def default_timeout(setup: TrainingSetup) -> float:
    """The run's time limit without ``--timeout``."""
    return DEEPSPEED_TIMEOUT_S if setup.sharding_engine.builds_ops else DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class Request:
    """What every rank runs: the model, the step (its layout in ``setup.parallel``), the
    strategy and the seed."""

    spec: ModelSpec
    setup: TrainingSetup
    impl: Impl = Impl.ours
    recompute: Recompute = Recompute.none
    every: int | None = None
    device: str = "cpu"
    seed: int = 0
    offload: tuple[Offload, ...] = ()
    """What is offloaded (DeepSpeed's offload_optimizer / offload_param)."""


def result_path(out: Path, rank: int) -> Path:
    return out / f"rank{rank}.json"


def launch(
    request: Request,
    nproc: int,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Run ``request`` on ``nproc`` ranks; every rank's Measurement as a dict, rank order."""
    say = progress or (lambda _msg: None)
    with tempfile.TemporaryDirectory(prefix="memcalc-measure-") as tmp:
        out = Path(tmp)
        path = out / "request.pickle"
        path.write_bytes(pickle.dumps(request))
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(nproc),
            "-m",
            "memcalc.measure.distributed.worker",
            "--request",
            str(path),
            "--out",
            str(out),
        ]
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[3])  # the folder holding memcalc/
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        env.setdefault("OMP_NUM_THREADS", "1")
        if request.device == "cpu":
            env.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed's CPU accelerator (gloo)
        if sys.platform.startswith("linux"):
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo on the loopback interface
        log = out / "torchrun.log"
        say(f"starting {nproc} ranks under torchrun ({request.device}, {_backend(request)})")
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            try:
                code = proc.wait(timeout=timeout_s)
            except KeyboardInterrupt:  # the ranks are in their own session: end them too
                _kill(proc)
                raise
            except subprocess.TimeoutExpired:
                _kill(proc)
                raise MemcalcError(
                    f"--nproc: the {nproc} ranks did not finish within {timeout_s:g} s "
                    "(killed); a rank may be waiting on a collective the others never reach"
                ) from None
        results = [_read(result_path(out, r)) for r in range(nproc)]
        errors = [r["error"] for r in results if r is not None and "error" in r]
        if errors:
            raise MemcalcError(errors[0])
        if code != 0 or any(r is None or "measurement" not in r for r in results):
            raise MemcalcError(f"torchrun failed (exit {code}): {_last_line(log)}")
        return [r["measurement"] for r in results if r is not None]


def _backend(request: Request) -> str:
    return "nccl" if request.device == "cuda" else "gloo"


def _read(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """End torchrun and its ranks (their own process group, started for them)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _last_line(log: Path) -> str:
    lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
    errors = [x for x in lines if "Error" in x or "error" in x]
    return (errors or lines or ["no output"])[-1][:300]
