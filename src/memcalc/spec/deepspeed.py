"""DeepSpeed ZeRO's settings that change what a rank holds, with DeepSpeed's own defaults.

The names are DeepSpeed's JSON keys under ``zero_optimization`` (``deepspeed/runtime/zero/
config.py`` ``DeepSpeedZeroConfig``, ``offload_config.py``; DeepSpeed 0.19.8), plus
``communication_data_type`` and the optimizer's ``torch_adam`` from the top of the config. The
stage, the offload devices, the precision (``bf16`` / ``fp16``), ``data_types.grad_accum_dtype``,
the micro-batch and ``gradient_accumulation_steps`` are memcalc's own options (``--zero``,
``--offload``, ``--precision``, ``--grad-dtype``, ``--batch``, ``--microbatches``);
``memcalc/configs/deepspeed.py`` (``--config ds.json``) maps a whole DeepSpeed JSON onto both.

>>> DeepSpeedZero().reduce_bucket_size, DeepSpeedZero().overlap(3), DeepSpeedZero().overlap(2)
(500000000, True, False)
>>> parse_settings(["reduce_bucket_size=1e5", "overlap_comm=true"]).reduce_bucket_size
100000
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

from memcalc.dtypes import DType
from memcalc.validate import FieldError, check, parse, spec_field

MAX_ELEMENTS = sys.maxsize
"""DeepSpeed's ``stage3_model_persistence_threshold`` default (``sys.maxsize``: no cap)."""


@dataclass(frozen=True)
class DeepSpeedZero:
    """The ``zero_optimization`` keys (and two others) memcalc's DeepSpeed engine models."""

    reduce_bucket_size: int = spec_field(
        "Elements of the gradient reduction (ipg) bucket: ZeRO-1/2 allocate it at the first "
        "gradient of every backward and free it at its end, ZeRO-3 keeps it for the whole run "
        "(torch.empty of the full size, never capped at the model's).",
        default=500_000_000,
        gt=0,
        le=MAX_ELEMENTS,
    )
    allgather_bucket_size: int = spec_field(
        "ZeRO-1/2 all-gather chunk: no memory effect, the updated partitions are gathered in "
        "place (all_gather_into_tensor, runtime/utils.py all_gather_into_tensor_dp_groups).",
        default=500_000_000,
        ge=0,
        le=MAX_ELEMENTS,
    )
    contiguous_gradients: bool = spec_field(
        "Gradients copied into the ipg bucket as they arrive (and, ZeRO-1/2, into the "
        "partition's gradient buffer); forced on by optimizer offload at ZeRO-1/2.",
        default=True,
    )
    overlap_comm: bool | None = spec_field(
        "Reduce while the backward runs; ZeRO-1/2 then keep two ipg buckets. None: DeepSpeed's "
        "default, true at stage 3 only (config.py overlap_comm_valid).",
        default=None,
    )
    reduce_scatter: bool = spec_field(
        "Reduce the bucket by (reduce-)scatter, which copies it (ZeRO-1/2: a flattened copy "
        "all-reduced; ZeRO-3: an interleaved, padded cat); false all-reduces it in place.",
        default=True,
    )
    sub_group_size: int = spec_field(
        "ZeRO-3 optimizer sub-group (elements): the step builds one sub-group's fp32 gradient "
        "at a time.",
        default=1_000_000_000,
        ge=1,
        le=MAX_ELEMENTS,
    )
    stage3_prefetch_bucket_size: int = spec_field(
        "ZeRO-3: elements all-gathered ahead of use at each module's fetch.",
        default=50_000_000,
        ge=0,
        le=MAX_ELEMENTS,
    )
    stage3_param_persistence_threshold: int = spec_field(
        "ZeRO-3: parameters of at most this many elements stay gathered on every rank, beside "
        "their partition (parameter_offload.py mark_persistent_parameters).",
        default=100_000,
        ge=0,
        le=MAX_ELEMENTS,
    )
    stage3_model_persistence_threshold: int = spec_field(
        "ZeRO-3: most elements of persistent parameters in all.",
        default=MAX_ELEMENTS,
        ge=0,
        le=MAX_ELEMENTS,
    )
    stage3_max_live_parameters: int = spec_field(
        "ZeRO-3: elements gathered at once beyond which nothing more is prefetched.",
        default=1_000_000_000,
        ge=0,
        le=MAX_ELEMENTS,
    )
    stage3_max_reuse_distance: int = spec_field(
        "ZeRO-3: a gathered parameter used again within this many elements of parameter traffic "
        "is not released after its module (the default keeps a small model's whole 16-bit copy "
        "from its forward to its backward).",
        default=1_000_000_000,
        ge=0,
        le=MAX_ELEMENTS,
    )
    offload_optimizer_pin_memory: bool = spec_field(
        "offload_optimizer.pin_memory: the host buffers are page-locked (CUDA).", default=True
    )
    offload_param_pin_memory: bool = spec_field(
        "offload_param.pin_memory: the host partitions are page-locked (CUDA).", default=True
    )
    communication_data_type: DType | None = spec_field(
        "Dtype gradients are reduced in (None: the model's; runtime/engine.py "
        "communication_data_type). ZeRO-3's ipg bucket has this dtype.",
        default=None,
    )
    torch_adam: bool = spec_field(
        "optimizer.params.torch_adam: torch.optim.AdamW instead of DeepSpeed's FusedAdam / "
        "DeepSpeedCPUAdam (runtime/engine.py _configure_basic_optimizer).",
        default=False,
    )

    def __post_init__(self) -> None:
        check(self)

    def overlap(self, stage: int) -> bool:
        """``overlap_comm`` as DeepSpeed resolves it for ``stage``."""
        return stage == 3 if self.overlap_comm is None else self.overlap_comm


