"""Command-line options shared by several commands, declared once (click decorators) so their
names, help and choices stay the same everywhere; and the conversion of their values into the
library's types. Enum choices are case-insensitive (``--unit gb``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import click

from memcalc.errors import MemcalcError
from memcalc.estimate import MIN_MFU
from memcalc.frameworks import FRAMEWORKS, PARALLEL_IMPL_FRAMEWORKS, FrameworkName, TensorParallel
from memcalc.profiles import DEFAULT_GPU
from memcalc.report import Format
from memcalc.spec.finetune import Quantize
from memcalc.spec.presets import DEFAULT_MODEL
from memcalc.spec.training import (
    DEFAULT_MOE_IMBALANCE,
    Attention,
    GradDType,
    Loss,
    OptimizerKind,
    Precision,
)
from memcalc.strategies.recompute import Recompute
from memcalc.units import Unit

F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E", bound=Enum)


class EnumChoice(click.Choice):  # type: ignore[type-arg]
    """A click choice of an Enum's values, case-insensitive, converted to the member."""

    def __init__(self, enum: type[Enum]) -> None:
        self.enum = enum
        super().__init__([str(m.value) for m in enum], case_sensitive=False)

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, self.enum):
            return value
        return self.enum(super().convert(value, param, ctx))


class Number(click.ParamType):  # type: ignore[type-arg]
    """A finite number within stated bounds (click's FloatRange lets ``nan`` through): the
    flag's value is refused with its range, never turned into inf or nan."""

    name = "number"

    def __init__(self, low: float, high: float, *, low_open: bool = False, high_open: bool = False):
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open

    @property
    def allowed(self) -> str:
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        return f"{left}{self.low:g}, {self.high:g}{right}"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, float):
            number = value
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                self.fail(
                    f"{str(value)[:40]!r} is not a number (allowed: {self.allowed})", param, ctx
                )
        if isinstance(value, bool) or not math.isfinite(number):
            self.fail(
                f"{str(value)[:40]!r} is not a finite number (allowed: {self.allowed})", param, ctx
            )
        low_ok = number > self.low if self.low_open else number >= self.low
        high_ok = number < self.high if self.high_open else number <= self.high
        if not (low_ok and high_ok):
            self.fail(f"{number:g} is outside {self.allowed}", param, ctx)
        return number


class FilePath(click.ParamType):  # type: ignore[type-arg]
    """A file path taken as given: no ``os.stat`` at parse time (click.Path's raises on a NUL
    byte); the reader (``memcalc.files``) says what is wrong with it, naming it."""

    name = "path"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        text = str(value)
        if "\x00" in text or not text.strip():
            self.fail(f"{text[:60]!r} is not a usable path", param, ctx)
        return Path(text)


MFU = Number(MIN_MFU, 1.0)
"""--mfu: a fraction of peak FLOP/s; below MIN_MFU a step's time is meaningless."""
RATE = Number(0.0, 1.0, high_open=True)
"""A dropout rate."""


