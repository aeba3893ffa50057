"""A parallel layout applied to a real model with torch's own mechanisms, on one rank.

* DDP: ``DistributedDataParallel`` (``bucket_cap_mb`` 25, the default;
  ``gradient_as_bucket_view`` from ``--bucket-view``). Its gradient buckets live in the C++
  reducer; a comm hook (torch's own ``allreduce_hook``, what the built-in path runs) hands
  them to the tracker.
* ZeRO-3: FSDP2, ``fully_shard`` on every decoder block, then on the root (torchtitan's
  ``apply_fsdp``), ``reshard_after_forward`` from ``--fsdp-reshard``; HSDP with a 2-D mesh when
  ``--shard-size`` is below dp.
* TP: DTensor, ``parallelize_module`` with torchtitan's Llama plan: ``ColwiseParallel`` for
  q/k/v and gate/up, ``RowwiseParallel`` for the out and down projections, a vocab-parallel
  embedding (``RowwiseParallel`` on ``nn.Embedding``) and LM head (``ColwiseParallel`` keeping
  the logits sharded for ``loss_parallel``); with ``--sp`` the norms run ``SequenceParallel`` and
  the attention / MLP inputs are all-gathered by ``PrepareModuleInput``.

What each one cannot do here is a one-line ``MemcalcError`` from ``check_layout`` before any
process starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from memcalc.errors import MemcalcError
from memcalc.frameworks import ShardingEngine
from memcalc.measure.build import Impl, layer_list
from memcalc.measure.strategies import _Member
from memcalc.spec.model import Family, ModelSpec
from memcalc.spec.parallel import Parallelism
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.offload import Offload

LLAMA_LIKE = (Family.llama, Family.mistral, Family.qwen2)
"""Families whose projections are separate q/k/v and gate/up linears (what the TP plan names)."""


def _check_ranks(par: Parallelism, nproc: int) -> None:
    if nproc < 2:
        raise MemcalcError(f"--nproc: a parallel run needs at least 2 ranks, got {nproc}")
    if par.world_size != nproc:
        raise MemcalcError(
            f"--nproc: {nproc} ranks, but the layout has dp x tp x pp x cp = {par.world_size}"
        )


def check_deepspeed_layout(
    spec: ModelSpec,
    setup: TrainingSetup,
    impl: Impl,
    nproc: int,
    device: str,
    offload: tuple[Offload, ...] = (),
) -> None:
    """A one-line MemcalcError when ``measure --zero-engine deepspeed --nproc`` cannot run:
    DeepSpeed must be installed (the ``deepspeed`` extra), the HF model (``--framework hf``),
    data parallelism only (the setup's own check), its CPU accelerator without fp16 (mkldnn's
    fp16 support decides ``is_fp16_supported``), offload to cpu only."""
    import importlib.util

    _check_ranks(setup.parallel, nproc)
    if importlib.util.find_spec("deepspeed") is None:
        raise MemcalcError(
            "--zero-engine deepspeed: DeepSpeed is not installed; install the extra without "
            "building its ops: DS_BUILD_OPS=0 pip install --no-build-isolation '.[deepspeed]'"
        )
    if impl is not Impl.hf:
        raise MemcalcError(
            "--zero-engine deepspeed: measure runs DeepSpeed on the HF model; add --framework hf"
        )
    if device == "cpu" and setup.weight_dtype.value == "fp16":
        raise MemcalcError(
            "--precision fp16-mixed: DeepSpeed's CPU accelerator runs fp32 and bf16 only here; "
            "use bf16-mixed or fp32"
        )
    if any(o.where.value != "cpu" or o.what.value == "activations" for o in offload):
        raise MemcalcError(
            "--offload: measure runs DeepSpeed's offload_optimizer / offload_param to cpu "
            "(optimizer=cpu, params=cpu)"
        )


def check_layout(
    spec: ModelSpec,
    setup: TrainingSetup,
    impl: Impl,
    nproc: int,
    device: str,
    offload: tuple[Offload, ...] = (),
) -> None:
    """A one-line MemcalcError when ``measure --nproc`` cannot run this layout."""
    par = setup.parallel
    _check_ranks(par, nproc)
    if offload:
        raise MemcalcError("--offload: not measured under --nproc (one rank's runner only)")
    dims = [n for n in ("dp", "tp", "pp", "cp") if getattr(par, n) > 1]
    if len(dims) > 1:
        raise MemcalcError(
            f"--nproc: measure runs one parallel dimension at a time; got {', '.join(dims)} > 1"
        )
    if setup.precision.is_mixed:
        raise MemcalcError(
            f"--precision: {setup.precision.value} is not measured under --nproc (its fp32 "
            "master copies sit beside DDP / FSDP2 / DTensor parameters); use fp32, bf16, fp16 "
            "or amp-bf16"
        )
    if par.ep > 1:
        raise MemcalcError("--ep: expert parallelism is not measured")
    if par.microbatches > 1 and par.pp == 1:
        raise MemcalcError("--microbatches: gradient accumulation is measured only with --pp")
    if par.dp > 1 and par.zero == 1:
        raise MemcalcError(
            "--zero: ZeRO-1 is not measured: torch's ZeroRedundancyOptimizer partitions whole "
            "parameters (greedy by size), not the flat 1/dp slices of ZeRO the estimate "
            "models; use --zero 0 (DDP) or --zero 3 (FSDP2)"
        )
    if par.dp > 1 and par.zero == 2:
        raise MemcalcError(
            "--zero: ZeRO-2 is not measured: torch has no mechanism that shards gradients and "
            "optimizer states but keeps every parameter (FSDP2 shards the parameters at rest "
            "even with reshard_after_forward=False); use --zero 0 (DDP) or --zero 3 (FSDP2)"
        )
    if par.tp > 1:
        if spec.family not in LLAMA_LIKE:
            raise MemcalcError(
                f"--tp: measure's tensor-parallel plan names Llama-style q/k/v and gate/up "
                f"projections; {spec.name} ({spec.family.value}) fuses them"
            )
        if spec.tie_embeddings:
            raise MemcalcError(
                "--tp: a tied LM head is one weight in two modules, and parallelize_module "
                "would shard (and untie) each; use an untied model"
            )
        for what, n in (
            ("num_heads", spec.num_heads),
            ("num_kv_heads", spec.kv_heads),
            ("intermediate_size", spec.mlp_size),
            ("vocab_size", spec.vocab_size),
        ):
            if n % par.tp:
                raise MemcalcError(
                    f"--tp: {par.tp} does not divide {what} ({n}); measure's DTensor plan "
                    "splits every projection, the vocabulary and the heads evenly"
                )
        if par.sp and setup.seq % par.tp:
            raise MemcalcError(
                f"--sp: sequence parallelism splits the sequence: tp ({par.tp}) must divide "
                f"seq ({setup.seq})"
            )
    if par.pp > 1:
        if impl is not Impl.ours:
            raise MemcalcError(
                "--pp: measure splits memcalc's reference model into stages; use "
                "--framework reference"
            )
        if par.pp > spec.num_layers:
            raise MemcalcError(
                f"--pp: {par.pp} stages for {spec.num_layers} layers; each stage needs a layer"
            )
    if par.cp > 1:
        if not device.startswith("cuda"):
            raise MemcalcError(
                "--cp: context_parallel does not run on CPU: torch 2.13 has no DTensor sharding "
                "strategy for aten._scaled_dot_product_flash_attention_for_cpu "
                "(NotImplementedError)"
            )
        raise MemcalcError(
            "--cp: not measured: context_parallel shards the sequence of the buffers it is "
            "given, and the models build their rotary positions and masks inside forward, "
            "where it cannot reach them"
        )


LAYOUT_CHECKS = {
    ShardingEngine.torch: check_layout,
    ShardingEngine.deepspeed: check_deepspeed_layout,
}
"""What each sharding engine's ``measure --nproc`` can run."""


