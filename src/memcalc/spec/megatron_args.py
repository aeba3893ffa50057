"""A Megatron-LM argument list -> memcalc's ModelSpec, TrainingSetup and recompute strategy
(``--megatron-args FILE``; ``benchmarks/megatron_golden.py``).

The arguments are Megatron's names (``hidden_size`` or ``--hidden-size``), as
``megatron/training/arguments.py`` resolves them (a functional test's ``MODEL_ARGS``, or
``vars(args)`` after ``parse_args`` + ``validate_args``). Arguments memcalc does not read are
ignored; the ones that change memory and that memcalc does not model are refused
(``UNMODELLED``). Defaults are Megatron's (``arguments.py``): dropout 0.1, LayerNorm, GeLU,
biases, learned absolute positions, tied embeddings, ffn 4h.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memcalc.errors import MemcalcError
from memcalc.spec.megatron import MegatronOptions
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.validate import FieldError, parse

UNMODELLED = {
    "tp_comm_overlap": "userbuffers for TP communication overlap",
    "use_megatron_fsdp": "Megatron-FSDP",
    "use_torch_fsdp2": "torch FSDP2 under Megatron",
    "fp8_param_gather": "fp8 parameters",
    "fine_grained_activation_offloading": "fine-grained activation offloading",
    "multi_latent_attention": "multi-head latent attention",
    "distribute_saved_activations": "--distribute-saved-activations",
    "use_precision_aware_optimizer": "the precision-aware optimizer",
    "enable_cuda_graph": "CUDA graphs",
    "pipeline_model_parallel_layout": "a custom pipeline layout",
    "mtp_num_layers": "multi-token prediction",
    # GPTModel.__init__ (models/gpt/gpt_model.py): the output layer keeps every micro-batch's
    # input and output gradient (embedding_activation_buffer, grad_output_buffer) until
    # schedules.py finish_embedding_wgrad_compute at the pipeline flush; the golden case
    # (tp2 pp2) peaks 26% above memcalc without it
    "defer_embedding_wgrad_compute": "the deferred embedding weight-gradient GEMM",
}
"""Arguments that change memory in ways memcalc does not model: set (truthy), they are refused."""


@dataclass(frozen=True)
class MegatronRun:
    """What a Megatron argument list describes, in memcalc's terms."""

    spec: ModelSpec
    setup: TrainingSetup
    recompute: str
    """``--recompute`` (none, selective, every-k for full uniform, block for full block)."""
    every: int | None


class _Args:
    def __init__(self, args: Mapping[str, Any]) -> None:
        self.args = {str(k).lstrip("-").replace("-", "_"): v for k, v in args.items()}

    def get(self, key: str, default: Any = None) -> Any:
        value = self.args.get(key)
        if isinstance(value, str) and value.startswith("<") and ":" in value:
            value = value[1:].split(":")[0].split(".")[-1]  # "<AttnBackend.auto: 5>"
        if isinstance(value, str) and value.startswith("torch."):
            value = value[6:]
        return default if value is None else value

    def flag(self, key: str, default: bool = False) -> bool:
        return bool(self.get(key, default))