def options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Apply ``decorators`` in the order written (click applies the last one first)."""

    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


def model_option(default: str = DEFAULT_MODEL) -> Callable[[F], F]:
    return click.option(
        "--model",
        "-m",
        default=default,
        show_default=True,
        help="Preset (memcalc models list), its HF hub id, a memcalc spec TOML/JSON or an HF "
        "config.json.",
    )


gpu_option = click.option(
    "--gpu",
    default=DEFAULT_GPU,
    show_default=True,
    help="GPU profile or alias (h100, a100, 4090; memcalc profiles list) or a profile file.",
)
gpu_memory_option = click.option(
    "--gpu-memory",
    default=None,
    help="A GPU known by its memory only (e.g. 48GB, 24GiB; the other figures are the "
    "reference profile's), or with --gpu that GPU with this much memory.",
)

fit_options = options(
    click.option(
        "--headroom",
        default="10%",
        show_default=True,
        help="GPU memory kept free for allocator fragmentation (e.g. 10% or 0.1).",
    ),
    click.option(
        "--host-memory",
        default=None,
        help="Host RAM per node for offloads (e.g. 1TiB); default: the GPU profile's server.",
    ),
)

setup_options = options(
    click.option(
        "--batch",
        "-b",
        type=int,
        default=1,
        show_default=True,
        help="Micro-batch size (sequences).",
    ),
    click.option(
        "--seq", "-s", type=int, default=1024, show_default=True, help="Sequence length (tokens)."
    ),
    click.option(
        "--precision",
        type=EnumChoice(Precision),
        default=Precision.bf16_mixed.value,
        show_default=True,
        help="Precision recipe.",
    ),
    click.option(
        "--grad-dtype",
        type=EnumChoice(GradDType),
        default=None,
        help="Gradient dtype under -mixed (fp32 default, or bf16/fp16).",
    ),
    click.option(
        "--optimizer",
        type=EnumChoice(OptimizerKind),
        default=OptimizerKind.adamw.value,
        show_default=True,
        help="Optimizer.",
    ),
    click.option(
        "--foreach/--no-foreach",
        default=True,
        show_default=True,
        help="Multi-tensor optimizer step (temporaries the size of all parameters).",
    ),
    click.option(
        "--fused/--no-fused",
        default=False,
        show_default=True,
        help="Fused AdamW (in place, step counters on the GPU).",
    ),
    click.option(
        "--attention",
        type=EnumChoice(Attention),
        default=Attention.sdpa.value,
        show_default=True,
        help="Attention kernel.",
    ),
    click.option(
        "--loss",
        type=EnumChoice(Loss),
        default=Loss.standard.value,
        show_default=True,
        help="Loss implementation.",
    ),
    click.option(
        "--dropout", type=RATE, default=None, help="Override every dropout rate of the model."
    ),
)

routing_options = options(
    click.option(
        "--moe-imbalance",
        type=float,
        default=DEFAULT_MOE_IMBALANCE,
        show_default=True,
        help="MoE: tokens the busiest expert gets, as a multiple of its fair share (dropless).",
    ),
    click.option(
        "--capacity-factor",
        type=float,
        default=None,
        help="MoE: token-dropping routing, every expert buffer ceil(t*k/E * factor) rows.",
    ),
)

layout_options = options(
    click.option(
        "--dp", "--gpus", "dp", type=int, default=1, show_default=True, help="Data-parallel GPUs."
    ),
    click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel GPUs."),
    click.option("--pp", type=int, default=1, show_default=True, help="Pipeline stages (1F1B)."),
    click.option("--cp", type=int, default=1, show_default=True, help="Context-parallel GPUs."),
    click.option(
        "--ep", type=int, default=1, show_default=True, help="Expert-parallel GPUs (MoE)."
    ),
    click.option(
        "--sp/--no-sp",
        default=True,
        show_default=True,
        help="Sequence parallelism with tp > 1 (Megatron).",
    ),
    click.option(
        "--vpp", type=int, default=1, show_default=True, help="Virtual stages per pipeline rank."
    ),
    click.option(
        "--microbatches",
        type=int,
        default=1,
        show_default=True,
        help="Micro-batches per step (gradient accumulation; pipeline m).",
    ),
    click.option(
        "--zero",
        type=int,
        default=0,
        show_default=True,
        help="ZeRO stage: 0 none, 1 optimizer, 2 +gradients, 3 +parameters (FSDP).",
    ),
    click.option(
        "--fsdp-reshard",
        type=click.Choice(["true", "false"], case_sensitive=False),
        default="true",
        show_default=True,
        help="ZeRO-3/FSDP2 reshard_after_forward.",
    ),
    click.option(
        "--shard-size", type=int, default=None, help="HSDP: shard within this many dp ranks."
    ),
    click.option(
        "--bucket-view/--no-bucket-view",
        default=False,
        show_default=True,
        help="DDP gradient_as_bucket_view (no bucket copy of the gradients).",
    ),
    click.option(
        "--framework",
        type=EnumChoice(FrameworkName),
        default=None,
        help="Whose code runs the step: hf (transformers with DDP / FSDP2, DTensor, "
        "torch.distributed.pipelining), megatron (Megatron-LM's parallel runtime) or reference "
        "(memcalc's own model); default megatron with --tp / --pp, else hf.",
    ),
    click.option(
        "--parallel-impl",
        type=click.Choice(sorted(PARALLEL_IMPL_FRAMEWORKS), case_sensitive=False),
        default=None,
        hidden=True,
        help="Deprecated: --framework megatron (megatron) or --framework hf (torch).",
    ),
)

finetune_options = options(
    click.option(
        "--lora-rank", type=int, default=None, help="LoRA on a frozen base with this rank (PEFT)."
    ),
    click.option(
        "--lora-alpha",
        type=Number(0.0, 1e6, low_open=True),
        default=16.0,
        show_default=True,
        help="lora_alpha (no memory effect; for parity with PEFT).",
    ),
    click.option(
        "--lora-targets",
        default=None,
        help="Comma-separated module names (q_proj,v_proj,...) or all-linear; default: PEFT's "
        "for the family.",
    ),
    click.option(
        "--lora-dropout",
        type=RATE,
        default=0.0,
        show_default=True,
        help="Dropout on the adapter input.",
    ),
    click.option(
        "--quantize",
        type=EnumChoice(Quantize),
        default=Quantize.none.value,
        show_default=True,
        help="Frozen base linear weights: int8 (LLM.int8), nf4, nf4-dq, fp4 (QLoRA).",
    ),
    click.option(
        "--train-embeddings",
        is_flag=True,
        help="Train the embeddings (and an untied head) in full.",
    ),
    click.option(
        "--modules-to-save", default=None, help="Comma-separated modules PEFT trains in full."
    ),
    click.option(
        "--kbit-prep/--no-kbit-prep",
        default=None,
        help="PEFT prepare_model_for_kbit_training (fp32 non-quantized params, input grads); "
        "default on with --quantize.",
    ),
    click.option(
        "--input-grads/--no-input-grads",
        default=None,
        help="The embedding output requires grad (enable_input_require_grads).",
    ),
)

strategy_options = options(
    click.option(
        "--recompute",
        type=EnumChoice(Recompute),
        default=None,
        help="One recompute strategy (prints a detailed breakdown).",
    ),
    click.option(
        "--every",
        type=int,
        default=None,
        help="k for --recompute every-k (default round(sqrt(N))).",
    ),
    click.option(
        "--budget",
        default=None,
        help="Activation budget for --recompute budget, e.g. 20GiB or 2e10.",
    ),
    click.option(
        "--offload",
        multiple=True,
        help="WHAT=WHERE, repeatable: optimizer=cpu|nvme, params=cpu, activations=cpu.",
    ),
    click.option(
        "--mfu",
        type=MFU,
        default=None,
        show_default=False,
        help="Rate every matmul and attention kernel at this fraction of peak instead of by "
        "its shape (default: the kernel model).",
    ),
)

output_options = options(
    click.option(
        "--format",
        "fmt",
        type=EnumChoice(Format),
        default=Format.table.value,
        show_default=True,
        help="Output format.",
    ),
    click.option(
        "--unit",
        type=EnumChoice(Unit),
        default=Unit.GiB.value,
        show_default=True,
        help="Memory unit: GiB (2^30) or GB (10^9).",
    ),
)

view_options = options(
    click.option(
        "--wide",
        is_flag=True,
        help="Every column of the table (by default a few, fitted to the terminal).",
    ),
    click.option(
        "--plot",
        metavar="FILE",
        default=None,
        help="Also draw a chart to FILE (.png, .svg or .html); needs the plot extra: "
        "pip install -e '.[plot]' (or just matplotlib).",
    ),
)


def terminal_width() -> int:
    """Columns to fit text to: $COLUMNS, else the terminal's, else 80."""
    import shutil

    return shutil.get_terminal_size().columns


