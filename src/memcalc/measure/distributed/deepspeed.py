"""One rank of ``memcalc measure --zero-engine deepspeed --nproc N``: DeepSpeed's own ZeRO engine
over the HF model, bytes counted exactly on CPU (DeepSpeed's CPU accelerator, gloo).

* The DeepSpeed config is written from the setup (``ds_config``): the stage, ``bf16`` /
  ``fp16``, ``offload_optimizer`` / ``offload_param`` from ``--offload``, the micro-batch and
  ``gradient_accumulation_steps``, ``data_types.grad_accum_dtype`` from ``--grad-dtype``, every
  ``--ds`` setting, and DeepSpeed's AdamW (``FusedAdam``, ``DeepSpeedCPUAdam`` under offload,
  ``torch.optim.AdamW`` with ``torch_adam``). Its C++ Adam ops are built on first use
  (``~/.cache/torch_extensions``): the first run takes minutes.
* Protocol: one warm-up step (ZeRO-3's coordinator records its trace then; the measured step
  runs with it complete), then one measured step (every micro-batch's forward, backward and
  ``engine.step()``).
* The states are an inventory of every storage DeepSpeed keeps between steps, found by
  walking its ZeRO optimizer and the module and named by the attribute that holds it
  (``CATEGORIES``): parameters, gradient buffers, fp32 master + moments + scalars. Gradients at
  the end of the backward are those buffers plus what the backward leaves alive (ZeRO-1/2's
  ``grads_in_partition``). Activations are the saved tensors (``SavedTensorRecorder``) minus
  the storages of the parameters as gathered at the time (ZeRO-3's all-gathered copies). The
  peak is ``LiveMemoryTracker``'s over the measured step, every live tensor registered first.
* On the CPU accelerator ``pin_memory`` is a no-op: offloaded buffers are in the same memory,
  and counted there (the CPU-path estimate does the same).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable
from typing import Any

import torch

from memcalc.measure.tracker import LiveMemoryTracker, SavedTensorRecorder, _storage_key
from memcalc.spec.training import DType, TrainingSetup
from memcalc.strategies.offload import Offload, OffloadWhat

CATEGORIES = (
    # (component, pattern over the attribute path), first match wins
    ("scalars", r"_global_grad_norm|_dummy_overflow_buf|inf_or_nan_tracker"),
    ("moments", r"\.state\[[^]]*\]\[(exp_avg|exp_avg_sq|step)\]$"),
    (
        "gradients",
        r"ipg_buckets|grad_partitions_flat_buffer|fp32_groups_gradients_flat|"
        r"non_expert_gradients|temp_grad_buffer|\.grad$",
    ),
    (
        "master",
        r"single_partition_of_fp32_groups|fp32_partitioned_groups_flat|"
        r"fp32_groups_flat_partition",
    ),
    (
        "parameters",
        r"bit16_groups_flat|bf16_groups_flat|param_buffer_of_bit16|fp16_partitioned_groups_flat|"
        r"lp_param_buffer|param_groups_fp16_flat_cpu_memory|ds_tensor|persistent_parameters|"
        r"^module\.",
    ),
    ("buffers", r"^buffer\."),
)
"""DeepSpeed 0.19.8's attribute names (``stage_1_and_2.py``, ``stage3.py``,
``bf16_optimizer.py``, ``ops/adam``) and the component each belongs to."""
SKIP = {
    "timers",
    "dp_process_group",
    "_dp_process_group",
    "mpu",
    "module",
    "ds_config",
    "_config",
    "param_names",
    "monitor",
    "loss_scaler_args",
}


def ds_config(setup: TrainingSetup, offloads: tuple[Offload, ...]) -> dict[str, Any]:
    """The DeepSpeed config of ``setup`` (the JSON ``deepspeed.initialize`` takes)."""
    cfg = setup.deepspeed_config
    par = setup.parallel
    zero: dict[str, Any] = {"stage": par.zero}
    for name in (
        "reduce_bucket_size",
        "allgather_bucket_size",
        "contiguous_gradients",
        "reduce_scatter",
        "sub_group_size",
        "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold",
        "stage3_model_persistence_threshold",
        "stage3_max_live_parameters",
        "stage3_max_reuse_distance",
    ):
        zero[name] = getattr(cfg, name)
    if cfg.overlap_comm is not None:
        zero["overlap_comm"] = cfg.overlap_comm
    whats = {o.what for o in offloads}
    if OffloadWhat.optimizer in whats or OffloadWhat.params in whats:
        zero["offload_optimizer"] = {
            "device": "cpu",
            "pin_memory": cfg.offload_optimizer_pin_memory,
        }
    if OffloadWhat.params in whats:
        zero["offload_param"] = {"device": "cpu", "pin_memory": cfg.offload_param_pin_memory}
    params: dict[str, Any] = {"lr": 1e-4, "weight_decay": 0.0}
    if cfg.torch_adam:
        params["torch_adam"] = True
    out: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": setup.batch,
        "gradient_accumulation_steps": par.microbatches,
        "optimizer": {"type": "AdamW", "params": params},
        "zero_optimization": zero,
        "steps_per_print": 10**9,
    }
    weight = setup.weight_dtype
    if weight is DType.bf16:
        out["bf16"] = {"enabled": True}
    elif weight is DType.fp16:
        out["fp16"] = {"enabled": True}
    if setup.grad_dtype is not None:
        out["data_types"] = {"grad_accum_dtype": setup.grad_dtype.value}
    if cfg.communication_data_type is not None:
        out["communication_data_type"] = cfg.communication_data_type.value
    return out


def category(paths: list[str]) -> str:
    for name, pattern in CATEGORIES:
        if any(re.search(pattern, p) for p in paths):
            return name
    return "other"


class Inventory:
    """Every storage reachable from the ZeRO optimizer and the module, by attribute path."""

    def __init__(self) -> None:
        self.paths: dict[int, list[str]] = {}
        self.nbytes: dict[int, int] = {}
        self._seen: set[int] = set()

    def add(self, t: torch.Tensor, path: str) -> None:
        if t.device.type == "meta":  # shape records (round_robin_bit16_meta): no memory
            return
        key = _storage_key(t)
        if key is None:
            return
        self.nbytes[key] = t.untyped_storage().nbytes()
        self.paths.setdefault(key, []).append(path)

    def walk(self, obj: Any, path: str, depth: int = 0) -> None:
        if depth > 9 or id(obj) in self._seen or isinstance(obj, (str, bytes, int, float)):
            return
        self._seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            self.add(obj, path)
            if obj.is_leaf and obj.grad is not None:
                self.add(obj.grad, path + ".grad")
            inner = getattr(obj, "ds_tensor", None)
            if isinstance(inner, torch.Tensor):
                self.walk(inner, path + ".ds_tensor", depth + 1)
        elif isinstance(obj, torch.nn.Module):
            return
        elif isinstance(obj, dict):
            for k, v in list(obj.items()):
                self.walk(
                    v, f"{path}[{k if isinstance(k, (str, int)) else type(k).__name__}]", depth + 1
                )
        elif isinstance(obj, (list, tuple, set)):
            for i, v in enumerate(obj):
                self.walk(v, f"{path}[{i}]", depth + 1)
        elif isinstance(obj, torch.optim.Optimizer) or type(obj).__module__.startswith("deepspeed"):
            if isinstance(obj, torch.optim.Optimizer):
                self.walk(obj.state, f"{path}.state", depth + 1)
            items = sorted(vars(obj).items(), key=lambda kv: kv[0] in ("optimizer",))
            for k, v in items:
                if k not in SKIP:
                    self.walk(v, f"{path}.{k}", depth + 1)

    def uncategorized(self) -> list[str]:
        """The paths of the storages no category names (for the report)."""
        return [
            f"{self.paths[k][0]} ({n:,} bytes)"
            for k, n in sorted(self.nbytes.items(), key=lambda kv: -kv[1])
            if category(self.paths[k]) == "other"
        ]

    def by_category(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, n in self.nbytes.items():
            c = category(self.paths[key])
            out[c] = out.get(c, 0) + n
        return out


def inventory_of(engine: Any) -> Inventory:
    """The ZeRO optimizer first (its flat buffers get their DeepSpeed names), then the
    module's parameters and buffers."""
    inv = Inventory()
    inv.walk(engine.optimizer, "opt")
    for name, p in engine.module.named_parameters():
        inv.walk(p, f"module.{name}")
    for name, b in engine.module.named_buffers():
        inv.add(b, f"buffer.{name}")
    return inv


