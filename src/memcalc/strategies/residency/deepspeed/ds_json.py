"""A DeepSpeed JSON config (https://www.deepspeed.ai/docs/config-json/; the keys of
``deepspeed/runtime/config.py`` and ``runtime/zero/config.py``) as memcalc options: the names
``memcalc estimate`` takes (the Python API's keywords) -- ``batch``, ``microbatches``,
``global_batch``, ``precision``, ``grad_dtype``, ``optimizer``, ``zero``, ``offload``,
``zero_engine`` and ``ds`` (the ``KEY=VALUE`` settings of ``spec/deepspeed.py``).

A standalone reader: a ``--config`` reader framework for every kind of config (issue 22's
other half, ``memcalc.configs``) can call ``deepspeed_options`` for DeepSpeed's. Values
``"auto"`` are the HF Trainer's to fill and are left out; every key that changes memory in a
way memcalc does not model is one warning.

>>> opts, warnings = deepspeed_options({"train_micro_batch_size_per_gpu": 4,
...     "bf16": {"enabled": True}, "zero_optimization": {"stage": 3,
...     "offload_optimizer": {"device": "cpu"}, "stage3_max_reuse_distance": 0}})
>>> opts["precision"], opts["zero"], opts["offload"], opts["ds"], warnings
('bf16-mixed', 3, ['optimizer=cpu'], ['stage3_max_reuse_distance=0'], [])
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.spec.deepspeed import FIELDS

AUTO = "auto"
OPTIMIZERS = {"adam": "adamw", "adamw": "adamw"}
"""DeepSpeed optimizer types memcalc's DeepSpeed engine models (``Adam`` runs as AdamW with
``adam_w_mode`` true, ``runtime/engine.py``; the memory is the same)."""
ALIASES = {
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "param_persistence_threshold": "stage3_param_persistence_threshold",
    "model_persistence_threshold": "stage3_model_persistence_threshold",
    "max_live_parameters": "stage3_max_live_parameters",
    "max_reuse_distance": "stage3_max_reuse_distance",
}
"""``DeepSpeedZeroConfig``'s field names for its ``stage3_*`` JSON aliases."""
SILENT = {
    # no effect on what a rank holds
    "gradient_clipping",
    "steps_per_print",
    "wall_clock_breakdown",
    "scheduler",
    "prescale_gradients",
    "gradient_predivide_factor",
    "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer",
    "dump_state",
    "memory_breakdown",
    "flops_profiler",
    "tensorboard",
    "wandb",
    "csv_monitor",
    "comet",
    "comms_logger",
    "monitor_config",
    "checkpoint",
    "seed",
}
ZERO_SILENT = {
    "allgather_partitions",
    "round_robin_gradients",
    "load_from_fp32_weights",
    "elastic_checkpoint",
    "ignore_unused_parameters",
    "stage3_gather_16bit_weights_on_model_save",
    "gather_16bit_weights_on_model_save",
    "log_trace_cache_warnings",
    "enable_sanity_checks",
}
KNOWN = {
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "train_batch_size",
    "bf16",
    "bfloat16",
    "fp16",
    "zero_optimization",
    "data_types",
    "optimizer",
    "communication_data_type",
}


def read_deepspeed_json(path: Path | str) -> tuple[dict[str, Any], list[str]]:
    """The options and warnings of a DeepSpeed JSON file (one line naming it on a bad file)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MemcalcError(f"--config {path}: not a readable JSON file ({e})") from None
    if not isinstance(data, Mapping):
        raise MemcalcError(f"--config {path}: expected a JSON object")
    return deepspeed_options(data)


def deepspeed_options(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The memcalc options a DeepSpeed config sets, and one warning per key not modelled."""
    opts: dict[str, Any] = {}
    warnings: list[str] = []
    for key, name in (
        ("train_micro_batch_size_per_gpu", "batch"),
        ("gradient_accumulation_steps", "microbatches"),
        ("train_batch_size", "global_batch"),
    ):
        if _given(data.get(key)):
            opts[name] = _integer(data[key], key)
    _precision(data, opts)
    grad = _table(data, "data_types").get("grad_accum_dtype")
    if _given(grad):
        opts["grad_dtype"] = {"bfloat16": "bf16", "float32": "fp32"}.get(str(grad), str(grad))
    ds = _zero(_table(data, "zero_optimization"), opts, warnings)
    ds += _optimizer(data, opts, warnings)
    if _given(data.get("communication_data_type")):
        ds.append(f"communication_data_type={data['communication_data_type']}")
    if ds:
        opts["ds"] = ds
    unknown = sorted(k for k in data if k not in KNOWN | SILENT)
    if unknown:
        warnings.append(f"DeepSpeed config: not modelled, not read: {', '.join(unknown)}")
    return opts, warnings