SETUP_KEYS = (
    "batch",
    "seq",
    "precision",
    "grad_dtype",
    "optimizer",
    "attention",
    "loss",
    "dropout",
    "moe_imbalance",
    "capacity_factor",
)
LAYOUT_KEYS = (
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "sp",
    "vpp",
    "microbatches",
    "zero",
    "shard_size",
    "bucket_view",
)


def layout_fields(values: dict[str, Any]) -> dict[str, Any]:
    """The parallel-layout fields of a command's option values."""
    fields = {k: values[k] for k in LAYOUT_KEYS if k in values}
    if "fsdp_reshard" in values:
        fields["fsdp_reshard"] = values["fsdp_reshard"].lower() == "true"
    return fields


def framework_field(values: dict[str, Any]) -> FrameworkName | None:
    """``--framework``, or what the deprecated ``--parallel-impl`` meant (said on stderr)."""
    old = values.get("parallel_impl")
    if old is None:
        return values.get("framework")
    name = PARALLEL_IMPL_FRAMEWORKS[old.lower()]
    click.echo(
        f"note: --parallel-impl {old.lower()} is deprecated: use --framework {name.value}",
        err=True,
    )
    if values.get("framework") not in (None, name):
        raise click.UsageError(
            f"--parallel-impl {old} and --framework {values['framework'].value} disagree"
        )
    return name


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


