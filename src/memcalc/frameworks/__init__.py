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


class FrameworkName(str, Enum):
    """The frameworks memcalc models (``--framework``)."""

    hf = "hf"
    """Hugging Face transformers with PyTorch's own parallelism: DDP or FSDP2 for data
    parallelism, DTensor for tensor parallelism, torch.distributed.pipelining for pipelines
    (what ``memcalc measure --framework hf --nproc`` runs)."""
    megatron = "megatron"
    """Megatron-LM's tensor / sequence / pipeline-parallel runtime, over HF's layer code (its
    own fused layers are not modelled yet)."""
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

    @property
    def label(self) -> str:
        return self.name.value


FRAMEWORKS = {
    FrameworkName.hf: Framework(
        FrameworkName.hf, TensorParallel.dtensor, PipelineRuntime.torch, ModelCode.hf
    ),
    FrameworkName.megatron: Framework(
        FrameworkName.megatron, TensorParallel.megatron, PipelineRuntime.megatron, ModelCode.hf
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
