"""An accelerate config YAML (``accelerate config`` / ``accelerate launch --config_file``: the
fields of ``accelerate/commands/config/config_args.py`` ``ClusterConfig``), with its FSDP,
DeepSpeed and Megatron-LM plugin sections.

``num_processes`` is every process over all machines; it is the data-parallel size unless
Megatron-LM splits it (``distributed_type: NO`` runs one process whatever it says).
``mixed_precision`` is ``torch.autocast`` over fp32 weights (``amp-bf16``) except under
DeepSpeed, whose bf16 / fp16 engine keeps 16-bit weights and fp32 master weights
(``bf16-mixed``); FSDP's bf16 ``MixedPrecision`` keeps fp32 sharded parameters and computes in
bf16, read as ``amp-bf16``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memcalc.configs.base import ConfigFile, Fields
from memcalc.configs.deepspeed import OFFLOAD_DEVICES, read_deepspeed, run_under_deepspeed
from memcalc.configs.hf_trainer import read_fsdp_options

KIND = "accelerate config"

DISTRIBUTED = {"NO", "MULTI_GPU", "DEEPSPEED", "FSDP", "MEGATRON_LM"}
BITS = {"no": None, "bf16": "bf16", "fp16": "fp16"}
SILENT = {
    # where and how processes start, loading and saving: no effect on GPU memory
    "compute_environment",
    "debug",
    "downcast_bf16",
    "enable_cpu_affinity",
    "gpu_ids",
    "machine_rank",
    "main_training_function",
    "main_process_ip",
    "main_process_port",
    "rdzv_backend",
    "same_network",
    "tpu_env",
    "tpu_use_cluster",
    "tpu_use_sudo",
    "tpu_name",
    "tpu_zone",
    "commands",
    "command_file",
    "num_machines",
    "use_cpu",
}
DEEPSPEED_SILENT = {
    "deepspeed_multinode_launcher",
    "zero3_init_flag",
    "zero3_save_16bit_model",
    "gradient_clipping",
    "deepspeed_hostfile",
    "deepspeed_exclusion_filter",
    "deepspeed_inclusion_filter",
    "offload_optimizer_nvme_path",
    "offload_param_nvme_path",
}
FSDP_SILENT = {
    "fsdp_version",
    "fsdp_backward_prefetch",
    "fsdp_cpu_ram_efficient_loading",
    "fsdp_state_dict_type",
    "fsdp_sync_module_states",
    "fsdp_use_orig_params",
    "fsdp_transformer_layer_cls_to_wrap",
    "fsdp_min_num_params",
}


def read_accelerate(data: Mapping[str, Any], path: Path) -> ConfigFile:
    result = ConfigFile(KIND, path)
    f = Fields(data, result)
    kind = (f.text("distributed_type") or "NO").upper()
    if kind not in DISTRIBUTED:
        f.unmodelled("distributed_type", f"{kind!r}: memcalc models {', '.join(DISTRIBUTED)}")
    processes = f.integer("num_processes") or 1
    if f.flag("use_cpu"):
        f.unmodelled("use_cpu", "true: memcalc estimates GPU memory")
    if kind == "NO" and processes > 1:
        f.unmodelled("num_processes", f"{processes} with distributed_type NO: one process")
    bits = f.choice("mixed_precision", BITS)
    if f.text("mixed_precision") == "fp8":
        f.unmodelled("mixed_precision", "'fp8' through accelerate is not modelled; read as bf16")
        bits = "bf16"
    if kind == "DEEPSPEED":
        _deepspeed(f.table("deepspeed_config"), f)
    elif kind == "FSDP":
        fsdp = f.table("fsdp_config")
        f.set("zero", 3)  # FULL_SHARD unless fsdp_sharding_strategy / reshard says otherwise
        read_fsdp_options(fsdp)
        fsdp.unknown(
            {f"fsdp_{k}" for k in ("activation_checkpointing", "offload_params")}
            | {"fsdp_reshard_after_forward", "fsdp_sharding_strategy", "fsdp_forward_prefetch"}
            | {"fsdp_auto_wrap_policy"}
            | FSDP_SILENT
        )
    elif kind == "MEGATRON_LM":
        _megatron(f.table("megatron_lm_config"))
    parallel = (result.options.get("tp", 1) or 1) * (result.options.get("pp", 1) or 1)
    if kind != "NO":
        f.set("dp", max(1, processes // parallel))
    if bits is not None:
        f.set("precision", f"{bits}-mixed" if kind == "DEEPSPEED" else f"amp-{bits}")
    if isinstance(f.raw("dynamo_config"), Mapping) and f.table("dynamo_config").text(
        "dynamo_backend"
    ) not in (None, "NO"):
        f.unmodelled("dynamo_config", "torch.compile changes which tensors are saved")
    if f.has("fp8_config"):
        f.unmodelled("fp8_config", "accelerate's fp8 recipes are not modelled")
    f.unknown(
        {"distributed_type", "num_processes", "mixed_precision", "deepspeed_config"}
        | {"fsdp_config", "megatron_lm_config", "dynamo_config", "fp8_config"}
        | SILENT
    )
    return result


def _deepspeed(ds: Fields, f: Fields) -> None:
    """The DeepSpeed plugin: its own fields, or the DeepSpeed JSON it names."""
    name = ds.text("deepspeed_config_file")
    if name:
        from memcalc.configs.files import nested_file

        data, found = nested_file(ds, "deepspeed_config_file", name)
        if data is not None:
            inner = read_deepspeed(data, found)
            inner.options.pop("precision", None)  # accelerate's mixed_precision decides
            f.result.merge(inner)
    ds.set("zero", ds.integer("zero_stage"))
    ds.set("microbatches", ds.integer("gradient_accumulation_steps", auto=True))
    ds.offload("optimizer", ds.choice("offload_optimizer_device", OFFLOAD_DEVICES))
    where = ds.choice("offload_param_device", OFFLOAD_DEVICES)
    if where == "nvme":
        ds.unmodelled("offload_param_device", "'nvme': memcalc offloads parameters to cpu")
        where = "cpu"
    ds.offload("params", where)
    run_under_deepspeed(f, list(f.result.options.get("ds", ())))
    ds.unknown(
        {"deepspeed_config_file", "zero_stage", "gradient_accumulation_steps"}
        | {"offload_optimizer_device", "offload_param_device"}
        | DEEPSPEED_SILENT
    )


def _megatron(m: Fields) -> None:
    """accelerate's MegatronLMPlugin (``megatron_lm_*`` fields)."""
    m.set("tp", m.integer("megatron_lm_tp_degree"))
    m.set("pp", m.integer("megatron_lm_pp_degree"))
    m.set("microbatches", m.integer("megatron_lm_num_micro_batches"))
    sp = m.flag("megatron_lm_sequence_parallelism")
    if sp is not None:
        m.set("sp", sp)
    if m.flag("megatron_lm_recompute_activations"):
        m.set("recompute", "selective")
    if m.flag("megatron_lm_use_distributed_optimizer"):
        m.set("zero", 1)
    m.unknown(
        {f"megatron_lm_{k}" for k in ("tp_degree", "pp_degree", "num_micro_batches")}
        | {f"megatron_lm_{k}" for k in ("sequence_parallelism", "recompute_activations")}
        | {"megatron_lm_use_distributed_optimizer", "megatron_lm_gradient_clipping"}
    )
