"""What to trace: module:function, an HF config.json, or a memcalc preset / spec file."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from memcalc.errors import MemcalcError
from memcalc.install_hints import TRANSFORMERS
from memcalc.measure.build import Impl, attention_kind
from memcalc.measure.reference_model import Config, Transformer
from memcalc.spec.loaders import load_model, read_data_file
from memcalc.spec.model import ModelSpec, Positions
from memcalc.spec.presets import PRESETS
from memcalc.spec.training import TrainingSetup

# ---------------------------------------------------------------------------------------------
# Targets: module:function, HF config.json, memcalc preset / spec file


def parse_input_shape(text: str) -> tuple[int, int]:
    """``"4x1024"`` -> (4, 1024): batch x sequence, both positive.

    >>> parse_input_shape("4x1024")
    (4, 1024)
    """
    parts = text.lower().replace("×", "x").split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise MemcalcError(
            f"--input-shape: expected BxS (batch x sequence length), e.g. 4x1024; got {text!r}"
        )
    return int(parts[0]), int(parts[1])


@dataclass(frozen=True)
class Target:
    """A model to trace: how to build it, and what it is."""

    name: str
    build: Callable[[], nn.Module]
    """Called inside FakeTensorMode."""
    kind: str
    """module, hf-config or spec."""
    vocab_size: int | None = None
    max_positions: int | None = None
    """The model's max_position_embeddings (None: a module's, not known before it runs)."""


def resolve_target(target: str, setup: TrainingSetup, impl: Impl = Impl.ours) -> Target:
    """What ``target`` names: a memcalc preset or spec file (built with ``impl``), an HF
    ``config.json`` (random init), or ``module:function`` returning an ``nn.Module``."""
    path = Path(target)
    if target in PRESETS or (path.suffix == ".toml" and path.is_file()):
        return spec_target(load_model(target), setup, impl)
    if path.suffix == ".json" and path.is_file():
        data = read_data_file(path)
        if "model_type" in data:
            return _hf_config_target(data, path, setup)
        return spec_target(load_model(target), setup, impl)
    if path.suffix in (".json", ".toml"):
        raise MemcalcError(f"{target}: no such file")
    if ":" in target:
        return _module_target(target)
    raise MemcalcError(
        f"TARGET: {target!r} is not module:function, an HF config.json, a memcalc spec file "
        f"or a preset ({', '.join(PRESETS)})"
    )


def spec_target(spec: ModelSpec, setup: TrainingSetup, impl: Impl) -> Target:
    if setup.dropout is not None:
        spec = spec.with_dropout(setup.dropout)
    if spec.positions is Positions.learned and setup.seq > spec.max_position_embeddings:
        raise MemcalcError(
            f"--input-shape: sequence {setup.seq} is longer than the model's "
            f"max_position_embeddings ({spec.max_position_embeddings})"
        )
    attention = attention_kind(setup, spec)

    def build() -> nn.Module:
        if impl is Impl.ours:
            return Transformer(Config.from_spec(spec, attention))
        import torch

        from memcalc.measure.build import _hf_model

        # fp32, as from_config builds it; trace casts to the recipe's dtype, keeping what
        # from_pretrained would keep in fp32 (fake.kept_in_fp32)
        return _hf_model(spec, attention, torch.float32)

    return Target(spec.name, build, "spec", spec.vocab_size, spec.max_position_embeddings)


def _hf_config_target(cfg: dict[str, Any], path: Path, setup: TrainingSetup) -> Target:
    try:
        import transformers
    except ImportError:
        raise MemcalcError(
            f"{path}: tracing an HF config needs transformers: {TRANSFORMERS}"
        ) from None
    cfg = dict(cfg)
    model_type = cfg.pop("model_type")
    cfg["use_cache"] = False  # training: no KV cache
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError, TypeError) as e:
        raise MemcalcError(f"{path}: model_type {model_type!r}: {one_line(e)}") from None
    if setup.dropout is not None:
        for key in (
            "attention_dropout",
            "attn_pdrop",
            "resid_pdrop",
            "embd_pdrop",
            "hidden_dropout",
            "hidden_dropout_prob",
            "attention_probs_dropout_prob",
        ):
            if hasattr(config, key):
                setattr(config, key, setup.dropout)
    attention = attention_kind(setup)

    def build() -> nn.Module:
        try:
            return transformers.AutoModelForCausalLM.from_config(
                config, attn_implementation=attention
            )
        except Exception as e:  # transformers' own checks, any kind: one line
            raise MemcalcError(f"{path}: {one_line(e)}") from None

    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return Target(
        name or model_type,
        build,
        "hf-config",
        getattr(config, "vocab_size", None),
        getattr(config, "max_position_embeddings", None),
    )


def _module_target(target: str) -> Target:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise MemcalcError(f"{target}: expected module:function, e.g. mypkg.models:build_model")

    def build() -> nn.Module:
        with _cwd_on_path():
            try:
                module = importlib.import_module(module_name)
            except Exception as e:  # user code: any failure is one line
                raise MemcalcError(
                    f"{target}: cannot import {module_name!r}: {one_line(e)}"
                ) from None
            fn: Any = module
            for part in attr.split("."):
                if not hasattr(fn, part):
                    raise MemcalcError(
                        f"{target}: module {module_name!r} has no attribute {attr!r}"
                    )
                fn = getattr(fn, part)
            if not callable(fn):
                raise MemcalcError(f"{target}: {attr!r} is not callable")
            try:
                model = fn()
            except MemcalcError:
                raise
            except Exception as e:  # user code
                raise MemcalcError(f"{target}: {attr}() failed: {one_line(e)}") from None
        if not isinstance(model, nn.Module):
            raise MemcalcError(
                f"{target}: {attr}() returned {type(model).__name__}, not a torch.nn.Module"
            )
        return model

    return Target(target, build, "module")


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    """Local packages import as from ``python -c``: the working directory goes first."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")