def mechanism(
    par: Parallelism, titan: str = "", engine: ShardingEngine = ShardingEngine.torch
) -> str:
    """The mechanism that runs ``par`` (for the report); ``titan``: torchtitan's version, whose
    parallelize function runs it; ``engine``: the sharding engine."""
    if engine is ShardingEngine.deepspeed:
        return f"DeepSpeed ZeRO-{par.zero} (CPU accelerator)"
    if titan:
        dims = [f"{n} {getattr(par, n)}" for n in ("dp", "tp") if getattr(par, n) > 1]
        return f"torchtitan {titan} parallelize_llama ({', '.join(dims)}; FSDP2 over dp)"
    if par.tp > 1:
        return "DTensor tensor parallel" + (" + sequence parallel" if par.sequence_parallel else "")
    if par.pp > 1:
        return f"torch.distributed.pipelining Schedule1F1B, {par.microbatches} micro-batches"
    if par.cp > 1:
        return "context_parallel"
    if par.zero == 3:
        return f"FSDP2 fully_shard (reshard_after_forward={par.fsdp_reshard})"
    return f"DDP (gradient_as_bucket_view={par.bucket_view})"


@dataclass
class Applied:
    """The model after its layout, and what the CPU protocol needs to know about it."""

    model: nn.Module
    warmup_steps: int = 1
    live: Callable[[], list[torch.Tensor]] = list
    unsharded: Callable[[], list[torch.Tensor]] = list
    context: Callable[[], Any] | None = None
    """A context the training step runs in (``loss_parallel`` under TP)."""
    notes: list[str] = field(default_factory=list)


