"""Run real training steps of a model and measure the bytes of each memory component.

Protocol (as for ``shared/reference``): step 1 is a warm-up (it creates the optimizer state);
step 2 is measured: ``zero_grad(set_to_none=True)``, forward on random token ids with
``labels = input_ids``, ``loss.backward()``, ``optimizer.step()``.

* CUDA: synchronize -> reset_peak_memory_stats -> step -> synchronize; components are
  ``memory_allocated`` differences at the right moments (parameters after building the model,
  optimizer state after the warm-up, activations = after forward minus before, gradients =
  after backward minus before forward, less the loss), the peak is ``max_memory_allocated``,
  plus ``max_memory_reserved`` and ``num_alloc_retries`` from ``memory_stats()``.
* CPU: exact byte counts. Parameters, gradients and optimizer state are their unique storages;
  activations are what ``SavedTensorRecorder`` sees saved during the forward (parameters
  excluded), except under selective recompute, where the checkpoint's cache is invisible to
  saved-tensor hooks and the activations are ``LiveMemoryTracker``'s live bytes after the
  forward minus before (the loss scalar excluded); the peak is the tracker's.
  CPU dropout is re-routed to ``torch.native_dropout`` so masks are 1-byte bools as on CUDA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from memcalc.errors import MemcalcError
from memcalc.measure.build import Impl, attention_kind, build_model, forward_loss, torch_dtype
from memcalc.measure.strategies import apply_strategy, bool_dropout_masks
from memcalc.measure.tracker import (
    LiveMemoryTracker,
    SavedTensorRecorder,
    _storage_key,
    real_tensors,
    storage_identity,
    storage_keys,
)
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import OptimizerKind, TrainingSetup
from memcalc.strategies.offload import Offload, OffloadWhat
from memcalc.strategies.recompute import Recompute

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Measurement:
    """Bytes measured in one training step, by component (the Breakdown's fields)."""

    device: str
    impl: str
    strategy: str
    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    """Optimizer states + master weights + step tensors on the device."""
    optimizer_state_bytes: int
    master_weight_bytes: int
    step_tensor_bytes: int
    activation_bytes: int
    """Activations held on the device from forward to backward."""
    peak_bytes: int
    peak_phase: str
    host_bytes: int = 0
    """Bytes the optimizer keeps on the host (optimizer=cpu)."""
    reserved_bytes: int | None = None
    """CUDA only: max_memory_reserved during the measured step."""
    alloc_retries: int | None = None
    """CUDA only: num_alloc_retries (cudaMalloc failed, cache flushed, retried)."""
    context_bytes: int | None = None
    """CUDA only: device memory in use (``cudaMemGetInfo``) beside what the caching allocator
    reserves, after the measured step: the CUDA context, its lazily loaded kernels, and
    anything allocated outside torch's allocator (NCCL), as ``nvidia-smi`` shows it."""
    held_bytes: int | None = None
    """CPU only: live bytes after the forward minus before (loss excluded): the saved tensors
    plus anything else the forward leaves alive (a checkpoint's inputs and cache)."""
    saved_by_dtype: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    activations_checked: bool = True
    """False where the instrument cannot see every held activation (a pipeline stage under
    recompute: saved-tensor hooks miss what a checkpoint's closure keeps)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """A Measurement from its ``dataclasses.asdict`` (a rank's JSON result)."""
        return cls(**{**data, "notes": tuple(data.get("notes", ()))})


@dataclass
class _Trainer:
    """Model + optimizer under a precision recipe and optimizer placement."""

    model: nn.Module
    params: list[nn.Parameter]
    opt_params: list[torch.Tensor]
    optimizer: torch.optim.Optimizer
    mixed: bool
    offloaded: bool
    autocast: torch.dtype | None = None
    """Run the forward under torch.autocast in this dtype (amp-bf16 / amp-fp16)."""
    microbatches: int = 1
    """Forward and backward passes per optimizer step (gradient accumulation)."""

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        if self.offloaded and not self.mixed:
            for p, q in zip(self.params, self.opt_params, strict=True):
                q.grad = p.grad.to(q.device) if p.grad is not None else None
        self.optimizer.step()
        if self.mixed or self.offloaded:
            with torch.no_grad():
                for p, q in zip(self.params, self.opt_params, strict=True):
                    if q is not p:
                        p.copy_(q)

    @property
    def masters(self) -> list[torch.Tensor]:
        """The fp32 master copies under -mixed (a parameter already fp32 has none)."""
        if not self.mixed:
            return []
        return [q for p, q in zip(self.params, self.opt_params, strict=True) if q is not p]

    @property
    def grads(self) -> list[torch.Tensor]:
        """The gradients the optimizer reads on the device: fp32 main grads under -mixed."""
        source = self.opt_params if self.mixed else self.params
        return [p.grad for p in source if p.grad is not None]

    def state_tensors(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(state tensors, step tensors) of the optimizer."""
        states, steps = [], []
        for st in self.optimizer.state.values():
            for name, t in st.items():
                if isinstance(t, torch.Tensor):
                    (steps if name == "step" else states).append(t)
        return states, steps


def _optimizer(
    kind: OptimizerKind, params: list[torch.Tensor], foreach: bool
) -> torch.optim.Optimizer:
    if kind in (OptimizerKind.adamw, OptimizerKind.adam):
        cls = torch.optim.AdamW if kind is OptimizerKind.adamw else torch.optim.Adam
        return cls(params, lr=1e-4, foreach=foreach)
    if kind in (OptimizerKind.sgd, OptimizerKind.sgd_momentum):
        momentum = 0.9 if kind is OptimizerKind.sgd_momentum else 0.0
        return torch.optim.SGD(params, lr=1e-4, momentum=momentum, foreach=foreach)
    raise MemcalcError(
        f"--optimizer: measure runs adamw, adam, sgd, sgd-momentum; not {kind.value}"
    )


def _trainer(model: nn.Module, setup: TrainingSetup, offload_optimizer: bool) -> _Trainer:
    # unique (tied weights once); a frozen base has no gradient and no optimizer state
    params = [p for p in model.parameters() if p.requires_grad]
    mixed = setup.precision.is_mixed
    host = torch.device("cpu")
    if mixed:
        # fp32 master copies live with the optimizer; the 16-bit grad of each parameter is
        # turned into an fp32 main grad as soon as it is accumulated, and freed.
        # A parameter already in fp32 (PEFT's adapters, autocast_adapter_dtype; a router
        # kept in fp32) is its own master: Megatron's Float16OptimizerWithFloat16Params copies
        # only fp16 / bf16 parameters (optimizer.py __init__: float16_groups vs
        # fp32_from_fp32_groups).
        where = host if offload_optimizer else params[0].device
        opt_params = [
            p
            if p.dtype == torch.float32 and not offload_optimizer
            else p.detach().to(where, torch.float32).clone().requires_grad_(True)
            for p in params
        ]

        def to_main_grad(p: torch.Tensor, q: torch.Tensor) -> None:
            g = p.grad.to(q.device, torch.float32)  # type: ignore[union-attr]
            if q.grad is None:
                q.grad = g
            else:  # Megatron's main_grad.add_(grad): in place, under gradient accumulation
                q.grad.add_(g)
            p.grad = None

        for p, q in zip(params, opt_params, strict=True):
            if q is not p:
                p.register_post_accumulate_grad_hook(lambda p, q=q: to_main_grad(p, q))
    elif offload_optimizer:
        opt_params = [p.detach().to(host).clone().requires_grad_(True) for p in params]
    else:
        opt_params = list(params)
    foreach = setup.optimizer_foreach
    return _Trainer(
        model,
        params,
        opt_params,
        _optimizer(setup.optimizer, opt_params, foreach),
        mixed,
        offload_optimizer,
        torch_dtype(setup.activation_dtype) if setup.precision.is_amp else None,
        setup.parallel.microbatches if setup.parallel.pp == 1 else 1,
    )


def _unique_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages holding ``tensors`` (a DTensor's are its local
    tensor's)."""
    seen: dict[int, int] = {}
    for t in tensors:
        for x in real_tensors(t):
            key = _storage_key(x)
            if key is not None:
                seen[key] = x.untyped_storage().nbytes()
    return sum(seen.values())


def _bytes_on(tensors: list[torch.Tensor], device: torch.device) -> int:
    return _unique_bytes([t for t in tensors if t.device.type == device.type])


CPU_ALLOCATION_FAILED = ("can't allocate memory", "not enough memory")
"""What torch's DefaultCPUAllocator says when malloc fails (a RuntimeError, not
torch.OutOfMemoryError): ``alloc_cpu.cpp`` on Linux / macOS and on Windows."""


@contextlib.contextmanager
def _oom_as_error(phase: list[str]) -> Iterator[None]:
    """An allocation that fails, on CUDA or on the host, as the one-line "does not fit"."""
    try:
        yield
    except (torch.OutOfMemoryError, MemoryError):
        raise MemcalcError(f"does not fit: out of memory at {phase[0]}") from None
    except RuntimeError as e:
        if not any(s in str(e) for s in CPU_ALLOCATION_FAILED):
            raise
        tried = str(e).split("you tried to allocate ", 1)[-1].split(" bytes", 1)[0]
        size = f" (an allocation of {int(tried):,} bytes failed)" if tried.isdigit() else ""
        raise MemcalcError(f"does not fit: out of host memory at {phase[0]}{size}") from None


def measure(
    spec: ModelSpec,
    setup: TrainingSetup,
    *,
    impl: Impl = Impl.ours,
    recompute: Recompute = Recompute.none,
    every: int | None = None,
    offload: tuple[Offload, ...] = (),
    device: str | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> Measurement:
    """Build ``spec``, apply the strategy, run a warm-up and a measured step, count bytes."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if setup.lora is not None and impl is not Impl.hf:
        raise MemcalcError("--lora-rank: LoRA is measured on the HF model: --framework hf")
    if setup.dropout is not None:
        spec, setup = spec.with_dropout(setup.dropout), setup.replace(dropout=None)

    # as a user's script: prepare_model_for_kbit_training(use_gradient_checkpointing=...)
    setup = setup.with_kbit_input_grads(recompute is not Recompute.none)
    what = check_offload(offload)
    say = progress or (lambda _msg: None)
    notes = device_notes(spec, setup, dev)
    phase = ["building the model"]
    with (
        _oom_as_error(phase),
        bool_dropout_masks() if dev.type == "cpu" else torch.cuda.device(dev),
    ):
        if dev.type == "cuda":
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
        say("building the model")
        model = build_model(spec, setup, impl, dev, seed)
        if setup.lora is not None:
            from memcalc.measure.finetune import apply_finetune

            model = apply_finetune(model, spec, setup)
        if dev.type == "cuda":
            torch.cuda.synchronize()
            base = {"base": base, "params_bytes": torch.cuda.memory_allocated() - base}
        label = apply_strategy(
            model,
            recompute,
            every=every,
            offload_activations=OffloadWhat.activations in what,
            pin_memory=dev.type == "cuda",
        )
        trainer = _trainer(model, setup, OffloadWhat.optimizer in what)
        ids = token_ids(spec, setup, seed, dev)
        run = _measure_cuda if dev.type == "cuda" else _measure_cpu
        kwargs: dict[str, Any] = base if dev.type == "cuda" else {}
        m = run(trainer, ids, recompute, phase, say, **kwargs)
    return Measurement(device=str(dev), impl=impl.value, strategy=label, notes=tuple(notes), **m)


def check_offload(offload: tuple[Offload, ...]) -> set[OffloadWhat]:
    """What is offloaded; a MemcalcError for what measure cannot offload."""
    what = {o.what for o in offload}
    if OffloadWhat.params in what:
        raise MemcalcError(
            "--offload: params=cpu is not measured; measure offloads "
            "optimizer=cpu and activations=cpu"
        )
    if any(o.where.value == "nvme" for o in offload):
        raise MemcalcError("--offload: optimizer=nvme is not measured; use optimizer=cpu")
    return what


def device_notes(spec: ModelSpec, setup: TrainingSetup, dev: torch.device) -> list[str]:
    """What a run on ``dev`` does differently from a GPU (said in the report)."""
    notes: list[str] = []
    if dev.type == "cpu":
        if spec.has_dropout:
            notes.append(
                "CPU: F.dropout re-routed to torch.native_dropout (bool masks, as on CUDA)"
            )
        if attention_kind(setup) == "sdpa" and spec.attention_dropout > 0:
            notes.append(
                "CPU SDPA with dropout runs torch's math kernel, which saves the s x s scores, "
                "dropout noise and dropped probabilities in fp32: the estimate models it; "
                "a GPU's fused kernel saves none of them (gpu estimate)"
            )
    return notes


def token_ids(spec: ModelSpec, setup: TrainingSetup, seed: int, dev: torch.device) -> torch.Tensor:
    """The (batch, seq) random token ids of every step (the labels are the same ids)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, spec.vocab_size, (setup.batch, setup.seq), generator=gen).to(dev)


def _one_step(
    trainer: _Trainer,
    ids: torch.Tensor,
    phase: list[str],
    on: Callable[[str, Any], None],
    stage: Progress | None = None,
) -> None:
    """One training step; ``phase[0]`` names the part running (for an out-of-memory error)
    and ``stage`` is told as each part starts."""
    tell = stage or (lambda _msg: None)
    trainer.zero_grad()
    k = trainer.microbatches
    for m in range(k):
        part = f" (micro-batch {m + 1} of {k})" if k > 1 else ""
        phase[0] = "forward" + part
        tell(phase[0])
        if m == 0:
            on("before_forward", None)
        if trainer.autocast is None:
            loss = forward_loss(trainer.model, ids)
        else:
            with torch.autocast(ids.device.type, dtype=trainer.autocast):
                loss = forward_loss(trainer.model, ids)
        if m == 0:
            on("after_forward", loss)
        phase[0] = "backward" + part
        tell(phase[0])
        # gradient accumulation as HF Trainer's training_step runs it: the loss divided by
        # the accumulation steps, backward into the gradients already there
        (loss / k if k > 1 else loss).backward()
    on("after_backward", loss)
    phase[0] = "optimizer step"
    tell(phase[0])
    trainer.step()
    on("after_step", None)


def _optimizer_bytes(trainer: _Trainer, device: torch.device) -> dict[str, int]:
    states, steps = trainer.state_tensors()
    master = trainer.masters
    state_b, step_b = _bytes_on(states, device), _bytes_on(steps, device)
    master_b = _bytes_on(master, device)
    host = torch.device("cpu")
    host_b = (
        _unique_bytes(
            states
            + steps
            + list(trainer.opt_params)
            + [q.grad for q in trainer.opt_params if q.grad is not None]
        )
        if trainer.offloaded
        else 0
    )
    if trainer.offloaded and device.type == host.type:
        # On a CPU run the "host" copies share the device: report them only as host bytes.
        state_b = step_b = master_b = 0
    return {
        "optimizer_bytes": state_b + master_b + step_b,
        "optimizer_state_bytes": state_b,
        "master_weight_bytes": master_b,
        "step_tensor_bytes": step_b,
        "host_bytes": host_b,
    }


@dataclass(frozen=True)
class Extras:
    """What a parallel layout adds to the CPU protocol (``measure/distributed``)."""

    warmup_steps: int = 1
    """Steps before the measured one (DDP rebuilds its buckets in the second)."""
    live: Callable[[], list[torch.Tensor]] = list
    """Called after the warm-up: tensors alive through the step that neither the parameters
    nor the optimizer reach (DDP's gradient buckets)."""
    unsharded: Callable[[], list[torch.Tensor]] = list
    """Called after the warm-up: tensors whose storages are parameters gathered for a while
    (FSDP2's unsharded parameters, freed and re-allocated every step): not activations when
    autograd saves them, nor part of what the forward holds."""


def _measure_cpu(
    trainer: _Trainer,
    ids: torch.Tensor,
    recompute: Recompute,
    phase: list[str],
    say: Progress,
    extras: Extras = Extras(),
) -> dict[str, Any]:
    model = trainer.model
    for i in range(extras.warmup_steps):
        label = "warm-up step" + (f" {i + 1}" if extras.warmup_steps > 1 else "")
        _one_step(trainer, ids, phase, lambda *_: None, lambda p, at=label: say(f"{at}: {p}"))
    params = trainer.params
    device = params[0].device
    from memcalc.measure.finetune import keeps_ctx_attributes, quant_state_tensors

    weights = list(model.parameters()) + quant_state_tensors(model)
    recorder = SavedTensorRecorder.for_module(model)
    recorder.exclude |= {k for q in trainer.opt_params for k in storage_keys(q)}
    unsharded = extras.unsharded()
    recorder.exclude_storages |= {storage_identity(t) for t in unsharded}
    live = extras.live()
    tracker = LiveMemoryTracker()
    marks: dict[str, int] = {}
    grads: list[torch.Tensor] = []
    loss_bytes = [0]
    hooks = [recorder.hooks()]

    def on(event: str, loss: Any) -> None:
        marks[event] = tracker.live_bytes - sum(t.untyped_storage().nbytes() for t in unsharded)
        if event == "before_forward":
            tracker.phase = "forward"
            hooks[0].__enter__()
        elif event == "after_forward":
            hooks[0].__exit__(None, None, None)
            loss_bytes[0] = loss.untyped_storage().nbytes()
            tracker.phase = "backward"
        elif event == "after_backward":
            grads.extend(trainer.grads)
            tracker.phase = "optimizer step"

    opt_b = _optimizer_bytes(trainer, device)
    with tracker:
        tracker.register([weights, trainer.opt_params, trainer.state_tensors(), ids, live])
        tracker.reset_peak()
        _one_step(trainer, ids, phase, on, lambda p: say(f"measured step: {p}"))
    held = marks["after_forward"] - marks["before_forward"] - loss_bytes[0]
    # saved-tensor hooks miss what a Function keeps as a ctx attribute (bitsandbytes' int8
    # matmuls): count the live bytes then
    hooks_see_all = not keeps_ctx_attributes(model)
    acts = recorder.total_bytes if recompute is Recompute.none and hooks_see_all else held
    return {
        "parameter_bytes": _unique_bytes(weights),
        "gradient_bytes": _unique_bytes(grads),
        **opt_b,
        "activation_bytes": acts,
        "peak_bytes": tracker.peak_bytes,
        "peak_phase": tracker.peak_phase,
        "held_bytes": held,
        "saved_by_dtype": recorder.bytes_by_dtype(),
    }


def _measure_cuda(
    trainer: _Trainer,
    ids: torch.Tensor,
    recompute: Recompute,
    phase: list[str],
    say: Progress,
    base: int,
    params_bytes: int,
) -> dict[str, Any]:
    cuda = torch.cuda
    params_b = params_bytes
    _one_step(trainer, ids, phase, lambda *_: None, lambda p: say(f"warm-up step: {p}"))
    trainer.zero_grad()
    cuda.synchronize()
    device = trainer.params[0].device
    opt_b = _optimizer_bytes(trainer, device)
    marks: dict[str, int] = {}
    loss_bytes = [0]

    def on(event: str, loss: Any) -> None:
        cuda.synchronize()
        marks[event] = cuda.memory_allocated()
        if loss is not None:
            loss_bytes[0] = loss.untyped_storage().nbytes()

    cuda.reset_peak_memory_stats()
    retries_before = cuda.memory_stats().get("num_alloc_retries", 0)
    _one_step(trainer, ids, phase, on, lambda p: say(f"measured step: {p}"))
    cuda.synchronize()
    stats = cuda.memory_stats()
    # Blocks are rounded to 512 B by the caching allocator; differences include that rounding.
    return {
        "parameter_bytes": params_b,
        "gradient_bytes": marks["after_backward"] - marks["before_forward"] - loss_bytes[0],
        **opt_b,
        "activation_bytes": marks["after_forward"] - marks["before_forward"] - loss_bytes[0],
        "peak_bytes": cuda.max_memory_allocated() - base,
        "peak_phase": "",
        "reserved_bytes": cuda.max_memory_reserved(),
        "alloc_retries": stats.get("num_alloc_retries", 0) - retries_before,
        "context_bytes": _outside_allocator(device),
    }


def _outside_allocator(device: torch.device) -> int:
    """Device memory in use that the caching allocator did not reserve (``mem_get_info``'s
    total - free, less ``memory_reserved``): the CUDA context and what bypasses the allocator;
    other processes on the device count too (a lent GPU runs nothing else)."""
    free, total = torch.cuda.mem_get_info(device)
    return total - free - torch.cuda.memory_reserved(device)
