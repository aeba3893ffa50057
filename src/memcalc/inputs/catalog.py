"""Every input flag of ``estimate`` and ``plan`` (and the setup flags ``measure``, ``trace`` and
``quiz`` share), declared once. The parallel layout's flags are Parallelism's fields."""

from __future__ import annotations

import dataclasses

from memcalc.frameworks import PARALLEL_IMPL_FRAMEWORKS, FrameworkName, ShardingEngine
from memcalc.inputs.flags import (
    Flag,
    boolean,
    choice,
    choice_of,
    integer,
    names,
    number,
    optional,
    optional_boolean,
    optional_integer,
    optional_text,
    path,
    text,
    tokens,
)
from memcalc.profiles import DEFAULT_GPU
from memcalc.spec.finetune import Quantize
from memcalc.spec.megatron import (
    AttentionBackend,
    CrossEntropyFusion,
    TokenDispatcher,
    TransformerImpl,
)
from memcalc.spec.parallel import CP_ROTATE_METHODS, Parallelism
from memcalc.spec.presets import DEFAULT_MODEL
from memcalc.spec.training import (
    DEFAULT_MOE_IMBALANCE,
    Attention,
    GradDType,
    Loss,
    OptimizerKind,
    Precision,
)
from memcalc.strategies.options import MIN_MFU
from memcalc.strategies.recompute import Recompute


def by_name(flags: tuple[Flag, ...]) -> dict[str, Flag]:
    """``flags`` by their keyword (to take a group's flags with another default)."""
    return {f.name: f for f in flags}


MFU = number(MIN_MFU, 1.0)
"""--mfu: a fraction of peak FLOP/s; below MIN_MFU a step's time is meaningless."""
RATE = number(0.0, 1.0, high_open=True)
"""A dropout rate."""
MFU_FLAG = Flag(
    "mfu",
    ("--mfu",),
    optional(MFU),
    None,
    "Rate every matmul and attention kernel at this fraction of peak instead of by its shape "
    "(default: the kernel model).",
    show_default=False,
)

MODEL = Flag(
    "model",
    ("--model",),
    text,
    DEFAULT_MODEL,
    "Preset (memcalc models list), its HF hub id, a memcalc spec TOML/JSON or an HF config.json.",
    short=("-m",),
)
REVISION = Flag(
    "revision",
    ("--revision",),
    optional_text,
    None,
    "With a hub id as --model: the branch, tag or commit whose config.json to read.",
)
CONFIG = Flag(
    "config",
    ("--config",),
    path,
    (),
    "A trainer config to read the job from (repeatable): DeepSpeed JSON, HF "
    "TrainingArguments / TRL SFTConfig, accelerate, axolotl, torchtitan, PEFT "
    "adapter_config.json (docs/configs.md). Flags override it.",
    multiple=True,
    show_default=False,
    metavar="FILE",
)
GPU = Flag(
    "gpu",
    ("--gpu",),
    text,
    DEFAULT_GPU,
    "GPU profile or alias (h100, a100, 4090; memcalc profiles list) or a profile file.",
)
GPU_MEMORY = Flag(
    "gpu_memory",
    ("--gpu-memory",),
    optional_text,
    None,
    "A GPU known by its memory only (e.g. 48GB, 24GiB; the other figures are the reference "
    "profile's), or with --gpu that GPU with this much memory.",
)
FIT = (
    Flag(
        "headroom",
        ("--headroom",),
        optional_text,
        "auto",
        "GPU memory kept free beyond what the step needs (e.g. 10% or 0.1); auto: 0 where the "
        "caching allocator's reserved memory is replayed, 10% (for fragmentation) where it is "
        "not.",
    ),
    Flag(
        "alloc_conf",
        ("--alloc-conf",),
        optional_text,
        None,
        "torch's caching allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (e.g. "
        "expandable_segments:True,max_split_size_mb:128); default: that variable's value "
        "when set.",
        metavar="CONF",
        show_default=False,
    ),
    Flag(
        "host_memory",
        ("--host-memory",),
        optional_text,
        None,
        "Host RAM per node for offloads (e.g. 1TiB); default: the GPU profile's server.",
    ),
)
SETUP = (
    Flag("batch", ("--batch",), integer, 1, "Micro-batch size (sequences).", short=("-b",)),
    Flag("seq", ("--seq",), tokens, 1024, "Sequence length (tokens; 4k = 4096).", short=("-s",)),
    Flag(
        "precision",
        ("--precision",),
        choice_of(Precision),
        Precision.bf16_mixed,
        "Precision recipe.",
    ),
    Flag(
        "grad_dtype",
        ("--grad-dtype",),
        optional(choice_of(GradDType)),
        None,
        "Gradient dtype under -mixed (fp32 default, or bf16/fp16).",
    ),
    Flag(
        "optimizer", ("--optimizer",), choice_of(OptimizerKind), OptimizerKind.adamw, "Optimizer."
    ),
    Flag(
        "foreach",
        ("--foreach",),
        boolean,
        True,
        "Multi-tensor optimizer step (temporaries the size of all parameters).",
        switch="--no-foreach",
    ),
    Flag(
        "fused",
        ("--fused",),
        boolean,
        False,
        "Fused AdamW (in place, step counters on the GPU).",
        switch="--no-fused",
    ),
    Flag("attention", ("--attention",), choice_of(Attention), Attention.sdpa, "Attention kernel."),
    Flag("loss", ("--loss",), choice_of(Loss), Loss.standard, "Loss implementation."),
    Flag(
        "dropout", ("--dropout",), optional(RATE), None, "Override every dropout rate of the model."
    ),
)
ROUTING = (
    Flag(
        "moe_imbalance",
        ("--moe-imbalance",),
        number(-1e308, 1e308),
        DEFAULT_MOE_IMBALANCE,
        "MoE: tokens the busiest expert gets, as a multiple of its fair share (dropless).",
    ),
    Flag(
        "capacity_factor",
        ("--capacity-factor",),
        optional(number(-1e308, 1e308)),
        None,
        "MoE: token-dropping routing, every expert buffer ceil(t*k/E * factor) rows.",
    ),
)

