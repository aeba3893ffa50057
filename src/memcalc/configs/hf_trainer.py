"""HF ``TrainingArguments`` and TRL ``SFTConfig`` as JSON or YAML (what
``HfArgumentParser.parse_json_file`` / ``parse_yaml_file`` and ``trl sft --config`` read), with
TRL's ``ModelConfig`` fields beside them (``trl sft`` takes one file for all its dataclasses).

The precision follows what the Trainer does: ``bf16`` / ``fp16`` is ``torch.autocast`` over
the weights as loaded (``amp-bf16``, or ``bf16`` everywhere when TRL's ``dtype`` loads them in
bfloat16); with a ``deepspeed`` config, DeepSpeed's bf16 / fp16 engine (16-bit weights, fp32
master weights: ``bf16-mixed``). A file with TRL's own fields is an SFTConfig, whose defaults
differ from TrainingArguments' (``trl/trainer/sft_config.py``: ``gradient_checkpointing`` and
``bf16`` true, ``max_length`` 1024).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memcalc.configs.base import ConfigFile, Fields
from memcalc.configs.optimizers import read_hf_optimizer

KIND = "HF TrainingArguments"
TRL_KIND = "TRL SFTConfig"

TRL_KEYS = frozenset(
    {
        # SFTConfig's fields that TrainingArguments lacks, and ModelConfig's / ScriptArguments'
        "max_length",
        "max_seq_length",
        "packing",
        "packing_strategy",
        "padding_free",
        "dataset_text_field",
        "completion_only_loss",
        "assistant_only_loss",
        "activation_offloading",
        "model_init_kwargs",
        "dataset_kwargs",
        "dataset_num_proc",
        "use_peft",
        "lora_r",
        "model_name_or_path",
        "dataset_name",
        "load_in_4bit",
    }
)
TRL_DEFAULTS = {"gradient_checkpointing": True, "max_length": 1024}
"""SFTConfig's defaults where they differ from TrainingArguments' (bf16: true unless fp16)."""

ATTENTION = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash", "flash": "flash"}
FSDP_ZERO = {"full_shard": 3, "shard_grad_op": 2, "hybrid_shard": 3, "no_shard": 0}
"""``TrainingArguments.fsdp`` words (``FSDPOption``) -> the ZeRO stage of that sharding."""

UNMODELLED = {
    "torch_compile": "torch.compile changes which tensors are saved; not modelled",
    "ddp_bucket_cap_mb": "memcalc models DDP's default 25 MiB buckets",
    "auto_find_batch_size": "the batch it settles on is not known in advance; --batch is used",
    "neftune_noise_alpha": "the noise on the embeddings is not modelled",
    "use_dora": "DoRA's magnitude vectors and their saved tensors are not modelled",
    "liger_kernel_config": "Liger's kernels other than its fused cross-entropy are not modelled",
}


def is_trl(data: Mapping[str, Any]) -> bool:
    return any(k in data for k in TRL_KEYS)


def read_hf_trainer(data: Mapping[str, Any], path: Path) -> ConfigFile:
    trl = is_trl(data)
    result = ConfigFile(TRL_KIND if trl else KIND, path)
    f = Fields(data, result)
    f.set("batch", f.integer("per_device_train_batch_size"))
    f.set("microbatches", f.integer("gradient_accumulation_steps"))
    seq = f.integer("max_length") if f.has("max_length") else f.integer("max_seq_length")
    f.set("seq", seq if seq is not None or not trl or "max_length" in data else 1024)
    read_hf_optimizer(f, "optim")
    checkpointing = f.flag("gradient_checkpointing")
    if checkpointing is None and trl:
        checkpointing = True
    if checkpointing:
        f.set("recompute", "full")
        if f.table("gradient_checkpointing_kwargs").flag("use_reentrant"):
            f.table("gradient_checkpointing_kwargs").unmodelled(
                "use_reentrant", "true: memcalc models the non-reentrant checkpoint"
            )
    if f.flag("use_liger_kernel"):
        f.set("loss", "fused")
        f.unmodelled(
            "use_liger_kernel",
            "true: Liger's fused linear cross-entropy is --loss fused; its RMSNorm, SwiGLU and "
            "RoPE kernels save other tensors than HF's, which is not modelled",
        )
    if f.flag("activation_offloading"):
        f.offload("activations", "cpu")
    _model_config(f)
    deepspeed = read_deepspeed_field(f)
    read_fsdp_field(f)
    _precision(f, trl, deepspeed)
    for key, why in UNMODELLED.items():
        if f.has(key) and f.raw(key) not in (False, {}, None):
            f.unmodelled(key, why)
    return result


def _precision(f: Fields, trl: bool, deepspeed: bool) -> None:
    fp16 = f.flag("fp16")
    bf16 = f.flag("bf16")
    if bf16 is None and trl and not fp16:
        bf16 = True
    bits = "bf16" if bf16 else "fp16" if fp16 else None
    if bits is None:
        f.set("precision", "fp32")  # neither: the Trainer trains the fp32 weights as loaded
        return
    if deepspeed:
        f.result.options["precision"] = f"{bits}-mixed"  # DeepSpeed's engine: fp32 master
        return
    dtype = f.text("dtype") or f.text("torch_dtype")
    if dtype in ("bfloat16", "float16"):
        f.set("precision", "bf16" if dtype == "bfloat16" else "fp16")
    else:
        if dtype == "auto":
            f.unmodelled("dtype", "'auto' loads the checkpoint's dtype; read as float32")
        f.set("precision", f"amp-{bits}")


def _model_config(f: Fields) -> None:
    """TRL's ModelConfig: the model, attention, LoRA and the quantized base."""
    f.set("model", f.text("model_name_or_path"))
    f.set("attention", f.choice("attn_implementation", ATTENTION))
    if f.flag("use_peft"):
        # trl/trainer/model_config.py defaults: r 16, alpha 32, dropout 0.05
        f.set("lora_rank", f.integer("lora_r") or 16)
        f.set("lora_alpha", f.raw("lora_alpha") or 32)
        f.set("lora_dropout", f.raw("lora_dropout") if f.has("lora_dropout") else 0.05)
        f.set("lora_targets", f.names("lora_target_modules"))
        f.set("modules_to_save", f.names("lora_modules_to_save"))
    if f.flag("load_in_4bit"):
        kind = (f.text("bnb_4bit_quant_type") or "nf4").lower()
        nested = f.flag("use_bnb_nested_quant")
        f.set("quantize", "nf4-dq" if kind == "nf4" and nested else kind)
    elif f.flag("load_in_8bit"):
        f.set("quantize", "int8")