class GatheredExcluded(SavedTensorRecorder):
    """Saved tensors, less the parameters' storages as they are when saved (ZeRO-3 gathers
    each parameter into a new storage at every fetch)."""

    def __init__(self, params: Callable[[], list[torch.Tensor]], exclude: set[int]) -> None:
        super().__init__(exclude=exclude)
        self.params = params

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key is not None and key in {_storage_key(p.data) for p in self.params()}:
            return t
        return super()._pack(t)


def live_tensors() -> list[torch.Tensor]:
    return [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]


def run_steps(
    engine: Any, ids: torch.Tensor, microbatches: int, on: Callable[[str, Any], None]
) -> None:
    """One training step: every micro-batch's forward, backward and ``engine.step()``."""
    for m in range(microbatches):
        on("before_forward" if m == 0 else "forward", None)
        loss = engine(input_ids=ids, labels=ids).loss
        on("after_forward" if m == 0 else "forward_done", loss)
        engine.backward(loss)
        on("after_backward" if m == microbatches - 1 else "backward_done", loss)
        engine.step()
        del loss
    on("after_step", None)


def measure_engine(
    engine: Any, ids: torch.Tensor, microbatches: int, say: Callable[[str], None]
) -> tuple[dict[str, Any], dict[str, int], list[str], int]:
    """The CPU protocol (the module docstring) on an initialized DeepSpeed engine: the
    Measurement's fields, the held bytes by category, the storages no category names, and
    the bytes of live tensors the inventory does not reach (the token ids)."""
    say("warm-up step")
    run_steps(engine, ids, microbatches, lambda *_: None)
    gc.collect()
    inv = inventory_of(engine)
    held = inv.by_category()
    held_other = inv.uncategorized()
    live = {k: t.untyped_storage().nbytes() for t in live_tensors() if (k := _storage_key(t))}
    unnamed = sum(n for k, n in live.items() if k not in inv.nbytes)
    params = [p for p in engine.module.parameters()]
    recorder = GatheredExcluded(lambda: params, set(inv.nbytes))
    tracker = LiveMemoryTracker()
    marks: dict[str, int] = {}
    loss_bytes = [0]
    hooks = [recorder.hooks()]

    def on(event: str, loss: Any) -> None:
        marks[event] = tracker.live_bytes
        if event == "before_forward":
            tracker.phase = "forward"
            hooks[0].__enter__()
        elif event == "after_forward":
            hooks[0].__exit__(None, None, None)
            loss_bytes[0] = loss.untyped_storage().nbytes()
            tracker.phase = "backward"
        elif event == "after_backward":
            tracker.phase = "optimizer step"

    say("measured step")
    with tracker:
        tracker.register(live_tensors())
        tracker.reset_peak()
        run_steps(engine, ids, microbatches, on)
    left = marks["after_backward"] - marks["before_forward"] - loss_bytes[0]
    return (
        {
            "parameter_bytes": held.get("parameters", 0),
            "gradient_bytes": held.get("gradients", 0) + left,
            "optimizer_bytes": held.get("master", 0)
            + held.get("moments", 0)
            + held.get("scalars", 0),
            "optimizer_state_bytes": held.get("moments", 0),
            "master_weight_bytes": held.get("master", 0),
            "step_tensor_bytes": 0,
            "activation_bytes": recorder.total_bytes,
            "peak_bytes": tracker.peak_bytes,
            "peak_phase": f"{tracker.peak_phase}: {tracker.peak_op}",
            "held_bytes": marks["after_forward"] - marks["before_forward"] - loss_bytes[0],
            "saved_by_dtype": recorder.bytes_by_dtype(),
        },
        held,
        held_other,
        unnamed,
    )