_LAYOUT_CLI = {
    "dp": {"help": "Data-parallel GPUs."},
    "tp": {"help": "Tensor-parallel GPUs."},
    "pp": {"help": "Pipeline stages (1F1B)."},
    "cp": {"help": "Context-parallel GPUs."},
    "cp_rotate": {
        "help": "CP under torch's context_parallel: K/V rotation (set_rotate_method).",
        "parse": choice(CP_ROTATE_METHODS),
    },
    "ep": {"help": "Expert-parallel GPUs (MoE)."},
    "etp": {
        "help": "Expert tensor-parallel GPUs (Megatron --expert-tensor-parallel-size; default tp)."
    },
    "sp": {"help": "Sequence parallelism with tp > 1 (Megatron).", "switch": "--no-sp"},
    "vpp": {"help": "Virtual stages per pipeline rank."},
    "microbatches": {"help": "Micro-batches per step (gradient accumulation; pipeline m)."},
    "zero": {"help": "ZeRO stage: 0 none, 1 optimizer, 2 +gradients, 3 +parameters (FSDP)."},
    "fsdp_reshard": {"help": "ZeRO-3/FSDP2 reshard_after_forward (true or false)."},
    "shard_size": {"help": "HSDP: shard within this many dp ranks."},
    "bucket_view": {
        "help": "DDP gradient_as_bucket_view (no bucket copy of the gradients).",
        "switch": "--no-bucket-view",
    },
}
"""How each Parallelism field is spelled on the command line (its docstring is in
``spec/parallel.py``)."""


def _layout_flag(f: dataclasses.Field[object]) -> Flag:
    cli: dict[str, object] = dict(_LAYOUT_CLI[f.name])
    spellings = cli.pop("spellings", ("--" + f.name.replace("_", "-"),))
    switch = cli.pop("switch", None)
    if "parse" in cli:
        parse = cli.pop("parse")
    elif f.type in ("bool", bool):
        parse = boolean
    elif f.default is None:
        parse = optional_integer
    else:
        parse = integer
    return Flag(
        f.name,
        spellings,  # type: ignore[arg-type]
        parse,
        f.default,
        str(cli.pop("help")),
        switch=switch,  # type: ignore[arg-type]
        show_default=f.default is not None,
    )