def read_deepspeed_field(f: Fields) -> bool:
    """``deepspeed``: a DeepSpeed JSON path (relative to this file, else the working
    directory) or an inline dict; its "auto" values are this file's."""
    from memcalc.configs.deepspeed import read_deepspeed

    value = f.raw("deepspeed")
    if value is None:
        return False
    if isinstance(value, Mapping):
        inner = read_deepspeed(value, f.result.path)
    elif isinstance(value, str):
        from memcalc.configs.files import nested_file

        data, where = nested_file(f, "deepspeed", value)
        if data is None:
            return False
        inner = read_deepspeed(data, where)
    else:
        raise f.fail("deepspeed", "expected a DeepSpeed config path or table")
    inner.options.pop("precision", None)  # "auto" or explicit, the Trainer's bf16 / fp16 decide
    f.result.merge(inner)
    return True


def read_fsdp_field(f: Fields) -> bool:
    words = f.names("fsdp")
    if not words:
        return False
    words = [w for part in words for w in part.split()]
    zero = next((FSDP_ZERO[w] for w in words if w in FSDP_ZERO), None)
    f.set("zero", zero)
    if "hybrid_shard" in words or "hybrid_shard_zero2" in words:
        f.unmodelled("fsdp", "hybrid_shard: pass --shard-size (the GPUs of one node)")
    if "offload" in words:
        f.offload("params", "cpu")
        f.offload("optimizer", "cpu")
    cfg = f.table("fsdp_config") if isinstance(f.raw("fsdp_config"), Mapping) else None
    if cfg is not None:
        read_fsdp_options(cfg)
    return zero is not None and zero > 0


def read_fsdp_options(cfg: Fields) -> None:
    """The FSDP options TrainingArguments' fsdp_config and accelerate's fsdp_config share,
    with or without their ``fsdp_`` prefix (accelerate ``FullyShardedDataParallelPlugin``)."""

    def key(name: str) -> str:
        return name if cfg.has(name) else f"fsdp_{name}"

    if cfg.flag(key("activation_checkpointing")):
        cfg.set("recompute", "full")
    if cfg.flag(key("offload_params")):
        cfg.offload("params", "cpu")
        cfg.offload("optimizer", "cpu")  # CPUOffload: the optimizer steps on the host
    reshard = cfg.raw(key("reshard_after_forward"))
    if isinstance(reshard, bool):
        cfg.set("fsdp_reshard", reshard)
    elif isinstance(reshard, str) and reshard.upper() in ("FULL_SHARD", "SHARD_GRAD_OP"):
        cfg.set("zero", 3 if reshard.upper() == "FULL_SHARD" else 2)  # FSDP1's strategy
    strategy = cfg.text(key("sharding_strategy"))
    if strategy is not None:
        zero = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3}
        cfg.set("zero", zero.get(strategy.upper().split(".")[-1]))
    cfg.unmodelled_if_set(
        [key("forward_prefetch")], "FSDP's forward prefetch is not modelled", unless=False
    )
    policy = cfg.text(key("auto_wrap_policy"))
    if policy is not None and policy.upper() not in ("TRANSFORMER_BASED_WRAP", "AUTO"):
        cfg.unmodelled(key("auto_wrap_policy"), f"{policy!r}: memcalc shards per decoder block")
