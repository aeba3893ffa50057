"""A torchtitan TOML (``--job.config_file``; the dataclasses of torchtitan 0.1 / 0.2
``torchtitan/config/job_config.py``: ``[model]``, ``[training]``, ``[parallelism]``,
``[activation_checkpoint]``, ``[optimizer]``, ``[compile]``).

The model is the preset of the same sizes (``[model] name`` and ``flavor``). Llama 3 and Qwen3
run under ``--framework torchtitan-0.2.2`` (the release whose ``JobConfig`` this format is): its
model code, op-level and layer-level selective checkpointing and FSDP2 grouping; other models
(DeepSeek-V3) are estimated with the HF implementation of their sizes, said in a warning.
``data_parallel_shard_degree`` > 1 is FSDP2 (ZeRO-3), with ``data_parallel_replicate_degree``
HSDP; its default -1 takes every GPU torchrun starts, which the file does not say. FSDP2's
``MixedPrecisionPolicy`` (``mixed_precision_param`` / ``mixed_precision_reduce``) is the
``fsdp-bf16`` recipe; ``training.dtype = "bfloat16"`` trains in bf16 throughout.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memcalc.configs.base import ConfigFile, Fields

KIND = "torchtitan config"
FRAMEWORK = "torchtitan-0.2.2"
"""The framework of a TOML job config (0.3 reads Python configs)."""
MODEL_CODE = {"llama3", "qwen3"}
"""The ``[model] name``s memcalc lowers with torchtitan's code (frameworks/torchtitan.py)."""

FLAVORS: dict[str, dict[str, str]] = {
    # [model] name -> flavor -> the preset of those sizes (torchtitan/models/*/__init__.py)
    "llama3": {"8B": "llama-3.1-8b", "70B": "llama-3.1-70b", "405B": "llama-3.1-405b"},
    "qwen3": {
        "0.6B": "qwen3-0.6b",
        "1.7B": "qwen3-1.7b",
        "4B": "qwen3-4b",
        "8B": "qwen3-8b",
        "14B": "qwen3-14b",
        "32B": "qwen3-32b",
        "30B-A3B": "qwen3-30b-a3b",
        "235B-A22B": "qwen3-235b-a22b",
    },
    "deepseek_v3": {"671B": "deepseek-v3"},
}
OPTIMIZERS = {"AdamW": "adamw", "Adam": "adam"}
TABLES = {
    "model",
    "training",
    "parallelism",
    "activation_checkpoint",
    "optimizer",
    "compile",
    "float8",
    "mx",
}
SILENT_TABLES = {
    # logging, checkpoints, schedules, data, validation: no effect on a training step's memory
    "job",
    "profiling",
    "metrics",
    "checkpoint",
    "lr_scheduler",
    "comm",
    "validation",
    "fault_tolerance",
    "experimental",
    "memory_estimation",
    "debug",
    "quantize",  # float8 / mx settings, applied only through [model] converters (warned)
}


def read_torchtitan(data: Mapping[str, Any], path: Path) -> ConfigFile:
    result = ConfigFile(KIND, path)
    f = Fields(data, result)
    own_code = _model(f.table("model"))
    training = f.table("training")
    _parallelism(f.table("parallelism"), training)
    _recompute(f.table("activation_checkpoint"), own_code)
    opt = f.table("optimizer")
    opt.set("optimizer", opt.choice("name", OPTIMIZERS))
    implementation = opt.text("implementation")
    if implementation == "fused":
        opt.set("fused", True)
    elif implementation == "for-loop":
        opt.set("foreach", False)
    if opt.flag("early_step_in_backward"):
        opt.unmodelled(
            "early_step_in_backward", "true: gradients freed as each step runs; not modelled"
        )
    if f.table("compile").flag("enable"):
        f.table("compile").unmodelled("enable", "true: torch.compile changes what is saved")
    for table in ("float8", "mx"):
        if f.has(table) and f.raw(table):
            f.unmodelled(table, "low-precision training recipes are not modelled")
    f.unknown(TABLES | SILENT_TABLES)
    return result


def _model(m: Fields) -> bool:
    """Set the preset (and torchtitan's framework where memcalc has its model code); whether
    it has."""
    name, flavor = m.text("name"), m.text("flavor")
    if m.names("converters"):
        m.unmodelled("converters", "model converters (float8, ...) are not modelled")
    if name is None:
        return False
    preset = FLAVORS.get(name, {}).get(flavor or "")
    if preset is None:
        m.unmodelled(
            "flavor",
            f"{name} {flavor!r} has no preset of its sizes (memcalc reads: "
            + "; ".join(f"{n} {', '.join(v)}" for n, v in FLAVORS.items())
            + "); pass --model",
        )
        return False
    m.set("model", preset)
    if name in MODEL_CODE:
        m.set("framework", FRAMEWORK)
        return True
    m.unmodelled(
        "name",
        f"{name!r}: torchtitan runs its own model code; memcalc estimates the HF "
        f"implementation of the same sizes ({preset})",
    )
    return False


