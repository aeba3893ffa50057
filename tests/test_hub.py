"""``--model ORG/NAME``: a hub repository's config.json through huggingface_hub (issue 25).

No test touches the network: each builds an HF hub cache directory itself (the layout
``hf_hub_download`` reads: ``models--ORG--NAME/refs/main`` holding a commit,
``snapshots/<commit>/config.json``) and runs memcalc in a subprocess with ``HF_HUB_OFFLINE=1``
and ``HF_HUB_CACHE`` pointing at it (huggingface_hub reads both when it is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memcalc.errors import MemcalcError
from memcalc.params import count_params
from memcalc.spec.families import hf_config_dict
from memcalc.spec.hub import is_hub_id
from memcalc.spec.presets import PRESETS

pytest.importorskip("huggingface_hub")

DATA = Path(__file__).parent / "data"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(root: Path, repo_id: str, config: dict) -> Path:
    """An HF hub cache holding ``config.json`` of ``repo_id`` at ``main``."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    return root


def memcalc_offline(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "COLUMNS": "100"}
    env.pop("HF_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "memcalc", *args], capture_output=True, text=True, env=env
    )


def qwen25_14b_config() -> dict:
    """The sizes of Qwen/Qwen2.5-14B's config.json, as Qwen2Config writes them."""
    return {"_name_or_path": "Qwen/Qwen2.5-14B", **hf_config_dict(PRESETS["qwen2.5-14b"])}


def test_hub_ids_and_paths():
    assert is_hub_id("Qwen/Qwen2.5-14B") and is_hub_id("meta-llama/Llama-3.1-8B")
    for text in ("../gpt2", "./gpt2", "/abs/gpt2", "a/b/c", "gpt2", "a--b/c", "-a/b", "a/b."):
        assert not is_hub_id(text), text


def test_a_cached_hub_config_is_estimated(tmp_path):
    """A repository memcalc has no preset for: its config.json from the cache."""
    config = json.loads((DATA / "llama-2-7b-config.json").read_text())
    cache = hub_cache(tmp_path / "hub", "someone/Llama-2-7b-finetune", config)
    result = memcalc_offline(
        cache,
        "estimate",
        "--model",
        "someone/Llama-2-7b-finetune",
        "--recompute",
        "full",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["model"] == "Llama-2-7b-finetune"
    assert record["parameter_count"] == 6_738_415_616


def test_revision_reads_the_hub_config_even_of_a_preset(tmp_path):
    """Qwen/Qwen2.5-14B is the preset qwen2.5-14b; with --revision its config.json is read
    (here from the cache, as the hub would give it), and it describes the same model."""
    cache = hub_cache(tmp_path / "hub", "Qwen/Qwen2.5-14B", qwen25_14b_config())
    args = ["estimate", "--recompute", "full", "--format", "json"]
    hub = memcalc_offline(cache, *args, "--model", "Qwen/Qwen2.5-14B", "--revision", "main")
    preset = memcalc_offline(cache, *args, "--model", "qwen2.5-14b")
    assert hub.returncode == 0, hub.stderr
    hub_record, preset_record = json.loads(hub.stdout), json.loads(preset.stdout)
    assert hub_record["model"] == "Qwen2.5-14B"
    assert hub_record["parameter_count"] == count_params(PRESETS["qwen2.5-14b"]).total
    assert hub_record | {"model": "qwen2.5-14b"} == preset_record


def test_offline_without_the_config_names_what_to_pass(tmp_path):
    result = memcalc_offline(
        tmp_path / "empty", "estimate", "--model", "Qwen/Qwen2.5-14B", "--revision", "main"
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --model: Qwen/Qwen2.5-14B (--revision main): ")
    assert "not in the HF cache" in line and "HF_HUB_OFFLINE" in line
    assert "--model path/to/config.json" in line
    assert "https://huggingface.co/Qwen/Qwen2.5-14B/resolve/main/config.json" in line
    assert "a preset ('qwen2.5-14b' is close" in line


def test_a_hub_id_of_a_preset_needs_no_hub(tmp_path):
    result = memcalc_offline(tmp_path / "empty", "estimate", "--model", "Qwen/Qwen2.5-14B")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("qwen2.5-14b (")


def test_revision_needs_a_hub_id():
    from conftest import run_cli
    from test_robust import one_error

    one_error(run_cli("estimate", "--model", "gpt2", "--revision", "main"), "--revision")


def test_a_preset_estimate_never_imports_huggingface_hub():
    code = (
        "import sys, memcalc; memcalc.estimate('llama-3-8b'); memcalc.plan('gpt2', max_gpus=2);"
        "print('huggingface_hub' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(
    ("error", "words"),
    [
        ("GatedRepoError", "gated repository"),
        ("RepositoryNotFoundError", "no such repository"),
        ("RevisionNotFoundError", "no revision 'v9'"),
        ("RemoteEntryNotFoundError", "no config.json"),
    ],
)
def test_hub_failures_are_one_line(monkeypatch, error, words):
    """What huggingface_hub raises for each failure becomes one line with the way out (the
    hub's own errors, raised by a stand-in for the download: no network)."""
    import huggingface_hub
    from huggingface_hub import errors

    from memcalc.spec.hub import hub_config

    def fail(*args, **kwargs):
        if kwargs.get("local_files_only"):
            raise errors.LocalEntryNotFoundError("not cached")
        cls = getattr(errors, error)
        exc = cls.__new__(cls)  # without the HTTP response its __init__ reads
        Exception.__init__(exc, "the hub said no")
        raise exc

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fail)
    with pytest.raises(MemcalcError) as e:
        hub_config("org/model", "v9" if "Revision" in error else None)
    assert words in str(e.value) and "config.json" in str(e.value)
    assert "\n" not in str(e.value)