def run_deepspeed_rank(request: Any, rank: int) -> Any:
    """This rank's Measurement: the HF model under ``deepspeed.initialize`` (the module
    docstring)."""
    import deepspeed

    from memcalc.measure.build import build_model
    from memcalc.measure.runner import Measurement, _oom_as_error, device_notes, token_ids
    from memcalc.measure.strategies import apply_strategy, bool_dropout_masks

    spec, setup = request.spec, request.setup
    if setup.dropout is not None:
        spec, setup = spec.with_dropout(setup.dropout), setup.replace(dropout=None)
    dev = torch.device("cpu")
    say = (lambda msg: print(f"[rank {rank}] {msg} ...", flush=True)) if rank == 0 else _quiet
    phase = ["building the model"]
    with _oom_as_error(phase), bool_dropout_masks():
        # built in fp32: DeepSpeed's engine casts to bf16 / fp16 itself
        model = build_model(spec, setup.replace(precision="fp32"), request.impl, dev, request.seed)
        label = apply_strategy(model, request.recompute, every=request.every)
        config = ds_config(setup, request.offload)
        engine, *_ = deepspeed.initialize(
            model=model, config=config, model_parameters=model.parameters()
        )
        ids = token_ids(spec, setup, request.seed, dev)
        phase[0] = "the step"
        m, held, other, unnamed = measure_engine(engine, ids, setup.parallel.microbatches, say)
    optimizer = f"{type(engine.optimizer).__name__}/{type(engine.basic_optimizer).__name__}"
    notes = [
        *device_notes(spec, setup, dev),
        f"DeepSpeed {deepspeed.__version__} on the CPU accelerator ({optimizer}, "
        f"{torch.distributed.get_backend()}); held between steps by category: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(held.items()))
        + f"; {unnamed:,} bytes of live tensors outside DeepSpeed's (the token ids)",
    ]
    if other:
        notes.append("held but in no category: " + ", ".join(other[:4]))
    return Measurement(
        device="cpu", impl=request.impl.value, strategy=label, notes=tuple(notes), **m
    )


def _quiet(_msg: str) -> None:
    pass