def _parallelism(p: Fields, t: Fields) -> None:
    local = t.integer("local_batch_size") if t.has("local_batch_size") else t.integer("batch_size")
    replicate = p.integer("data_parallel_replicate_degree") or 1
    shard = p.integer("data_parallel_shard_degree")
    if shard is None:
        shard = -1  # JobConfig's default
    if shard == -1:
        p.unmodelled(
            "data_parallel_shard_degree",
            "-1 (the default) shards over every GPU torchrun starts, which the file does not "
            "say: pass --dp (read as FSDP over --dp)",
        )
    dp = replicate * max(shard, 1)
    p.set("dp", dp if dp > 1 else None)
    if shard != 1:
        p.set("zero", 3)
        if replicate > 1 and shard > 1:
            p.set("shard_size", shard)
    for key, option in (
        ("tensor_parallel_degree", "tp"),
        ("pipeline_parallel_degree", "pp"),
        ("context_parallel_degree", "cp"),
        ("expert_parallel_degree", "ep"),
    ):
        degree = p.integer(key)
        p.set(option, degree if degree and degree > 1 else None)
    rotate = p.text("context_parallel_rotate_method")  # torchtitan passes it to
    if rotate is not None:  # torch's set_rotate_method (dist_utils create_context_parallel_ctx)
        p.set("cp_rotate", rotate)
    reshard = p.text("fsdp_reshard_after_forward")
    if reshard in ("always", "never"):
        p.set("fsdp_reshard", reshard == "always")
    if p.flag("enable_async_tensor_parallel"):
        p.unmodelled("enable_async_tensor_parallel", "true: async TP buffers are not modelled")
    micro = p.integer("pipeline_parallel_microbatch_size")
    if (p.integer("pipeline_parallel_degree") or 1) > 1 and micro and local:
        t.set("batch", micro)
        t.set("microbatches", max(1, local // micro))
    else:
        t.set("batch", local)
        total = t.integer("global_batch_size")
        if total is not None and total > 0 and local and dp > 0:
            t.set("microbatches", max(1, total // (local * dp)))
    t.set("seq", t.integer("seq_len"))
    if t.text("dtype") == "bfloat16":
        t.set("precision", "bf16")
    elif t.text("mixed_precision_param") == "bfloat16" and shard != 1:
        # MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=mixed_precision_reduce)
        t.set("precision", "fsdp-bf16")
        if t.text("mixed_precision_reduce") not in (None, "float32"):
            t.unmodelled("mixed_precision_reduce", "only float32 reduce-scatters are modelled")
    if t.flag("enable_cpu_offload"):
        t.offload("params", "cpu")
        t.offload("optimizer", "cpu")  # FSDP2 CPUOffloadPolicy: the optimizer steps on the host


def _recompute(ac: Fields, own_code: bool) -> None:
    """``[activation_checkpoint]``: under torchtitan's framework its modes as it runs them
    (T22 distributed/activation_checkpoint.py: ``selective_ac_option`` "op" is op-level SAC, a
    number N wraps every N-th block; the defaults are mode "selective", option "2")."""
    mode = ac.text("mode") or ("selective" if own_code else None)
    option = str(ac.raw("selective_ac_option") or "2")
    if mode is None:
        ac.unmodelled(
            "mode",
            "not set: torchtitan's default is 'selective' (every second layer checkpointed), "
            "which is not modelled for this model; pass --recompute",
        )
    elif mode in ("none", "full"):
        ac.set("recompute", mode)
    elif mode == "selective" and own_code and option == "op":
        ac.set("recompute", "selective")
    elif mode == "selective" and own_code and option.isdigit() and int(option) > 0:
        ac.set("recompute", "every-k")
        ac.set("every", int(option))
    elif mode == "selective":
        ac.unmodelled(
            "mode",
            f"'selective' (selective_ac_option {option!r}): torchtitan's per-op / "
            "every-n-layers checkpointing is modelled only for its own model code (llama3, "
            "qwen3); pass --recompute",
        )
    elif mode == "memory_budget":
        ac.unmodelled("mode", "'memory_budget': pass --recompute budget --budget SIZE")