LAYOUT_FIELDS = tuple(f.name for f in dataclasses.fields(Parallelism))
"""The parallel layout's keys: Parallelism's fields, in order."""
LAYOUT = (
    *(_layout_flag(f) for f in dataclasses.fields(Parallelism)),
    Flag(
        "dp_gpus",
        ("--gpus",),
        optional_integer,
        None,
        "The same as --dp.",
    ),
    Flag(
        "framework",
        ("--framework",),
        optional(choice_of(FrameworkName)),
        None,
        "Whose code runs the step: hf (transformers with DDP / FSDP2, DTensor, "
        "torch.distributed.pipelining), megatron (Megatron-LM's parallel runtime), reference "
        "(memcalc's own model), torchtitan (0.3.0) or torchtitan-0.2.2 (its model code, "
        "op-level SAC, FSDP2 over dp x cp); default megatron with --tp / --pp, else hf.",
    ),
    Flag(
        "parallel_impl",
        ("--parallel-impl",),
        optional(choice(sorted(PARALLEL_IMPL_FRAMEWORKS))),
        None,
        "Deprecated: --framework megatron (megatron) or --framework hf (torch).",
        hidden=True,
    ),
)
MEGATRON = (
    Flag(
        "megatron_args",
        ("--megatron-args",),
        optional_text,
        None,
        "Megatron-LM arguments (a functional test's model_config.yaml, a .json/.toml mapping, "
        "or inline JSON): the model, layout and Megatron settings, run with --framework "
        "megatron.",
        metavar="FILE|JSON",
    ),
    Flag(
        "attention_backend",
        ("--attention-backend",),
        optional(choice_of(AttentionBackend)),
        None,
        "Megatron --attention-backend (auto: TE picks by GPU; default from --attention).",
    ),
    Flag(
        "transformer_impl",
        ("--transformer-impl",),
        optional(choice_of(TransformerImpl)),
        None,
        "Megatron --transformer-impl: transformer_engine (default) or local.",
    ),
    Flag(
        "cross_entropy_fusion",
        ("--cross-entropy-fusion",),
        optional(choice_of(CrossEntropyFusion)),
        None,
        "Megatron --cross-entropy-loss-fusion with --cross-entropy-fusion-impl.",
    ),
    Flag(
        "recompute_modules",
        ("--recompute-modules",),
        optional(names),
        None,
        "Megatron --recompute-modules for --recompute selective (comma-separated: core_attn, "
        "mlp, moe, moe_act, layernorm, shared_experts).",
    ),
    Flag(
        "overlap_grad_reduce",
        ("--overlap-grad-reduce",),
        optional_boolean,
        None,
        "Megatron --overlap-grad-reduce (bucketed DDP buffer).",
        switch="--no-overlap-grad-reduce",
    ),
    Flag(
        "moe_dispatcher",
        ("--moe-dispatcher",),
        optional(choice_of(TokenDispatcher)),
        None,
        "Megatron --moe-token-dispatcher-type.",
    ),
)
"""Megatron-LM's arguments that change memory (``--framework megatron`` only)."""
ENGINE = (
    Flag(
        "zero_engine",
        ("--zero-engine",),
        optional(choice_of(ShardingEngine)),
        None,
        "What implements data parallelism and ZeRO: torch (DDP / FSDP2, the default) or "
        "deepspeed (DeepSpeed's ZeRO engine: its flat buffers, buckets, ZeRO-3 coordinator and "
        "offload; needs --zero 1, 2 or 3). A DeepSpeed --config with a ZeRO stage sets it.",
    ),
    Flag(
        "ds",
        ("--ds",),
        text,
        (),
        "A DeepSpeed zero_optimization setting under --zero-engine deepspeed, by its JSON "
        "name (reduce_bucket_size=1e5, overlap_comm=true, stage3_max_reuse_distance=0, "
        "torch_adam=true, ...); repeatable. Default: DeepSpeed's.",
        multiple=True,
        show_default=False,
        metavar="KEY=VALUE",
    ),
)
"""The sharding engine and DeepSpeed's settings (``spec/deepspeed.py``)."""
FINETUNE = (
    Flag(
        "lora_rank",
        ("--lora-rank",),
        optional_integer,
        None,
        "LoRA on a frozen base with this rank (PEFT).",
    ),
    Flag(
        "lora_alpha",
        ("--lora-alpha",),
        number(0.0, 1e6, low_open=True),
        16.0,
        "lora_alpha (no memory effect; for parity with PEFT).",
    ),
    Flag(
        "lora_targets",
        ("--lora-targets",),
        optional(names),
        None,
        "Comma-separated module names (q_proj,v_proj,...) or all-linear; default: PEFT's for "
        "the family.",
    ),
    Flag("lora_dropout", ("--lora-dropout",), RATE, 0.0, "Dropout on the adapter input."),
    Flag(
        "quantize",
        ("--quantize",),
        choice_of(Quantize),
        Quantize.none,
        "Frozen base linear weights: int8 (LLM.int8), nf4, nf4-dq, fp4 (QLoRA).",
    ),
    Flag(
        "train_embeddings",
        ("--train-embeddings",),
        boolean,
        False,
        "Train the embeddings (and an untied head) in full.",
        switch="",
        show_default=False,
    ),
    Flag(
        "modules_to_save",
        ("--modules-to-save",),
        optional(names),
        None,
        "Comma-separated modules PEFT trains in full.",
    ),
    Flag(
        "kbit_prep",
        ("--kbit-prep",),
        optional_boolean,
        None,
        "PEFT prepare_model_for_kbit_training (fp32 non-quantized params, input grads); "
        "default on with --quantize.",
        switch="--no-kbit-prep",
    ),
    Flag(
        "input_grads",
        ("--input-grads",),
        optional_boolean,
        None,
        "The embedding output requires grad (enable_input_require_grads).",
        switch="--no-input-grads",
    ),
)
STRATEGY = (
    Flag(
        "recompute",
        ("--recompute",),
        optional(choice_of(Recompute)),
        None,
        "One recompute strategy (prints a detailed breakdown).",
    ),
    Flag(
        "every",
        ("--every", "--recompute-num-layers"),
        optional_integer,
        None,
        "k for --recompute every-k (default round(sqrt(N))) or block (the first k layers of "
        "each stage; Megatron --recompute-num-layers).",
    ),
    Flag(
        "budget",
        ("--budget",),
        optional_text,
        None,
        "Activation budget for --recompute budget, e.g. 20GiB or 2e10.",
    ),
    Flag(
        "offload",
        ("--offload",),
        text,
        (),
        "WHAT=WHERE, repeatable: optimizer=cpu|nvme, params=cpu, activations=cpu.",
        multiple=True,
        show_default=False,
    ),
    MFU_FLAG,
)
ESTIMATE = (
    MODEL,
    REVISION,
    CONFIG,
    GPU,
    GPU_MEMORY,
    *SETUP,
    *LAYOUT,
    *MEGATRON,
    *ENGINE,
    *FINETUNE,
    *ROUTING,
    *STRATEGY,
    *FIT,
)
"""The inputs of ``memcalc estimate`` (and ``memcalc.estimate``)."""