DEFAULTS = DeepSpeedZero()
"""DeepSpeed's defaults."""

FIELDS = tuple(f.name for f in dataclasses.fields(DeepSpeedZero))


def _value(name: str, text: str) -> object:
    """A ``KEY=VALUE`` value as its field's type: integers may be written 5e8 (DeepSpeed
    reads its JSON's numbers so), booleans true/false, dtypes by name, ``none`` for None."""
    default = getattr(DEFAULTS, name)
    low = text.strip().lower()
    if low in ("none", "null", "auto"):
        return None
    if name == "communication_data_type":
        return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(low, low)
    if isinstance(default, bool) or default is None:
        if low not in ("true", "false"):
            raise FieldError(name, f"expected true or false, got {text!r}")
        return low == "true"
    try:
        number = float(low)
    except ValueError:
        raise FieldError(name, f"expected a number of elements, got {text!r}") from None
    if not number.is_integer():
        raise FieldError(name, f"expected a whole number of elements, got {text!r}")
    return int(number)


def parse_settings(items: list[str] | tuple[str, ...], source: str = "--ds") -> DeepSpeedZero:
    """``KEY=VALUE`` settings (``--ds``, repeatable) as a DeepSpeedZero; a bad key or value
    is one FieldError naming it and what is allowed."""
    values: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in FIELDS:
            raise FieldError(
                key or item, f"expected KEY=VALUE with KEY one of: {', '.join(FIELDS)}", source
            )
        try:
            values[key] = _value(key, text)
        except FieldError as e:
            raise e.at(source) from None
    return parse(DeepSpeedZero, values, source)


DEEPSPEED_PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed")
"""What DeepSpeed's engine runs: fp32, or ``bf16`` / ``fp16`` enabled -- 16-bit weights with an
fp32 master partition (``bf16-mixed`` / ``fp16-mixed``)."""
DEEPSPEED_OPTIMIZERS = ("adam", "adamw")


def check_setup(
    precision: str, optimizer: str, zero: int, dims: dict[str, int], lora: bool
) -> None:
    """A FieldError for what memcalc's DeepSpeed engine does not model (``dims``: the other
    parallel dimensions, tp / pp / cp / ep, each must be 1)."""
    if precision not in DEEPSPEED_PRECISIONS:
        raise FieldError(
            "precision",
            f"DeepSpeed ZeRO runs one of: {', '.join(DEEPSPEED_PRECISIONS)} (its bf16 / fp16 "
            f"engine keeps an fp32 master partition); got {precision}",
        )
    if optimizer not in DEEPSPEED_OPTIMIZERS:
        raise FieldError(
            "optimizer",
            f"memcalc models DeepSpeed's Adam / AdamW (FusedAdam, DeepSpeedCPUAdam, torch_adam): "
            f"one of {', '.join(DEEPSPEED_OPTIMIZERS)}; got {optimizer}",
        )
    if zero not in (1, 2, 3):
        raise FieldError("zero", f"the DeepSpeed engine models ZeRO stages 1, 2 and 3; got {zero}")
    for name, value in dims.items():
        if value > 1:
            raise FieldError(
                name,
                "the DeepSpeed engine is modelled for data parallelism alone (its ZeRO with "
                f"tensor / pipeline / context / expert parallelism is not); got {name} {value}",
            )
    if lora:
        raise FieldError("lora", "LoRA under the DeepSpeed engine is not modelled")