def finetune_fields(values: dict[str, Any]) -> dict[str, Any]:
    """The fine-tuning fields (lora, quantize, kbit_prep, input_grads) of option values."""
    if "lora_rank" not in values:
        return {}
    fields: dict[str, Any] = {
        "quantize": values["quantize"],
        "kbit_prep": values["kbit_prep"],
        "input_grads": values["input_grads"],
    }
    if values["lora_rank"] is not None:
        fields["lora"] = {
            "rank": values["lora_rank"],
            "alpha": values["lora_alpha"],
            "targets": _names(values["lora_targets"]),
            "dropout": values["lora_dropout"],
            "train_embeddings": values["train_embeddings"],
            "modules_to_save": _names(values["modules_to_save"]),
        }
    return fields


def setup_fields(values: dict[str, Any]) -> dict[str, Any]:
    """The TrainingSetup fields (parallel layout flat) of a command's option values."""
    fields = {k: values[k] for k in SETUP_KEYS if k in values} | layout_fields(values)
    fields |= finetune_fields(values)
    if "framework" in values:
        fields["framework"] = framework_field(values)
    if "foreach" in values:
        fields["optimizer_foreach"] = values["foreach"]
    if "fused" in values:
        fields["optimizer_fused"] = values["fused"]
    return fields


def measured_code(framework: FrameworkName | None, impl: str | None) -> str:
    """The model code ``measure`` builds: the framework's (reference by default), or what the
    deprecated ``--impl`` named (said on stderr)."""
    if impl is not None:
        name = FrameworkName.reference if impl.lower() == "ours" else FrameworkName.hf
        click.echo(
            f"note: --impl {impl.lower()} is deprecated: use --framework {name.value}", err=True
        )
        if framework not in (None, name):
            raise MemcalcError(f"--impl {impl} and --framework {framework.value} disagree")
        framework = name
    chosen = FRAMEWORKS[framework or FrameworkName.reference]
    if chosen.tensor_parallel is not TensorParallel.dtensor:
        raise MemcalcError(
            f"--framework: measure runs hf or reference (transformers or memcalc's model with "
            f"PyTorch's parallelism); {chosen.label} does not run here"
        )
    return chosen.model_code.value
