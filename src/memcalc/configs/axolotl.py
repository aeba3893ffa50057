"""An axolotl YAML (``axolotl train config.yml``; the fields of axolotl's
``utils/schemas/config.py`` ``AxolotlInputConfig``).

``base_model`` is the model (a hub id); ``micro_batch_size``, ``gradient_accumulation_steps``
and ``sequence_len`` the batch; ``adapter: lora | qlora`` with ``lora_*`` the adapters
(``lora_target_linear`` is PEFT's all-linear); ``load_in_4bit`` an NF4 base (axolotl's
``BitsAndBytesConfig``: ``bnb_4bit_quant_type="nf4"``, ``bnb_4bit_use_double_quant=True``,
so ``nf4-dq``), ``load_in_8bit`` LLM.int8. ``bf16`` loads the weights in bfloat16 and trains
them so (``bf16``: weights, gradients and optimizer states in bf16), ``fp16`` likewise;
``gradient_checkpointing`` is full recompute (``offload``: its inputs on the host too);
Liger's fused cross-entropy and Cut Cross-Entropy are ``--loss fused``; ``deepspeed`` and
``fsdp`` as in TrainingArguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memcalc.configs.base import ConfigFile, Fields
from memcalc.configs.optimizers import read_hf_optimizer

KIND = "axolotl config"

FUSED_LOSS_PLUGINS = (
    "axolotl.integrations.liger",
    "axolotl.integrations.cut_cross_entropy",
)
ATTENTION = (
    ("flash_attention", "flash"),
    ("sdp_attention", "sdpa"),
    ("eager_attention", "eager"),
)
UNMODELLED = {
    "rl": "memcalc estimates one training step of the policy; the reference model, "
    "generation and reward models of RL / preference training are not modelled",
    "trl": "TRL's RL settings (generation, vLLM) are not modelled",
    "unfrozen_parameters": "training a subset of parameters is not modelled",
    "peft_use_dora": "DoRA's magnitude vectors and their saved tensors are not modelled",
    "xformers_attention": "the xformers kernel is read as sdpa (a fused kernel)",
    "s2_attention": "shifted sparse attention is not modelled",
    "torch_compile": "torch.compile changes which tensors are saved",
    "liger_rms_norm": "Liger's RMSNorm saves other tensors than HF's; not modelled",
    "liger_glu_activation": "Liger's SwiGLU saves other tensors than HF's; not modelled",
    "liger_rope": "Liger's RoPE kernel is not modelled",
    "liger_layer_norm": "Liger's LayerNorm is not modelled",
    "lora_on_cpu": "LoRA weights on the CPU are not modelled",
    "relora_steps": "ReLoRA is not modelled",
    "context_parallel_size": "axolotl's ring-attention context parallelism: pass --cp",
    "tensor_parallel_size": "axolotl's tensor parallelism: pass --tp",
}


def read_axolotl(data: Mapping[str, Any], path: Path) -> ConfigFile:
    result = ConfigFile(KIND, path)
    f = Fields(data, result)
    f.set("model", f.text("base_model"))
    f.set("batch", f.integer("micro_batch_size"))
    accumulation = f.integer("gradient_accumulation_steps")
    total = f.integer("batch_size")
    if accumulation is None and total is not None and result.options.get("batch"):
        accumulation = max(1, total // result.options["batch"])
    f.set("microbatches", accumulation)
    f.set("seq", f.integer("sequence_len"))
    read_hf_optimizer(f, "optimizer")
    _adapter(f)
    _precision(f)
    checkpointing = f.raw("gradient_checkpointing")
    if checkpointing is True or checkpointing == "offload":
        f.set("recompute", "full")
        if checkpointing == "offload":
            f.offload("activations", "cpu")
    for key, kernel in ATTENTION:
        if f.flag(key):
            f.set("attention", kernel)
    if f.flag("xformers_attention"):
        f.set("attention", "sdpa")
    plugins = f.names("plugins") or []
    fused = any(p.startswith(FUSED_LOSS_PLUGINS) for p in plugins) and (
        f.flag("liger_fused_linear_cross_entropy") or f.flag("cut_cross_entropy")
    )
    if fused:
        f.set("loss", "fused")
    for plugin in plugins:
        if not plugin.startswith(FUSED_LOSS_PLUGINS):
            f.unmodelled("plugins", f"{plugin}: a plugin's settings are not modelled")
    _sharding(f)
    for key, why in UNMODELLED.items():
        if f.has(key) and f.raw(key) not in (False, [], {}, 1):
            f.unmodelled(key, why)
    return result


def _adapter(f: Fields) -> None:
    adapter = f.text("adapter")
    if adapter is None:
        return
    if adapter.lower() not in ("lora", "qlora"):
        f.unmodelled("adapter", f"{adapter!r} is not modelled (memcalc reads: lora, qlora)")
        return
    rank = f.integer("lora_r")
    if rank is None:
        f.unmodelled("lora_r", "missing (axolotl requires it with an adapter); no LoRA read")
        return
    f.set("lora_rank", rank)
    f.set("lora_alpha", f.raw("lora_alpha"))
    f.set("lora_dropout", f.raw("lora_dropout"))
    if f.flag("lora_target_linear"):
        f.set("lora_targets", ["all-linear"])
    else:
        f.set("lora_targets", f.names("lora_target_modules"))
    f.set("modules_to_save", f.names("lora_modules_to_save"))
    if f.flag("load_in_4bit"):
        # loaders/model.py: qlora + load_in_4bit is BitsAndBytesConfig(nf4, double quant)
        f.set("quantize", "nf4-dq")
    elif f.flag("load_in_8bit"):
        f.set("quantize", "int8")


def _precision(f: Fields) -> None:
    bf16 = f.raw("bf16")
    if bf16 is True or bf16 == "auto" or f.flag("bfloat16"):
        f.set("precision", "bf16")
    elif f.flag("fp16") or f.flag("float16"):
        f.set("precision", "fp16")
    else:
        f.set("precision", "fp32")  # utils/config resolve_dtype: float32 without bf16 / fp16


def _sharding(f: Fields) -> None:
    from memcalc.configs.hf_trainer import read_deepspeed_field, read_fsdp_field

    if read_deepspeed_field(f):
        bits = f.result.options.get("precision")
        if bits in ("bf16", "fp16"):
            f.result.options["precision"] = f"{bits}-mixed"  # DeepSpeed's engine
    read_fsdp_field(f)
