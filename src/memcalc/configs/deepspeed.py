"""A DeepSpeed config JSON (https://www.deepspeed.ai/docs/config-json/; the names of
``deepspeed/runtime/config.py`` and ``deepspeed/runtime/zero/config.py``).

Mapped: the batch (``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``,
``train_batch_size`` for plan's global batch), the ZeRO stage and its optimizer / parameter
offload, the precision (``bf16`` / ``fp16``: 16-bit weights with fp32 master weights in
DeepSpeed's optimizer, memcalc's ``-mixed``), the gradient accumulation dtype, and the
optimizer (``Adam`` runs as AdamW: ``adam_w_mode`` defaults to true in
``runtime/engine.py``; ZeRO's GPU Adam is ``FusedAdam``, a multi-tensor in-place step).
Values ``"auto"`` are the HF Trainer's to fill and are left to it (``hf_trainer.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memcalc.configs.base import ConfigFile, Fields

KIND = "DeepSpeed config"

OPTIMIZERS = {"Adam": "adamw", "AdamW": "adamw", "Lion": "lion"}
"""DeepSpeed optimizer types memcalc models (``Adam`` with adam_w_mode true is AdamW)."""
OFFLOAD_DEVICES = {"none": None, "cpu": "cpu", "nvme": "nvme"}
GRAD_DTYPES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "bfloat16": "bf16"}

SILENT = {
    # no effect on GPU memory (logging, schedules, clipping, loss scaling) or the default
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
    "elasticity",
    "seed",
    "communication_data_type",
}
ZERO_SILENT = {
    # how ZeRO communicates or saves, not what it holds
    "allgather_partitions",
    "reduce_scatter",
    "round_robin_gradients",
    "load_from_fp32_weights",
    "elastic_checkpoint",
    "ignore_unused_parameters",
    "stage3_gather_16bit_weights_on_model_save",
    "gather_16bit_weights_on_model_save",
    "cpu_offload",
    "cpu_offload_params",
}
ZERO_UNMODELLED = {
    # buffers and prefetch limits that change what a rank holds, which memcalc does not model
    "reduce_bucket_size": "ZeRO's gradient reduction buckets are not modelled",
    "allgather_bucket_size": "ZeRO's all-gather buckets are not modelled",
    "overlap_comm": "the extra buckets of overlapped communication are not modelled",
    "contiguous_gradients": "ZeRO's contiguous gradient buffer is not modelled",
    "stage3_max_live_parameters": "ZeRO-3's limit of gathered parameters is not modelled",
    "stage3_max_reuse_distance": "ZeRO-3's parameter reuse window is not modelled",
    "stage3_prefetch_bucket_size": "ZeRO-3's prefetch bucket is not modelled",
    "stage3_param_persistence_threshold": "ZeRO-3's persistent small parameters are not modelled",
    "sub_group_size": "ZeRO's optimizer sub-groups are not modelled",
    "zero_hpz_partition_size": "ZeRO++ hierarchical partitioning is not modelled",
    "zero_quantized_weights": "ZeRO++ quantized weights are not modelled",
    "zero_quantized_gradients": "ZeRO++ quantized gradients are not modelled",
    "mics_shard_size": "MiCS sharding is not modelled",
}
UNMODELLED = {
    "activation_checkpointing": "DeepSpeed's activation checkpointing applies to models that "
    "call deepspeed.checkpointing (Megatron-DeepSpeed); an HF model checkpoints through "
    "gradient_checkpointing (--recompute)",
    "sparse_attention": "sparse attention is not modelled",
    "pipeline": "DeepSpeed's pipeline engine is not modelled (--pp models Megatron's 1F1B)",
    "compression_training": "compression training is not modelled",
    "data_efficiency": "data efficiency (curriculum, token dropping) is not modelled",
    "amp": "apex AMP is not modelled (--precision amp-fp16 is torch.autocast)",
    "aio": "NVMe I/O settings are not modelled",
}


def read_deepspeed(data: Mapping[str, Any], path: Path) -> ConfigFile:
    result = ConfigFile(KIND, path)
    f = Fields(data, result)
    f.set("batch", f.integer("train_micro_batch_size_per_gpu", auto=True))
    f.set("microbatches", f.integer("gradient_accumulation_steps", auto=True))
    f.set("global_batch", f.integer("train_batch_size", auto=True))
    _precision(f)
    _zero(f.table("zero_optimization"))
    grad = f.table("data_types").choice("grad_accum_dtype", GRAD_DTYPES)
    f.set("grad_dtype", grad)
    _optimizer(f)
    for key, why in UNMODELLED.items():
        if f.has(key) and f.raw(key) not in ({}, False):
            f.unmodelled(key, why)
    f.unknown(
        {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"}
        | {"bf16", "bfloat16", "fp16", "zero_optimization", "data_types", "optimizer"}
        | SILENT
        | set(UNMODELLED)
    )
    return result


def _precision(f: Fields) -> None:
    """bf16 / fp16 sections: 16-bit weights, fp32 master weights and optimizer states."""
    bf16 = f.table("bf16") if f.has("bf16") else f.table("bfloat16")
    fp16 = f.table("fp16")
    bf16_on, fp16_on = bf16.flag("enabled", auto=True), fp16.flag("enabled", auto=True)
    if bf16_on:
        f.set("precision", "bf16-mixed")
    elif fp16_on:
        f.set("precision", "fp16-mixed")
    elif bf16_on is False and fp16_on is False:
        f.set("precision", "fp32")


def _zero(z: Fields) -> None:
    z.set("zero", z.integer("stage"))
    optimizer = z.table("offload_optimizer").choice("device", OFFLOAD_DEVICES)
    z.offload("optimizer", optimizer)
    params = z.table("offload_param")
    where = params.choice("device", OFFLOAD_DEVICES)
    if where == "nvme":
        params.unmodelled("device", "'nvme': memcalc offloads parameters to cpu; read as cpu")
        where = "cpu"
    z.offload("params", where)
    for key, why in ZERO_UNMODELLED.items():
        z.unmodelled_if_set([key], why, unless=False)
    z.unknown({"stage", "offload_optimizer", "offload_param"} | ZERO_SILENT | set(ZERO_UNMODELLED))


def _optimizer(f: Fields) -> None:
    if not f.has("optimizer"):
        return  # the client (the HF Trainer) makes the optimizer
    opt = f.table("optimizer")
    kind = opt.choice("type", OPTIMIZERS)
    f.set("optimizer", kind)
    params = opt.table("params")
    if kind == "adamw" and params.flag("torch_adam") is not True:
        f.set("fused", True)  # FusedAdam: multi_tensor_apply, in place (ops/adam/fused_adam.py)