PLAN_ONLY = (
    Flag(
        "gpus",
        ("--gpu",),
        text,
        (),
        f"GPU profile or alias, repeatable to compare kinds (default {DEFAULT_GPU}).",
        multiple=True,
        show_default=False,
    ),
    Flag("max_gpus", ("--max-gpus",), integer, 64, "Most GPUs of one kind to use."),
    Flag(
        "global_batch",
        ("--global-batch",),
        optional_integer,
        None,
        "Sequences per optimizer step over all GPUs (micro-batch x accumulation x dp).",
    ),
    Flag(
        "global_tokens",
        ("--global-tokens",),
        optional_text,
        None,
        "Tokens per optimizer step (e.g. 4M): --global-batch = this / --seq.",
    ),
    Flag(
        "microbatches",
        ("--microbatches",),
        integer,
        1,
        "Accumulation steps without --global-batch (pipelines run at least pp).",
    ),
    MFU_FLAG,
    Flag(
        "maximize",
        ("--maximize",),
        optional(choice(["batch", "seq"])),
        None,
        "Also find the largest micro-batch or sequence length that fits.",
    ),
    Flag("top", ("--top",), integer, 10, "Rows of the ranked table."),
)
PLAN_CONSTRAINTS = (
    Flag(
        "tp",
        ("--tp",),
        optional_text,
        None,
        "Tensor-parallel degrees to try: one (8) or a set (4,8).",
    ),
    Flag("pp", ("--pp",), optional_text, None, "Pipeline stages to try (e.g. 1,2,4)."),
    Flag("cp", ("--cp",), optional_text, None, "Context-parallel degrees to try."),
    Flag("ep", ("--ep",), optional_text, None, "Expert-parallel degrees to try (MoE)."),
    Flag("zero", ("--zero",), optional_text, None, "ZeRO stages to try (e.g. 1 or 1,3)."),
    Flag(
        "recompute",
        ("--recompute",),
        optional_text,
        None,
        "Recompute strategies to try (e.g. none,selective,full).",
    ),
    Flag(
        "offload",
        ("--offload",),
        text,
        (),
        "Offload combinations to try: none, optimizer=cpu, ... (comma-separated; + joins "
        "one combination's parts: optimizer=cpu+activations=cpu).",
        multiple=True,
        show_default=False,
    ),
    Flag(
        "no_offload",
        ("--no-offload",),
        bool,
        False,
        "Offload nothing.",
        switch="",
        show_default=False,
    ),
    Flag(
        "max_step_time",
        ("--max-step-time",),
        optional_text,
        None,
        "Longest step accepted (e.g. 30s, 2min).",
    ),
    Flag(
        "min_tokens_per_s",
        ("--min-tokens-per-s",),
        optional_text,
        None,
        "Least throughput accepted: in all (2M) or per GPU (3000/gpu).",
    ),
    Flag(
        "impractical",
        ("--impractical",),
        bool,
        False,
        "Also offer configurations under 1/10 of the best tokens/s per GPU found.",
        switch="",
        show_default=False,
    ),
)
"""``memcalc plan``'s limits on the search (``plan.constraints.parse_constraints`` reads
them): the layout flags here are sets to search, not the setup's layout."""
PLAN = (
    MODEL,
    REVISION,
    CONFIG,
    *PLAN_ONLY[:1],
    GPU_MEMORY,
    *SETUP,
    *FINETUNE,
    *ROUTING,
    *PLAN_ONLY[1:5],
    *FIT,
    *PLAN_ONLY[5:],
    *PLAN_CONSTRAINTS,
)
"""The inputs of ``memcalc plan`` (and ``memcalc.plan``), in ``--help`` order."""
