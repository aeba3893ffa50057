"""Frameworks: whose code runs the training step. The same Llama is a different set of saved
tensors and buffers in HF transformers with PyTorch's own parallelism and in Megatron-LM; a
framework is an axis beside the model family and the parallel layout.

A ``Framework`` is data: the features the lowering and the residency rules consult
(``strategies/residency/`` composes one small class per mechanism from them), never a name
compared in the core. Adding one is a ``Framework`` here and, where it runs new code, the
building blocks or mechanisms its features name (docs/adding-a-framework.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memcalc.errors import one_of


class TensorParallel(str, Enum):
    """How tensor (and sequence) parallelism is implemented."""

    megatron = "megatron"
    """Megatron-LM ``ColumnParallelLinear`` / ``RowParallelLinear``: under sequence
    parallelism a column-parallel linear saves its sequence shard and all-gathers it again in
    backward; ``VocabParallelEmbedding``'s gradient is the rank's own vocabulary rows."""
    dtensor = "dtensor"
    """DTensor ``parallelize_module`` (torchtitan's plan): ``PrepareModuleInput`` all-gathers
    the sequence-parallel input and the projections save the gathered tensor; the
    vocab-parallel embedding's gradient comes back replicated (V x h on every rank);
    ``loss_parallel`` keeps one more b*s*V/t fp32 tensor in forward and backward."""

    @property
    def saves_gathered_input(self) -> bool:
        """Under sequence parallelism a column-parallel projection saves its all-gathered
        input (else its sequence shard)."""
        return self is TensorParallel.dtensor


class PipelineRuntime(str, Enum):
    """What runs the pipeline schedule."""

    megatron = "megatron"
    """Megatron-LM's schedules: each sent output's data is freed
    (``deallocate_output_tensor``) and received into fresh buffers."""
    torch = "torch"
    """``torch.distributed.pipelining`` (``PipelineStage`` + ``Schedule1F1B``): one receive
    buffer per micro-batch for activations and one for gradients, kept across steps, and each
    in-flight micro-batch's output kept until its backward."""


class ModelCode(str, Enum):
    """Whose module code builds the model when ``memcalc measure`` runs it."""

    ours = "ours"
    """memcalc's reference model (``measure/reference_model.py``): HF's op sequence in one
    readable file."""
    hf = "hf"
    """Hugging Face transformers' modeling files."""
    megatron_core = "megatron-core"
    """Megatron-core's ``GPTModel`` with Transformer Engine's fused layers
    (``graph/blocks/megatron/``): ``TELayerNormColumnParallelLinear``, fused bias-GeLU /
    SwiGLU and rope, TE core attention by backend, vocab-parallel cross-entropy in place.
    Estimated only: it needs CUDA to run (``measure`` says where it stops)."""


class OptimizerImpl(str, Enum):
    """Whose optimizer steps the parameters."""

    torch = "torch"
    """``torch.optim`` (AdamW): a ``step`` tensor per parameter tensor, and with ``foreach``
    (the CUDA default) temporaries the size of all parameters during ``step()``."""
    te_fused_adam = "te-fused-adam"
    """Transformer Engine ``FusedAdam`` (``transformer_engine/pytorch/optimizers/fused_adam.py``
    ``FusedAdam.step``), Megatron-core's Adam (``megatron/core/optimizer/__init__.py``): one
    multi-tensor kernel updating in place, the step count a Python int per parameter group --
    no temporaries, no step tensors; states created at the first step."""


class GradientStore(str, Enum):
    """Where the parameters' gradients live."""

    param_grads = "param-grads"
    """Each parameter's ``.grad``, allocated as backward writes it and freed by
    ``zero_grad(set_to_none=True)`` after the step (torch DDP / FSDP2, HF Trainer)."""
    main_grad_buffer = "main-grad-buffer"
    """Megatron-core DDP's contiguous ``main_grad`` buffer
    (``megatron/core/distributed/param_and_grad_buffer.py`` ``_ParamAndGradBuffer.__init__``:
    ``torch.zeros(numel, dtype=grad_dtype)``), allocated when the model is wrapped and zeroed,
    not freed, every step: on the GPU throughout."""


class Workspaces(str, Enum):
    """Library workspaces the framework allocates through the caching allocator (counted in
    ``torch.cuda.memory_allocated``, unlike the CUDA context)."""

    none = "none"
    """Nothing modelled beyond the tensors (the profile's runtime overhead stands for them)."""
    te_cublas = "te-cublas"
    """Transformer Engine's cuBLAS workspace and PyTorch's cuBLAS workspaces
    (``strategies/residency/workspaces.py``)."""


class FrameworkName(str, Enum):
    """The frameworks memcalc models (``--framework``)."""

    hf = "hf"
    """Hugging Face transformers with PyTorch's own parallelism: DDP or FSDP2 for data
    parallelism, DTensor for tensor parallelism, torch.distributed.pipelining for pipelines
    (what ``memcalc measure --framework hf --nproc`` runs)."""
    megatron = "megatron"
    """Megatron-LM: Megatron-core's GPT model with Transformer Engine's fused layers, its
    tensor / sequence / pipeline-parallel runtime, DDP gradient buffer, distributed optimizer
    and TE FusedAdam (``TrainingSetup.megatron`` holds its arguments)."""
    reference = "reference"
    """memcalc's own reference model with PyTorch's parallelism (``memcalc measure``'s
    default): the same saved tensors as hf."""


@dataclass(frozen=True)
class Framework:
    """One framework's features."""

    name: FrameworkName
    tensor_parallel: TensorParallel
    pipeline: PipelineRuntime
    model_code: ModelCode
    optimizer: OptimizerImpl = OptimizerImpl.torch
    gradients: GradientStore = GradientStore.param_grads
    workspaces: Workspaces = Workspaces.none

    @property
    def label(self) -> str:
        return self.name.value

    @property
    def accumulates_in_param_dtype(self) -> bool:
        """Under fp16 mixed precision the gradient buffer is fp16 unless asked otherwise
        (Megatron-LM's ``accumulate_allreduce_grads_in_fp32`` is forced only for bf16)."""
        return self.gradients is GradientStore.main_grad_buffer


FRAMEWORKS = {
    FrameworkName.hf: Framework(
        FrameworkName.hf, TensorParallel.dtensor, PipelineRuntime.torch, ModelCode.hf
    ),
    FrameworkName.megatron: Framework(
        FrameworkName.megatron,
        TensorParallel.megatron,
        PipelineRuntime.megatron,
        ModelCode.megatron_core,
        OptimizerImpl.te_fused_adam,
        GradientStore.main_grad_buffer,
        Workspaces.te_cublas,
    ),
    FrameworkName.reference: Framework(
        FrameworkName.reference, TensorParallel.dtensor, PipelineRuntime.torch, ModelCode.ours
    ),
}
"""Every framework, by name."""


def framework(name: FrameworkName | str) -> Framework:
    """The framework called ``name`` (any case).

    >>> framework("HF").tensor_parallel.value
    'dtensor'
    """
    try:
        return FRAMEWORKS[FrameworkName(str(getattr(name, "value", name)).lower())]
    except ValueError:
        raise one_of("--framework", name, [f.value for f in FrameworkName]) from None


def default_framework(tp: int, pp: int) -> Framework:
    """The framework of a setup that names none: Megatron-LM for a tensor- or
    pipeline-parallel layout (what runs most of them), HF otherwise (without tp and pp the two
    run the same code)."""
    return FRAMEWORKS[FrameworkName.megatron if tp > 1 or pp > 1 else FrameworkName.hf]


PARALLEL_IMPL_FRAMEWORKS = {"megatron": FrameworkName.megatron, "torch": FrameworkName.hf}
"""The old ``--parallel-impl`` values and the framework each meant."""
PARALLEL_IMPL_OF = {
    TensorParallel.megatron: "megatron",
    TensorParallel.dtensor: "torch",
}
"""The ``parallel_impl`` a framework's tensor parallelism reports in JSON (the key's old
values)."""