def model_spec(a: _Args, name: str) -> ModelSpec:
    """The model's shape and features."""
    h, heads = int(a.get("hidden_size")), int(a.get("num_attention_heads"))
    gated = a.flag("swiglu")
    fields: dict[str, Any] = {
        "name": name,
        "family": "gpt2",
        "vocab_size": int(a.get("vocab_size") or a.get("padded_vocab_size")),
        "hidden_size": h,
        "num_layers": int(a.get("num_layers")),
        "num_heads": heads,
        "num_kv_heads": int(a.get("num_query_groups")) if a.flag("group_query_attention") else None,
        "head_dim": int(a.get("kv_channels", h // heads)),
        "intermediate_size": int(a.get("ffn_hidden_size", 4 * h)),
        "max_position_embeddings": int(a.get("max_position_embeddings", a.get("seq_length"))),
        "norm": "rms_norm" if a.get("normalization") == "RMSNorm" else "layer_norm",
        "norm_bias": a.get("normalization", "LayerNorm") == "LayerNorm",
        "positions": "rotary" if a.get("position_embedding_type") == "rope" else "learned",
        "rotary_fraction": float(a.get("rotary_percent", 1.0)),
        "qk_norm": "per_head" if a.flag("qk_layernorm") else "none",
        "mlp": "gated" if gated else "plain",
        "activation": "silu" if gated else "gelu",
        "qkv_bias": a.flag("add_qkv_bias", a.flag("add_bias_linear", True)),
        "out_bias": a.flag("add_bias_linear", True),
        "mlp_bias": a.flag("add_bias_linear", True),
        "tie_embeddings": not a.flag("untie_embeddings_and_output_weights"),
        "embedding_dropout": float(a.get("hidden_dropout", 0.1)),
        "residual_dropout": float(a.get("hidden_dropout", 0.1)),
        "attention_dropout": float(a.get("attention_dropout", 0.1)),
    }
    experts = a.get("num_experts")
    if experts:
        fields["moe"] = {
            "num_experts": int(experts),
            "top_k": int(a.get("moe_router_topk", 2)),
            "expert_size": int(a.get("moe_ffn_hidden_size", fields["intermediate_size"])),
            "shared_expert_size": a.get("moe_shared_expert_intermediate_size"),
            "shared_experts": 1 if a.get("moe_shared_expert_intermediate_size") else 0,
            "capacity_factor": a.get("moe_expert_capacity_factor"),
        }
        fields |= _moe_layers(a.get("moe_layer_freq", 1), fields["num_layers"])
    return parse(ModelSpec, fields, "--megatron-args")


def _moe_layers(freq: Any, layers: int) -> dict[str, Any]:
    """``--moe-layer-freq``: every k-th layer an MoE layer (k = 1: all), or a 0/1 per layer."""
    from memcalc.spec.families.base import compress_layers

    if isinstance(freq, int):
        kinds = ["full-moe" if i % freq == 0 else "full" for i in range(layers)]
    else:
        kinds = ["full-moe" if f else "full" for f in freq]
    head, pattern = compress_layers(kinds)
    return {"first_layers": head, "layer_pattern": pattern}


def megatron_options(a: _Args, env: Mapping[str, Any]) -> MegatronOptions:
    """The memory-relevant Megatron arguments (``spec.megatron.MegatronOptions``)."""
    fusion = "none"
    if a.flag("cross_entropy_loss_fusion"):
        fusion = a.get("cross_entropy_fusion_impl", "native")
    gated = a.flag("swiglu")
    deterministic = str(env.get("NVTE_ALLOW_NONDETERMINISTIC_ALGO", "1")) == "0"
    fields = {
        "transformer_impl": a.get("transformer_impl", "transformer_engine"),
        "fused_adam": not {"transformer_engine", "apex"} <= set(env.get("uninstalled", ())),
        "fused_softmax": "apex" not in set(env.get("uninstalled", ())),
        "attention_softmax_in_fp32": a.flag("attention_softmax_in_fp32"),
        "attention_backend": a.get("attention_backend", "auto"),
        "deterministic": deterministic or a.flag("deterministic_mode"),
        "cross_entropy_fusion": fusion,
        "bias_activation_fusion": a.flag(
            "bias_swiglu_fusion" if gated else "bias_gelu_fusion", True
        ),
        "apply_rope_fusion": a.flag("apply_rope_fusion", True),
        "recompute_modules": tuple(a.get("recompute_modules") or ("core_attn",)),
        "overlap_grad_reduce": a.flag("overlap_grad_reduce"),
        "ddp_bucket_size": a.get("ddp_bucket_size"),
        "distributed_optimizer_instances": int(a.get("num_distributed_optimizer_instances", 1)),
        "make_vocab_size_divisible_by": int(a.get("make_vocab_size_divisible_by", 128)),
        "cublas_workspace_config": env.get("CUBLAS_WORKSPACE_CONFIG"),
        "microbatch_group_size_per_vp_stage": a.get("microbatch_group_size_per_vp_stage"),
        "first_stage_layers": a.get("decoder_first_pipeline_num_layers"),
        "last_stage_layers": a.get("decoder_last_pipeline_num_layers"),
        "account_for_embedding_in_pipeline_split": a.flag(
            "account_for_embedding_in_pipeline_split"
        ),
        "account_for_loss_in_pipeline_split": a.flag("account_for_loss_in_pipeline_split"),
        "moe_token_dispatcher": a.get("moe_token_dispatcher_type", "allgather"),
        "moe_grouped_gemm": a.flag("moe_grouped_gemm"),
    }
    return parse(MegatronOptions, fields, "--megatron-args")


def _precision(a: _Args) -> str:
    if a.flag("fp8"):
        return "fp8-mixed"
    if a.flag("bf16"):
        return "bf16-mixed"
    return "fp16-mixed" if a.flag("fp16") else "fp32"


def _layout(a: _Args, world_size: int | None) -> dict[str, Any]:
    tp = int(a.get("tensor_model_parallel_size", 1))
    pp = int(a.get("pipeline_model_parallel_size", 1))
    cp = int(a.get("context_parallel_size", 1))
    world = world_size or int(a.get("world_size", tp * pp * cp))
    if world % (tp * pp * cp):
        raise MemcalcError(f"--megatron-args: world size {world} is not a multiple of tp x pp x cp")
    dp = world // (tp * pp * cp)
    mbs = int(a.get("micro_batch_size", 1))
    gbs = int(a.get("global_batch_size", mbs * dp))
    return {
        "dp": dp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": int(a.get("expert_model_parallel_size", 1)),
        "etp": a.get("expert_tensor_parallel_size"),
        "sp": a.flag("sequence_parallel"),
        "vpp": int(a.get("virtual_pipeline_model_parallel_size") or 1),
        "microbatches": max(gbs // (mbs * dp), 1),
        "zero": 1 if a.flag("use_distributed_optimizer") else 0,
    }


def _recompute(a: _Args) -> tuple[str, int | None]:
    granularity = a.get("recompute_granularity")
    if granularity == "selective":
        return "selective", None
    if granularity == "full":
        k = int(a.get("recompute_num_layers", 1))
        return ("block" if a.get("recompute_method") == "block" else "every-k"), k
    return "none", None


def from_megatron_args(
    args: Mapping[str, Any],
    *,
    world_size: int | None = None,
    env: Mapping[str, Any] | None = None,
    name: str = "megatron-gpt",
) -> MegatronRun:
    """The run ``args`` describes on ``world_size`` GPUs (default ``args["world_size"]``, else
    tp x pp x cp), with the environment variables Megatron's kernels read (``env``:
    ``NVTE_ALLOW_NONDETERMINISTIC_ALGO``, ``CUBLAS_WORKSPACE_CONFIG``)."""
    a = _Args(args)
    for key, what in UNMODELLED.items():
        if a.get(key) not in (None, False, 0, "", [], ()):
            raise MemcalcError(f"--megatron-args: {key}: {what} is not modelled")
    spec = model_spec(a, name)
    try:
        setup = parse(
            TrainingSetup,
            {
                "batch": int(a.get("micro_batch_size", 1)),
                "seq": int(a.get("seq_length")),
                "precision": _precision(a),
                "grad_dtype": "fp32" if a.flag("accumulate_allreduce_grads_in_fp32") else None,
                "optimizer": "adamw"
                if a.get("optimizer", "adam") == "adam"
                else a.get("optimizer"),
                "parallel": _layout(a, world_size),
                "framework": "megatron",
                "megatron": megatron_options(a, env or {}),
            },
            "--megatron-args",
        )
    except FieldError as e:
        raise e.at("--megatron-args") from None
    recompute, every = _recompute(a)
    return MegatronRun(spec, setup, recompute, every)


def read_megatron_args(text: str) -> MegatronRun:
    """``--megatron-args``: inline JSON (``{"hidden_size": 4096, ...}``) or a .json, .toml or
    .yaml file of Megatron arguments -- a flat mapping, or a functional test's
    ``model_config.yaml`` (``MODEL_ARGS`` and ``ENV_VARS``). ``world_size`` (or
    ``WORLD_SIZE`` among the environment variables) gives the GPUs; ``env`` / ``ENV_VARS``
    the environment Megatron's kernels read."""
    from pathlib import Path

    from memcalc.files import parse_data, read_data_file, read_text_file

    where = "--megatron-args"
    if text.lstrip().startswith("{"):
        data = parse_data(text, "json", where)
    elif text.endswith((".yaml", ".yml")):
        data = _yaml(read_text_file(Path(text), where), where)
    else:
        data = read_data_file(Path(text), where)
    if not isinstance(data, dict):
        raise MemcalcError(f"{where}: expected a mapping of Megatron arguments")
    env = dict(data.get("ENV_VARS") or data.get("env") or {})
    args = dict(data.get("MODEL_ARGS") or {k: v for k, v in data.items() if k not in ("env",)})
    world = args.pop("world_size", None) or data.get("world_size") or env.get("WORLD_SIZE")
    return from_megatron_args(args, world_size=int(world) if world else None, env=env)


def _yaml(text: str, where: str) -> Any:
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise MemcalcError(
            f"{where}: reading YAML needs PyYAML: pip install 'memcalc-train[megatron]' "
            "(or give JSON / TOML)"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise MemcalcError(f"{where}: malformed YAML: {' '.join(str(e).split())}") from None
