"""A DeepSpeed config JSON (https://www.deepspeed.ai/docs/config-json/; the names of
``deepspeed/runtime/config.py`` and ``deepspeed/runtime/zero/config.py``).

Mapped: the batch (``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``,
``train_batch_size`` for plan's global batch), the ZeRO stage and its optimizer / parameter
offload, the precision (``bf16`` / ``fp16``: 16-bit weights with fp32 master weights in
DeepSpeed's optimizer, memcalc's ``-mixed``), the gradient accumulation dtype, and the
optimizer (``Adam`` runs as AdamW: ``adam_w_mode`` defaults to true in
``runtime/engine.py``; ZeRO's GPU Adam is ``FusedAdam``, a multi-tensor in-place step).
Values ``"auto"`` are the HF Trainer's to fill and are left to it (``hf_trainer.py``).

A ZeRO stage runs under DeepSpeed's own engine (``zero_engine`` deepspeed,
``strategies/residency/deepspeed/``), and the ``zero_optimization`` keys that engine models
(its buckets, ``overlap_comm``, ZeRO-3's prefetch / persistence / reuse limits, sub-groups,
pinned offload buffers; ``spec/deepspeed.py``), ``communication_data_type`` and the optimizer's
``torch_adam`` become its ``ds`` settings (``--ds KEY=VALUE``). What that engine does not model
(NVMe offload, offload under gradient accumulation, ``contiguous_gradients`` false, an
optimizer other than Adam / AdamW) is a warning and the stage is estimated under torch's ZeRO
instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memcalc.configs.base import AUTO, ConfigFile, Fields
from memcalc.spec.deepspeed import FIELDS, parse_settings
from memcalc.validate import FieldError

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
}
ZERO_SILENT = {
    # how ZeRO communicates or saves, not what it holds
    "allgather_partitions",
    "round_robin_gradients",
    "load_from_fp32_weights",
    "elastic_checkpoint",
    "ignore_unused_parameters",
    "stage3_gather_16bit_weights_on_model_save",
    "gather_16bit_weights_on_model_save",
    "cpu_offload",
    "cpu_offload_params",
    "log_trace_cache_warnings",
    "enable_sanity_checks",
}
ALIASES = {
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "param_persistence_threshold": "stage3_param_persistence_threshold",
    "model_persistence_threshold": "stage3_model_persistence_threshold",
    "max_live_parameters": "stage3_max_live_parameters",
    "max_reuse_distance": "stage3_max_reuse_distance",
}
"""``DeepSpeedZeroConfig``'s field names for its ``stage3_*`` JSON aliases (runtime/zero/
config.py): both spellings are read."""
SETTING_FIELDS = {
    "communication_data_type": "communication_data_type",
    "torch_adam": "optimizer.params.torch_adam",
    "offload_optimizer_pin_memory": "zero_optimization.offload_optimizer.pin_memory",
    "offload_param_pin_memory": "zero_optimization.offload_param.pin_memory",
}
"""Where a ``ds`` setting not under ``zero_optimization`` is in the file (for its errors)."""
ZERO_UNMODELLED = {
    # what DeepSpeed's ZeRO engine does that memcalc's model of it leaves out
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
    ds = _zero(f.table("zero_optimization"))
    grad = f.table("data_types").choice("grad_accum_dtype", GRAD_DTYPES)
    f.set("grad_dtype", grad)
    ds += _optimizer(f)
    communication = f.raw("communication_data_type")
    if communication not in (None, AUTO):
        ds.append(f"communication_data_type={communication}")
    run_under_deepspeed(f, ds)
    for key, why in UNMODELLED.items():
        if f.has(key) and f.raw(key) not in ({}, False):
            f.unmodelled(key, why)
    f.unknown(
        {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"}
        | {"bf16", "bfloat16", "fp16", "zero_optimization", "data_types", "optimizer"}
        | {"communication_data_type"}
        | SILENT
        | set(UNMODELLED)
    )
    return result


def run_under_deepspeed(f: Fields, ds: list[str]) -> None:
    """A ZeRO stage under DeepSpeed's engine with the file's settings (checked here, so that a
    bad one names the file), unless the file asks for what that engine is not modelled for."""
    options = f.result.options
    options.pop("zero_engine", None)  # a nested file's (accelerate's zero_stage decides)
    options.pop("ds", None)
    if not options.get("zero"):
        return
    why = None
    if "optimizer=nvme" in options.get("offload", ()):
        why = "NVMe offload (DeepSpeed's swapper) not modelled"
    elif (options.get("microbatches") or 1) > 1 and options.get("offload"):
        why = (
            "offload under gradient accumulation (async_accumulate_grad_in_cpu_via_gpu) not "
            "modelled"
        )
    elif "contiguous_gradients=false" in ds:
        why = "contiguous_gradients false (its non-contiguous reduction path) not modelled"
    elif options.get("optimizer", "adamw") != "adamw":
        why = f"its {options['optimizer']} optimizer not modelled"
    if why is not None:
        f.unmodelled(
            "zero_optimization", f"DeepSpeed's ZeRO engine with {why}: estimated under torch's ZeRO"
        )
        return
    try:
        parse_settings(ds, f.where)
    except FieldError as e:
        raise f.fail(
            SETTING_FIELDS.get(e.field, f"zero_optimization.{e.field}"), e.problem
        ) from None
    f.set("zero_engine", "deepspeed")
    f.set("ds", ds or None)


def _precision(f: Fields) -> None:
    """bf16 / fp16 sections: 16-bit weights, fp32 master weights and optimizer states."""
    bf16 = f.table("bf16") if f.has("bf16") else f.table("bfloat16")
    fp16 = f.table("fp16")
    bf16_on, fp16_on = bf16.flag("enabled", auto=True), fp16.flag("enabled", auto=True)
    if bf16_on:
        f.set("precision", "bf16-mixed")
    elif fp16_on:
        f.set("precision", "fp16-mixed")
    elif bf16_on is not None or fp16_on is not None or not (f.has("bf16") or f.has("fp16")):
        f.set("precision", "fp32")  # neither enabled (nor "auto"): DeepSpeed trains in fp32


def _zero(z: Fields) -> list[str]:
    """The stage and offloads as memcalc options; the settings DeepSpeed's engine models as
    ``KEY=VALUE`` items (``spec/deepspeed.py``)."""
    z.set("zero", z.integer("stage"))
    optimizer = z.table("offload_optimizer")
    z.offload("optimizer", optimizer.choice("device", OFFLOAD_DEVICES))
    params = z.table("offload_param")
    where = params.choice("device", OFFLOAD_DEVICES)
    if where == "nvme":
        params.unmodelled("device", "'nvme': memcalc offloads parameters to cpu; read as cpu")
        where = "cpu"
    z.offload("params", where)
    ds = [
        f"{key}_pin_memory=false"
        for key, table in (("offload_optimizer", optimizer), ("offload_param", params))
        if table.flag("pin_memory") is False
    ]
    for key, value in z.data.items():
        name = ALIASES.get(key, key)
        if name in FIELDS and value not in (None, AUTO):
            ds.append(f"{name}={_text(value)}")
    if z.flag("use_multi_rank_bucket_allreduce") is False:
        z.unmodelled(
            "use_multi_rank_bucket_allreduce",
            "false: the per-rank reduction is not modelled (read as true)",
        )
    for key, why in ZERO_UNMODELLED.items():
        z.unmodelled_if_set([key], why, unless=False)
    z.unknown(
        {"stage", "offload_optimizer", "offload_param", "use_multi_rank_bucket_allreduce"}
        | ZERO_SILENT
        | set(ZERO_UNMODELLED)
        | set(FIELDS)
        | set(ALIASES)
    )
    return ds


def _text(value: Any) -> str:
    """A JSON value as ``--ds`` writes it (5e8 -> 500000000, true)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _optimizer(f: Fields) -> list[str]:
    """The optimizer; ``torch_adam`` as a DeepSpeed setting."""
    if not f.has("optimizer"):
        return []  # the client (the HF Trainer) makes the optimizer
    opt = f.table("optimizer")
    kind = opt.choice("type", OPTIMIZERS)
    f.set("optimizer", kind)
    params = opt.table("params")
    torch_adam = params.flag("torch_adam") is True
    if kind == "adamw" and not torch_adam:
        f.set("fused", True)  # FusedAdam: multi_tensor_apply, in place (ops/adam/fused_adam.py)
    return ["torch_adam=true"] if torch_adam else []
