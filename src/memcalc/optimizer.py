"""Optimizer state per parameter, and what the optimizer step allocates.

Sources: torch.optim (Adam/AdamW keep ``exp_avg`` and ``exp_avg_sq``; SGD with momentum keeps
``momentum_buffer``; a ``step`` scalar tensor per parameter tensor for Adam-type optimizers);
Shazeer & Stern 2018 (Adafactor: factored second moment, rows + columns per matrix);
Dettmers et al. 2022 (8-bit Adam: 1 byte per state element plus one fp32 absmax per 2048-element
block, tensors under 4096 elements kept in 32 bit); Chen et al. 2023 (Lion: one momentum).
Under a -mixed precision the optimizer also keeps fp32 master weights (Micikevicius et al. 2018),
counted here with the optimizer states, as DeepSpeed and Megatron do.
"""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.frameworks import OptimizerImpl
from memcalc.params import BNB_BLOCK, ParamCounts
from memcalc.spec.training import DType, OptimizerKind, TrainingSetup

_STATES_PER_PARAM = {
    OptimizerKind.sgd: 0,
    OptimizerKind.sgd_momentum: 1,
    OptimizerKind.adam: 2,
    OptimizerKind.adamw: 2,
    OptimizerKind.lion: 1,
}
_HAS_STEP_TENSOR = {OptimizerKind.adam, OptimizerKind.adamw}
"""torch Adam/AdamW keep ``state["step"]`` as a tensor; bitsandbytes' 8-bit optimizers keep a
Python int (``Optimizer8bit.init_state``)."""


@dataclass(frozen=True)
class OptimizerBytes:
    """Bytes the optimizer holds between steps, and its step temporaries."""

    state_bytes: int
    """exp_avg / exp_avg_sq / momentum etc."""
    master_weight_bytes: int
    """fp32 copy of the weights under a -mixed recipe, else 0."""
    step_tensor_bytes: int
    """torch Adam's per-tensor ``step`` scalars (4 bytes each)."""
    step_temporary_bytes: int
    """Transient allocations inside ``optimizer.step()``."""

    persistent_temporary_bytes: int = 0
    """The part of ``step_temporary_bytes`` still allocated after the step, until the next
    step's ``zero_grad`` (Megatron's fp32 main-parameter gradients)."""
    step_on_device: bool = True
    """torch keeps ``step`` on the parameters' device only for fused or capturable Adam
    (``adam.py`` ``_init_group``: ``torch.tensor(0.0)`` -- a CPU tensor -- otherwise); on a
    GPU the default's step tensors are host memory."""

    @property
    def total_bytes(self) -> int:
        """Everything the optimizer holds on the device between steps."""
        step = self.step_tensor_bytes if self.step_on_device else 0
        return self.state_bytes + self.master_weight_bytes + step


def optimizer_bytes(
    setup: TrainingSetup, counts: ParamCounts, device: str = "cuda"
) -> OptimizerBytes:
    """State, master weights and step temporaries for ``setup.optimizer``.

    Mixed-precision AdamW on GPT-2 small: 12 bytes per parameter (fp32 master + m + v):

    >>> from memcalc.spec.presets import preset
    >>> from memcalc.params import count_params
    >>> spec = preset("gpt2"); setup = TrainingSetup(precision="bf16-mixed")
    >>> ob = optimizer_bytes(setup, count_params(spec))
    >>> (ob.state_bytes + ob.master_weight_bytes) // count_params(spec).total
    12
    """
    counts = counts.optimizer_counts  # only trainable tensors have optimizer state
    kind = setup.optimizer
    p = counts.total
    # tensors stored in a dtype of their own (fp32 LoRA adapters) keep states in that dtype
    recipe = p - counts.fixed_numel
    state_size = setup.optimizer_dtype.itemsize
    if kind is OptimizerKind.adamw_8bit:
        big = p - counts.small_tensor_numel
        state = 2 * (big + 4 * -(-big // BNB_BLOCK)) + 2 * 4 * counts.small_tensor_numel
    elif kind is OptimizerKind.adafactor:
        state = counts.adafactor_state_elements * 4
    else:
        state = _STATES_PER_PARAM[kind] * (recipe * state_size + counts.fixed_bytes)
    master = 4 * recipe if setup.precision.is_mixed else 0
    megatron = setup.framework_def.optimizer is OptimizerImpl.te_fused_adam
    main_grads = _main_grad_copies(setup, recipe) if megatron else 0
    if megatron and setup.megatron_options.fused_adam:
        # TE FusedAdam (fused_adam.py FusedAdam.step): group["step"] is a Python int and the
        # multi-tensor kernel updates in place -- no step tensors, no temporaries
        return OptimizerBytes(state, master, 0, main_grads, main_grads, True)
    step = 4 * counts.tensors if kind in _HAS_STEP_TENSOR else 0
    on_device = device == "cpu" or setup.optimizer_fused
    temporaries = _step_temporaries(setup, counts) + main_grads
    return OptimizerBytes(state, master, step, temporaries, main_grads, on_device)


def _main_grad_copies(setup: TrainingSetup, numel: int) -> int:
    """Megatron's fp32 main-parameter gradients: ``_copy_model_grads_to_main_grads``
    (``megatron/core/optimizer/optimizer.py``: ``main_param.grad = model_param.main_grad
    .float()``; the distributed optimizer likewise per shard) is a new fp32 tensor unless the
    gradient buffer is fp32 already; it lives from the step until the next step's
    ``zero_grad``."""
    if not setup.precision.is_mixed or setup.gradient_dtype is DType.fp32:
        return 0
    return 4 * numel


def _step_temporaries(setup: TrainingSetup, counts: ParamCounts) -> int:
    """torch ``_multi_tensor_adam(w)`` (foreach) allocates ``exp_avg_sq.sqrt()`` for all
    parameters at once: one state-sized copy of the whole model; the per-tensor loop allocates
    it for one tensor at a time (the largest). SGD-type and Lion steps update in place."""
    if setup.optimizer not in (OptimizerKind.adam, OptimizerKind.adamw) or setup.optimizer_fused:
        return 0  # a fused step updates in place
    counts = counts.optimizer_counts
    if not setup.optimizer_foreach:
        return counts.largest_tensor * setup.optimizer_dtype.itemsize
    recipe = counts.total - counts.fixed_numel
    return recipe * setup.optimizer_dtype.itemsize + counts.fixed_bytes