def data_parallel(model: nn.Module, par: Parallelism, device: torch.device) -> Applied:
    """DDP, with the buckets' storages handed to the tracker."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(
        model,
        device_ids=[device] if device.type == "cuda" else None,
        gradient_as_bucket_view=par.bucket_view,
    )
    buckets: dict[int, torch.Tensor] = {}

    # no annotations: DDP checks them at runtime, and here they would be strings
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        buckets[bucket.index()] = bucket.buffer()
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    return Applied(
        ddp,
        # reducer.cpp rebuilds the buckets (in backward order) at the second iteration's
        # forward: warm up twice so the measured step runs with the buckets it keeps
        warmup_steps=2,
        live=lambda: list(buckets.values()),
        notes=[
            "DDP: two warm-up steps (the reducer rebuilds its buckets in the second); "
            + ("gradients are views of the buckets" if par.bucket_view else "buckets hold a copy")
        ],
    )


def fully_sharded(
    model: nn.Module, par: Parallelism, device: torch.device, mixed: bool = False
) -> Applied:
    """FSDP2 on every block, then the root; the unsharded parameters are not activations.
    ``mixed``: with ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``
    (``--precision fsdp-bf16``) over the fp32 parameters."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    shard = par.shard_ranks
    if shard == par.dp:
        mesh = init_device_mesh(device.type, (par.dp,), mesh_dim_names=("shard",))
    else:
        mesh = init_device_mesh(
            device.type, (par.dp // shard, shard), mesh_dim_names=("replicate", "shard")
        )
    policy = MixedPrecisionPolicy(torch.bfloat16, torch.float32) if mixed else None
    kwargs: dict[str, Any] = {"mesh": mesh} | ({"mp_policy": policy} if policy else {})
    parent, attr = layer_list(model)
    for block in getattr(parent, attr):
        # a segment's member (strategies._Member) runs its block only from the segment's last
        # member: the group goes on the block itself
        block = block.block if isinstance(block, _Member) else block
        fully_shard(block, reshard_after_forward=par.fsdp_reshard, **kwargs)
    # the root keeps torch's default (None: not resharded after forward, since backward needs
    # it first), as torch's documentation recommends
    fully_shard(model, **kwargs)

    def unsharded() -> list[torch.Tensor]:
        out: list[torch.Tensor] = []
        for m in model.modules():
            if isinstance(m, FSDPModule):
                group = m._get_fsdp_state()._fsdp_param_group
                for p in group.fsdp_params if group else ():
                    out += p.all_gather_outputs
        return out

    return Applied(model, unsharded=unsharded)


def tensor_parallel(
    model: nn.Module, spec: ModelSpec, impl: Impl, par: Parallelism, device: torch.device
) -> Applied:
    """torchtitan's Llama tensor-parallel plan over DTensor (``parallelize_module``)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        loss_parallel,
        parallelize_module,
    )

    mesh = init_device_mesh(device.type, (par.tp,), mesh_dim_names=("tp",))
    sp = par.sequence_parallel
    stream = Shard(1) if sp else Replicate()  # the residual stream between the regions
    names = _names(impl)
    # HF sizes its rotary tables and mask from the embedding output's shape: keep the
    # sequence-parallel residual stream a DTensor there (its global shape is the sequence)
    dtensor_stream = sp and impl is Impl.hf
    root: dict[str, Any] = {
        names["embed"]: RowwiseParallel(
            input_layouts=Replicate(), output_layouts=stream, use_local_output=not dtensor_stream
        ),
        names["head"]: ColwiseParallel(
            input_layouts=stream, output_layouts=Shard(-1), use_local_output=False
        ),
    }
    if sp:
        root[names["final_norm"]] = SequenceParallel()
    else:
        _replicate(_module(model, names["final_norm"]), mesh)
    parallelize_module(model, mesh, root)
    parent, attr = layer_list(model)
    for block in getattr(parent, attr):
        plan: dict[str, Any] = {
            f"{names['attn']}.{p}": ColwiseParallel() for p in ("q_proj", "k_proj", "v_proj")
        }
        for proj in (f"{names['attn']}.{names['o_proj']}", f"{names['mlp']}.down_proj"):
            plan[proj] = RowwiseParallel(output_layouts=stream, use_local_output=not dtensor_stream)
        plan |= {f"{names['mlp']}.{p}": ColwiseParallel() for p in ("gate_proj", "up_proj")}
        if sp:
            plan[names["norm_1"]] = SequenceParallel()
            plan[names["norm_2"]] = SequenceParallel()
            plan[names["attn"]] = _gather_input(impl, PrepareModuleInput, Shard(1), Replicate())
            plan[names["mlp"]] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
        else:
            for norm in ("norm_1", "norm_2"):
                _replicate(_module(block, names[norm]), mesh)
        parallelize_module(block, mesh, plan)
    return Applied(model, context=loss_parallel)


def _module(root: nn.Module, path: str) -> nn.Module:
    out: nn.Module = root.get_submodule(path)
    return out


def _replicate(module: nn.Module, mesh: Any) -> None:
    """A norm outside sequence parallelism: its weight a replicated DTensor (so the
    optimizer's foreach lists hold DTensors only -- torch's foreach ops refuse a mix of
    DTensor and plain tensors), its input and output plain tensors as before."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_module

    def to_dtensor(_module: nn.Module, inputs: Any, device_mesh: Any) -> Any:
        return tuple(
            DTensor.from_local(x, device_mesh, [Replicate()], run_check=False)
            if isinstance(x, torch.Tensor)
            else x
            for x in inputs
        )

    def to_local(_module: nn.Module, output: Any, _mesh: Any) -> Any:
        return output.to_local() if isinstance(output, DTensor) else output

    distribute_module(module, mesh, input_fn=to_dtensor, output_fn=to_local)


def _gather_input(impl: Impl, prepare: Any, shard: Any, replicate: Any) -> Any:
    """All-gather the attention module's hidden-states input (ours passes it positionally,
    HF by keyword)."""
    if impl is Impl.ours:
        return prepare(
            input_layouts=(shard, None, None), desired_input_layouts=(replicate, None, None)
        )
    return prepare(
        input_kwarg_layouts={"hidden_states": shard},
        desired_input_kwarg_layouts={"hidden_states": replicate},
    )


def _names(impl: Impl) -> dict[str, str]:
    if impl is Impl.ours:
        return {
            "embed": "wte",
            "head": "lm_head",
            "final_norm": "ln_f",
            "attn": "attn",
            "o_proj": "c_proj",
            "mlp": "mlp",
            "norm_1": "ln_1",
            "norm_2": "ln_2",
        }
    return {
        "embed": "model.embed_tokens",
        "head": "lm_head",
        "final_norm": "model.norm",
        "attn": "self_attn",
        "o_proj": "o_proj",
        "mlp": "mlp",
        "norm_1": "input_layernorm",
        "norm_2": "post_attention_layernorm",
    }
