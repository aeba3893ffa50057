"""A model's ``config.json`` from the Hugging Face hub, by its repository id (``ORG/NAME``).

Only ``config.json`` is fetched -- never weights -- through ``huggingface_hub.hf_hub_download``,
so it lands in (and is read from) the user's HF cache (``HF_HUB_CACHE`` / ``HF_HOME``, default
``~/.cache/huggingface/hub``), gated repositories use the user's token (``HF_TOKEN`` or
``hf auth login``), ``HF_HUB_OFFLINE=1`` reads the cache only, and ``--revision`` picks a branch,
tag or commit. ``huggingface_hub`` is imported here only, when a hub id is given: an estimate
of a preset or a file never loads it.

Every failure is one line that names the repository, what went wrong and what to pass instead
(the config.json path, or a preset).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memcalc.errors import MemcalcError

REPO_PART = re.compile(r"[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9_])?")
"""One half of a hub repository id (``huggingface_hub.utils.validate_repo_id``: letters,
digits, ``-``, ``_``, ``.``; not starting or ending with ``-`` / ``.``)."""
MAX_REPO_ID = 96
"""Longest repository id the hub accepts (``validate_repo_id``)."""


def is_hub_id(text: str) -> bool:
    """``text`` reads as ``ORG/NAME`` (``..``, ``./x``, absolute paths and more slashes do
    not).

    >>> is_hub_id("Qwen/Qwen2.5-14B"), is_hub_id("../gpt2"), is_hub_id("./a/b"), is_hub_id("gpt2")
    (True, False, False, False)
    """
    parts = text.split("/")
    return (
        len(parts) == 2
        and len(text) <= MAX_REPO_ID
        and "--" not in text
        and ".." not in text
        and all(REPO_PART.fullmatch(p) for p in parts)
    )


def hub_config(repo_id: str, revision: str | None = None) -> tuple[dict[str, Any], Path]:
    """The parsed ``config.json`` of hub repository ``repo_id`` (at ``revision``) and its path
    in the HF cache; a MemcalcError of one line on any failure."""
    from memcalc.files import read_data_file

    path = _download(repo_id, revision)
    return read_data_file(path, "--model"), path


def _instead(repo_id: str) -> str:
    """What to pass when the hub cannot be read."""
    from memcalc.spec.names import closest
    from memcalc.spec.presets import PRESETS

    near = closest(repo_id, sorted(PRESETS))
    preset = (
        f"a preset ({near!r} is close; memcalc models list)"
        if near
        else ("a preset (memcalc models list)")
    )
    return (
        f"pass its config.json instead (--model path/to/config.json; it is "
        f"https://huggingface.co/{repo_id}/resolve/main/config.json) or {preset}"
    )


def _download(repo_id: str, revision: str | None) -> Path:
    where = f"--model: {repo_id}" + (f" (--revision {revision})" if revision else "")
    try:
        from huggingface_hub import errors as hub_errors
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise MemcalcError(
            f"{where}: reading a hub id needs huggingface_hub (pip install huggingface_hub); "
            + _instead(repo_id)
        ) from None
    if revision is None:  # a config.json already in the cache: no request to the hub
        try:
            return Path(hf_hub_download(repo_id, "config.json", local_files_only=True))
        except (hub_errors.LocalEntryNotFoundError, OSError, ValueError):
            pass
    try:
        with _quiet_retries():
            return Path(hf_hub_download(repo_id, "config.json", revision=revision))
    except hub_errors.GatedRepoError:
        problem = (
            "is a gated repository: accept its licence on the hub, then set HF_TOKEN (or run "
            "`hf auth login`)"
        )
    except hub_errors.RepositoryNotFoundError:
        problem = "no such repository on the hub (a private one needs HF_TOKEN)"
    except hub_errors.RevisionNotFoundError:
        problem = f"no revision {revision!r} in this repository"
    except hub_errors.LocalEntryNotFoundError:
        problem = (
            "its config.json is not in the HF cache and the hub cannot be reached (offline, "
            "or HF_HUB_OFFLINE is set)"
        )
    except (hub_errors.EntryNotFoundError, hub_errors.RemoteEntryNotFoundError):
        problem = "the repository has no config.json (not a transformers model)"
    except (hub_errors.HfHubHTTPError, OSError, ValueError) as e:
        problem = f"could not fetch its config.json: {_one_line(e)}"
    except Exception as e:  # the HTTP client's own errors (connection, timeout): one line
        problem = f"could not fetch its config.json: {type(e).__name__}: {_one_line(e)}"
    raise MemcalcError(f"{where}: {problem}; {_instead(repo_id)}")


@contextmanager
def _quiet_retries() -> Iterator[None]:
    """huggingface_hub logs a warning per retry of a failed request; the failure itself
    becomes memcalc's one line."""
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:200] + ("..." if len(text) > 200 else "")
