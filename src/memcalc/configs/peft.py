"""A PEFT ``adapter_config.json`` (``LoraConfig.save_pretrained``; the fields of
``peft/tuners/lora/config.py``): the base model, and the adapters' rank, alpha, dropout, target
modules and modules to save. It says nothing of the base's quantization or of the training
batch: give those as flags or with another ``--config``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memcalc.configs.base import ConfigFile, Fields

KIND = "PEFT adapter config"

UNMODELLED = {
    "use_dora": "DoRA's magnitude vectors and their saved tensors are not modelled",
    "layers_to_transform": "adapters on some layers only are not modelled (all layers)",
    "rank_pattern": "per-module ranks are not modelled (r everywhere)",
    "trainable_token_indices": "trainable token rows are not modelled",
    "lora_bias": "a bias on lora_B is not modelled",
    "use_qalora": "QA-LoRA is not modelled",
    "layer_replication": "replicated layers are not modelled",
}


def read_peft(data: Mapping[str, Any], path: Path) -> ConfigFile:
    result = ConfigFile(KIND, path)
    f = Fields(data, result)
    kind = f.text("peft_type") or "LORA"
    if kind.upper() != "LORA":
        f.unmodelled("peft_type", f"{kind!r}: memcalc models LoRA adapters only; nothing read")
        return result
    f.set("model", f.text("base_model_name_or_path"))
    f.set("lora_rank", f.integer("r"))
    f.set("lora_alpha", f.raw("lora_alpha"))
    f.set("lora_dropout", f.raw("lora_dropout"))
    targets = f.raw("target_modules")
    if isinstance(targets, str) and targets != "all-linear":
        f.unmodelled("target_modules", f"{targets!r}: a regular expression; pass --lora-targets")
    else:
        # LoraConfig keeps target_modules as a set, so the saved list has no order: sorted
        targets = f.names("target_modules")
        f.set("lora_targets", sorted(targets) if targets else None)
    saved = f.names("modules_to_save")
    f.set("modules_to_save", sorted(saved) if saved else None)
    bias = f.text("bias")
    if bias not in (None, "none"):
        f.unmodelled("bias", f"{bias!r}: trained biases are not modelled")
    for key, why in UNMODELLED.items():
        if f.raw(key) not in (None, False, {}, []):
            f.unmodelled(key, why)
    return result
