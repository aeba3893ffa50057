"""Which kind of config a file is, from its content (the suffix only says how to parse it):
each kind is recognised by fields only it has."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from memcalc.configs.accelerate import read_accelerate
from memcalc.configs.axolotl import read_axolotl
from memcalc.configs.base import ConfigFile
from memcalc.configs.deepspeed import read_deepspeed
from memcalc.configs.hf_trainer import read_hf_trainer
from memcalc.configs.peft import read_peft
from memcalc.configs.torchtitan import read_torchtitan
from memcalc.errors import MemcalcError

Reader = Callable[[Mapping[str, Any], Path], ConfigFile]

DEEPSPEED_KEYS = {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"}
ACCELERATE_KEYS = {"distributed_type", "compute_environment"}
AXOLOTL_KEYS = {"base_model", "micro_batch_size", "sequence_len", "adapter", "lora_r"}
HF_KEYS = {
    "per_device_train_batch_size",
    "output_dir",
    "gradient_accumulation_steps",
    "gradient_checkpointing",
    "optim",
    "model_name_or_path",
    "max_length",
    "max_seq_length",
}
TORCHTITAN_TABLES = {"training", "parallelism", "activation_checkpoint", "job"}

KINDS = (
    "DeepSpeed JSON",
    "HF TrainingArguments / TRL SFTConfig (JSON or YAML)",
    "accelerate config YAML",
    "axolotl YAML",
    "torchtitan TOML",
    "PEFT adapter_config.json",
)


def reader_for(data: Mapping[str, Any], path: Path) -> Reader:
    """The reader of ``data``'s kind; a one-line error naming the kinds otherwise."""
    keys = set(data)
    tables = {k for k, v in data.items() if isinstance(v, Mapping)}
    if "peft_type" in keys or ("r" in keys and "target_modules" in keys):
        return read_peft
    if keys & ACCELERATE_KEYS:
        return read_accelerate
    if len(tables & TORCHTITAN_TABLES) >= 2:
        return read_torchtitan
    if keys & AXOLOTL_KEYS and "per_device_train_batch_size" not in keys:
        return read_axolotl
    if keys & DEEPSPEED_KEYS or _is_deepspeed_precision(data):
        return read_deepspeed
    if keys & HF_KEYS:
        return read_hf_trainer
    raise MemcalcError(
        f"--config {path}: cannot tell which kind of config this is; memcalc reads: "
        + ", ".join(KINDS)
    )


def _is_deepspeed_precision(data: Mapping[str, Any]) -> bool:
    """``{"bf16": {"enabled": ...}}`` or ``{"optimizer": {"type": ...}}``: DeepSpeed's
    tables (TrainingArguments has plain booleans and strings there)."""
    return any(
        isinstance(data.get(k), Mapping) and sub in data[k]
        for k, sub in (("bf16", "enabled"), ("fp16", "enabled"), ("optimizer", "type"))
    )