def _given(value: Any) -> bool:
    return value is not None and value != AUTO


def _integer(value: Any, key: str) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise MemcalcError(f"DeepSpeed config: {key}: expected an integer, got {value!r}")
    return value


def _table(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, Mapping):
        raise MemcalcError(f"DeepSpeed config: {key}: expected an object, got {value!r}")
    return value


def _precision(data: Mapping[str, Any], opts: dict[str, Any]) -> None:
    """``bf16`` / ``fp16`` enabled: 16-bit weights, an fp32 master partition (memcalc's
    ``-mixed``); neither: fp32."""
    bf16 = _table(data, "bf16") or _table(data, "bfloat16")
    fp16 = _table(data, "fp16")
    on = {name: t.get("enabled") for name, t in (("bf16", bf16), ("fp16", fp16))}
    if AUTO in on.values():
        return
    if on["bf16"]:
        opts["precision"] = "bf16-mixed"
    elif on["fp16"]:
        opts["precision"] = "fp16-mixed"
    else:
        opts["precision"] = "fp32"


def _zero(zero: Mapping[str, Any], opts: dict[str, Any], warnings: list[str]) -> list[str]:
    """The stage, the offloads and the modelled settings (``ds`` items)."""
    stage = _integer(zero.get("stage", 0), "zero_optimization.stage")
    opts["zero"] = stage
    if stage:
        opts["zero_engine"] = "deepspeed"
    offload: list[str] = []
    ds: list[str] = []
    for key, what in (("offload_optimizer", "optimizer"), ("offload_param", "params")):
        section = _table(zero, key)
        device = section.get("device", "none")
        if device not in (None, "none"):
            offload.append(f"{what}={device}")
        if section.get("pin_memory") is False:
            ds.append(f"{key}_pin_memory=false")
    if offload:
        opts["offload"] = offload
    for key, value in zero.items():
        name = ALIASES.get(key, key)
        if name in FIELDS and _given(value):
            ds.append(f"{name}={_text(value)}")
        elif key == "use_multi_rank_bucket_allreduce" and value is False:
            warnings.append(
                "DeepSpeed config: zero_optimization.use_multi_rank_bucket_allreduce false: the "
                "per-rank reduction is not modelled (read as true)"
            )
        elif key not in {"stage", "offload_optimizer", "offload_param"} | ZERO_SILENT:
            if name not in FIELDS and key != "use_multi_rank_bucket_allreduce":
                warnings.append(f"DeepSpeed config: zero_optimization.{key}: not modelled")
    return ds


def _optimizer(data: Mapping[str, Any], opts: dict[str, Any], warnings: list[str]) -> list[str]:
    section = _table(data, "optimizer")
    if not section:
        return []  # the client (an HF Trainer) makes the optimizer
    kind = str(section.get("type", "")).lower()
    if kind not in OPTIMIZERS:
        warnings.append(
            f"DeepSpeed config: optimizer.type {section.get('type')!r}: memcalc's DeepSpeed "
            "engine models Adam / AdamW"
        )
        return []
    opts["optimizer"] = OPTIMIZERS[kind]
    params = _table(section, "params")
    return ["torch_adam=true"] if params.get("torch_adam") is True else []


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
