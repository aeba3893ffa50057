"""One rank of ``memcalc measure --framework torchtitan``: torchtitan's model, parallelized by
its own ``parallelize_llama``, trained one warm-up and one measured step under the runner's
CPU protocol (the package docstring says what runs and what cannot run on a CPU)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from memcalc.errors import MemcalcError
from memcalc.frameworks import Framework
from memcalc.measure.runner import _Trainer
from memcalc.measure.torchtitan.model import llama3_args_022, llama3_config_030
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import DType, TrainingSetup
from memcalc.strategies.recompute import Recompute


@dataclass
class Built:
    """What torchtitan built on this rank."""

    model: nn.Module
    optimizers: Any
    """torchtitan's ``OptimizersContainer``."""
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """(prediction, labels) -> the loss, as the trainer scales it."""
    context: Callable[[], Any]
    """The trainer's train context (loss parallel, ...)."""
    batch_ranks: int
    """Ranks that read different batches (dp x the replicated dims)."""
    notes: list[str] = field(default_factory=list)


class TitanStep(nn.Module):
    """The model, its inputs and torchtitan's loss as one module: ``forward(input_ids,
    labels)`` returns an object with ``.loss`` (what ``runner.forward_loss`` reads)."""

    def __init__(self, built: Built, positions: torch.Tensor | None) -> None:
        super().__init__()
        self.model = built.model
        self.built = built
        self.positions = positions
        self.labels: torch.Tensor | None = None
        """The batch's labels, made before the step (the dataloader's); None: ``labels``."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> SimpleNamespace:
        extra = {} if self.positions is None else {"positions": self.positions}
        with self.built.context():
            pred = self.model(input_ids, **extra)
            loss = self.built.loss(pred, labels if self.labels is None else self.labels)
        return SimpleNamespace(loss=loss)


@dataclass
class TitanTrainer(_Trainer):
    """The runner's trainer with torchtitan's step: ``zero_grad(set_to_none)`` as the trainer
    calls it, ``clip_grad_norm_(foreach=True)``, then its optimizer container."""

    container: Any = None
    set_to_none: bool = True

    def zero_grad(self) -> None:
        self.container.zero_grad(set_to_none=self.set_to_none)

    def step(self) -> None:
        from torchtitan.distributed import utils as dist_utils

        dist_utils.clip_grad_norm_(self.params, 1.0, foreach=True, pp_mesh=None)
        self.container.step()

    def state_tensors(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        states, steps = [], []
        for opt in self.container.optimizers:
            for st in opt.state.values():
                for name, t in st.items():
                    if isinstance(t, torch.Tensor):
                        (steps if name == "step" else states).append(t)
        return states, steps


def cpu_device_type() -> None:
    """torchtitan falls back to ``"cuda"`` when no accelerator is present
    (``tools/utils.py``: ``_get_available_device_type() or "cuda"``): point its mesh builder at
    the CPU."""
    import torchtitan.distributed.parallel_dims as parallel_dims
    import torchtitan.tools.utils as tools_utils

    tools_utils.device_type = "cpu"
    parallel_dims.device_type = "cpu"  # type: ignore[attr-defined]


def force_sum_reduction(model: nn.Module) -> None:
    """gloo has no PREMUL_SUM (torchtitan's divide factor 1.0 becomes one in torch's
    ``_get_gradient_divide_factors``): reduce with SUM, as torchtitan's ``enable_fsdp_symm_mem``
    does; the divide by 1 is skipped (``_div_if_needed``), so the bytes are the same."""
    from torch.distributed.fsdp import FSDPModule

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_force_sum_reduction_for_comms(True)


def _mp_param(setup: TrainingSetup) -> str:
    if setup.precision.gathered_dtype is DType.bf16:
        return "bfloat16"
    if setup.precision.gathered_dtype is DType.fp32:
        return "float32"
    raise MemcalcError(
        f"--precision: measure runs torchtitan with fsdp-bf16 or fp32, not {setup.precision.value}"
    )


def build_030(
    spec: ModelSpec, setup: TrainingSetup, recompute: Recompute, world: int, device: str
) -> Built:
    """torchtitan 0.3.0, as ``Trainer.__init__`` builds it (``spmd_backend="partial_dtensor"``,
    the one torch 2.13 runs)."""
    import torchtitan.distributed.parallel_dims as tt_pd
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.components.optimizer import default_adamw
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    from torchtitan.models.llama3 import model_registry
    from torchtitan.trainer import Trainer

    par = setup.parallel
    ac = {
        Recompute.none: None,
        Recompute.full: FullAC.Config(),
        Recompute.selective: SelectiveAC.Config(),
    }
    registry = model_registry("debugmodel")
    model_spec = _replace(registry, model=llama3_config_030(spec, setup.seq, setup.attention.value))
    cfg = Trainer.Config(
        model_spec=model_spec,
        loss=CrossEntropyLoss.Config(global_vocab_size=spec.vocab_size),
        optimizer=default_adamw(lr=1e-4),
        training=TrainingConfig(
            local_batch_size=setup.batch,
            seq_len=setup.seq,
            mixed_precision_param=_mp_param(setup),
            disable_cuda_graphs=True,
        ),
        parallelism=ParallelismConfig(
            data_parallel_shard_degree=par.dp,
            tensor_parallel_degree=par.tp,
            enable_sequence_parallel=par.sp,
            spmd_backend="partial_dtensor",
        ),
        activation_checkpoint=ac[recompute],
        compile=CompileConfig(enable=False),
    )
    dist_utils.set_spmd_backend("partial_dtensor")
    dims = tt_pd.ParallelDims.from_config(cfg.parallelism, world)
    dims.build_mesh()
    config = model_spec.model
    config.update_from_config(config=cfg)
    with torch.device("meta"):
        model = config.build()
    model = model_spec.parallelize_fn(
        model,
        parallel_dims=dims,
        training=cfg.training,
        parallelism=cfg.parallelism,
        compile_config=cfg.compile,
        ac_config=cfg.activation_checkpoint,
        dump_folder="/tmp",
    )
    _materialize(model, device)
    loss_fn = cfg.loss.build(compile_config=cfg.compile)
    ranks = dims.get_mesh("batch").size() if dims.dp_enabled else 1
    tokens = torch.tensor(setup.batch * setup.seq * ranks)
    return Built(
        model,
        cfg.optimizer.build(model_parts=[model]),
        lambda pred, labels: loss_fn(pred, labels, tokens)[0],
        dist_utils.get_spmd_context(parallel_dims=dims),
        ranks,
    )


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def _materialize(model: nn.Module, device: str) -> None:
    force_sum_reduction(model)
    model.to_empty(device=device)
    with torch.no_grad():
        model.init_weights(buffer_device=None)  # type: ignore[operator]
    model.train()


RECOMPUTE_022 = {Recompute.none: "none", Recompute.full: "full", Recompute.selective: "selective"}


def build_022(
    spec: ModelSpec,
    setup: TrainingSetup,
    recompute: Recompute,
    every: int | None,
    world: int,
    device: str,
) -> Built:
    """torchtitan 0.2.2, as its ``train.py`` builds it: ``JobConfig``, ``ParallelDims``, the
    ``Transformer`` on meta, ``parallelize_llama(model, parallel_dims, job_config)``, then
    ``build_optimizers``; ``--recompute every-k --every N`` is ``mode = "selective"`` with
    ``selective_ac_option = N`` (layer SAC), ``selective`` is ``"op"``."""
    import torchtitan.distributed.parallel_dims as tt_pd
    from torchtitan.components.loss import cross_entropy_loss
    from torchtitan.components.optimizer import build_optimizers
    from torchtitan.config import JobConfig
    from torchtitan.models.llama3 import parallelize_llama
    from torchtitan.models.llama3.model.model import Transformer

    par = setup.parallel
    jc = JobConfig()
    jc.training.local_batch_size, jc.training.seq_len = setup.batch, setup.seq
    jc.training.mixed_precision_param = _mp_param(setup)
    jc.parallelism.data_parallel_shard_degree = par.dp
    jc.parallelism.tensor_parallel_degree = par.tp
    jc.parallelism.enable_sequence_parallel = par.sp
    layer_sac = recompute is Recompute.every_k
    jc.activation_checkpoint.mode = "selective" if layer_sac else RECOMPUTE_022[recompute]
    jc.activation_checkpoint.selective_ac_option = str(every) if layer_sac else "op"
    dims = tt_pd.ParallelDims(
        dp_replicate=1, dp_shard=par.dp, cp=1, tp=par.tp, pp=1, ep=1, etp=1, world_size=world
    )
    dims.build_mesh()
    args = llama3_args_022(spec, setup.seq)
    args.update_from_config(jc)
    with torch.device("meta"):
        model = Transformer(args)
    model = parallelize_llama(model, dims, jc)
    _materialize(model, device)
    ranks = dims.dp_shard * dims.dp_replicate
    tokens = setup.batch * setup.seq * ranks
    return Built(
        model,
        build_optimizers([model], jc.optimizer, dims),
        lambda pred, labels: cross_entropy_loss(pred, labels) / tokens,
        _loss_parallel_context(dims),
        ranks,
    )


def _loss_parallel_context(dims: Any) -> Callable[[], Any]:
    """0.2.2's train context: ``loss_parallel()`` under tensor parallelism."""
    import contextlib

    if dims.tp_enabled:
        from torch.distributed.tensor.parallel import loss_parallel

        return loss_parallel
    return contextlib.nullcontext


def titan_trainer(built: Built, setup: TrainingSetup, fw: Framework) -> TitanTrainer:
    """The runner's trainer over torchtitan's model, optimizer and loss."""
    params = list(built.model.parameters())
    return TitanTrainer(
        model=TitanStep(built, None),
        params=params,
        opt_params=params,
        optimizer=built.optimizers,
        mixed=False,
        offloaded=False,
        container=built.optimizers,
        set_to_none=not fw.grads_kept,
    )


def unsharded_of(model: nn.Module) -> Callable[[], list[torch.Tensor]]:
    """FSDP2's unsharded parameters (``all_gather_outputs`` of every group): gathered
    weights, not activations."""
    from torch.distributed.fsdp import FSDPModule

    def tensors() -> list[torch.Tensor]:
        # a group over several modules ([norm, lm_head]) is every one's state: once each
        out: dict[int, torch.Tensor] = {}
        for m in model.modules():
            if isinstance(m, FSDPModule):
                group = m._get_fsdp_state()._fsdp_param_group
                for p in group.fsdp_params if group else ():
                    out.update((id(t), t) for t in p.all_gather_outputs)
        return list(out.values())

    return tensors


def measure_rank(request: Any, dev: torch.device, phase: list[str], say: Any) -> dict[str, Any]:
    """This rank's measured step (the runner's CPU protocol) of torchtitan's model."""
    from memcalc.measure.runner import Extras, _measure_cpu, token_ids

    spec, setup, fw = request.spec, request.setup, request.setup.framework_def
    cpu_device_type()
    torch.autograd.set_multithreading_enabled(False)  # as dist_utils.init_distributed
    torch.manual_seed(request.seed)
    world = torch.distributed.get_world_size()
    if fw.version.startswith("0.2"):
        built = build_022(spec, setup, request.recompute, request.every, world, dev.type)
    else:
        built = build_030(spec, setup, request.recompute, world, dev.type)
    trainer = titan_trainer(built, setup, fw)
    ids = token_ids(spec, setup, request.seed, dev)
    step = trainer.model
    assert isinstance(step, TitanStep)
    step.labels = torch.roll(ids, -1, dims=1).contiguous()  # a batch's own labels tensor
    if fw.layer_code.overrides_for("llama").get("rotary_gathered"):
        # 0.3's dataloader emits per-document positions (one document here)
        step.positions = torch.arange(setup.seq).expand(setup.batch, -1).contiguous()
    params = trainer.params
    extras = Extras(
        1,
        # the gradients kept across steps (only those: a list of the warm-up's would keep
        # them alive), the batch, and the model's buffers (RoPE caches)
        live=lambda: (
            [p.grad for p in params if p.grad is not None and not trainer.set_to_none]
            + [t for t in (step.labels, step.positions) if t is not None]
            + list(built.model.buffers())
        ),
        unsharded=unsharded_of(built.model),
    )
    return _measure_cpu(trainer, ids, request.recompute, phase, say, extras)
