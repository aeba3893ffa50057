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
from memcalc.frameworks import torchtitan
from memcalc.frameworks.features import (
    HF_CODE,
    MEMCALC_CHECKPOINTING,
    Checkpointing,
    FsdpGroups,
    LayerCode,
)


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

    torchtitan = "torchtitan"
    """torchtitan's own plan (0.3: ``models/common/decoder_sharding.py``; 0.2.2:
    ``apply_tp``) over DTensor: the DTensor rules, except that its vocab-parallel
    ``Embedding`` masks a local lookup (its gradient is the rank's rows, saving int64 local ids
    and a mask) and its loss is ``_LossParallelCrossEntropy`` (0.3, ``components/loss.py``:
    saves the fp32 log-probabilities of the rank's vocabulary shard)."""

    @property
    def saves_gathered_input(self) -> bool:
        """Under sequence parallelism a column-parallel projection saves its all-gathered
        input (else its sequence shard)."""
        return self is not TensorParallel.megatron


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
    torchtitan = "torchtitan"
    """torchtitan's own models and ``parallelize_*`` functions (``measure/torchtitan/``)."""


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


class ShardingEngine(str, Enum):
    """What implements data parallelism and ZeRO sharding (``--zero-engine``). The residency
    rules of each are in ``strategies/residency/`` (``compose.ENGINES``)."""

    torch = "torch"
    """PyTorch's own: DDP's buckets without ZeRO, ZeRO-1/2 as the ZeRO paper's 1/N shares,
    FSDP2 at ZeRO-3 (what ``memcalc measure --nproc`` runs with torch)."""
    deepspeed = "deepspeed"
    """DeepSpeed's ZeRO engine (``deepspeed/runtime/zero/``): the flat padded 16-bit buffer and
    fp32 master partition of ZeRO-1/2, per-parameter partitions, persistent parameters and the
    parameter coordinator of ZeRO-3, its gradient buckets and offload buffers
    (``strategies/residency/deepspeed/``)."""

    @property
    def builds_ops(self) -> bool:
        """Its run compiles C++ ops on first use (DeepSpeed's JIT op builder)."""
        return self is ShardingEngine.deepspeed

    @property
    def ranks_differ(self) -> bool:
        """Its data-parallel ranks hold different bytes (DeepSpeed ZeRO-1/2: each rank's
        partition boundary cuts other tensors)."""
        return self is ShardingEngine.deepspeed

    @property
    def offloads_to_nvme(self) -> bool:
        """memcalc models this engine's optimizer offload to NVMe (not DeepSpeed's swapper)."""
        return self is ShardingEngine.torch

    @property
    def grads_in_model_dtype(self) -> bool:
        """Gradients are reduced and accumulated in the model's dtype unless asked otherwise
        (DeepSpeed: ``data_types.grad_accum_dtype`` defaults to the model dtype,
        ``runtime/engine.py`` ``get_data_types``); torch's -mixed recipes keep fp32 main
        gradients by default."""
        return self is ShardingEngine.deepspeed

    @property
    def casts_every_parameter(self) -> bool:
        """The engine casts every parameter to the training dtype, the ones the model keeps
        in fp32 included (DeepSpeed 0.19 ``runtime/engine.py`` ``_configure_distributed_model``
        -> ``_cast_module_mixed_precision``; ``runtime/keep_in_fp32.py``: "Only buffers are
        kept in fp32 here"); torch's DDP / FSDP2 leave the loaded dtypes as they are."""
        return self is ShardingEngine.deepspeed


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
    torchtitan = "torchtitan"
    """torchtitan 0.3.0 (``frameworks/torchtitan.py``): its Llama 3 / Qwen3 code (fused wqkv,
    ``nn.RMSNorm``, complex RoPE from a cache), op-level selective checkpointing, FSDP2 over
    dp x cp with its MixedPrecisionPolicy, its tensor-parallel plan and loss."""
    torchtitan_0_2_2 = "torchtitan-0.2.2"
    """torchtitan 0.2.2: separate wq / wk / wv, its op-SAC save list, layer-level SAC
    (``--recompute every-k``), TOML job configs."""


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
    layer_code: LayerCode = HF_CODE
    """How its model code writes the ops (the lowering's overrides of HF's)."""
    checkpointing: Checkpointing = MEMCALC_CHECKPOINTING
    """What its activation-checkpointing modes do."""
    fsdp_groups: FsdpGroups = FsdpGroups.root
    """How its FSDP2 wrapping groups the parameters."""
    always_fsdp: bool = False
    """Data parallelism is always FSDP2 (ZeRO-3), applied even on one GPU so that its
    MixedPrecisionPolicy holds (torchtitan 0.3 ``parallelize_llama``)."""
    fsdp_data_parallel: bool = False
    """Data parallelism is FSDP2 (``--dp`` is torchtitan's ``data_parallel_shard_degree``):
    ZeRO-3 whatever ``--zero`` says (which may only be 0 or 3)."""
    torch_context_parallel: bool = True
    """Its context parallelism is torch's ``context_parallel`` (``torch/distributed/tensor/
    experimental/_context_parallel/_attention.py``: SDPA's fused kernels run as
    ``_templated_ring_attention``), whose ring buffers ``graph/blocks/ring_attention.py``
    counts; False: another implementation (Megatron's Transformer Engine ring attention,
    whose buffers are not modelled)."""
    shards_over_cp: bool = False
    """FSDP shards the states over dp x cp (torchtitan ``ParallelDims``: ``fsdp = dp_shard *
    cp``), not over dp alone."""
    grads_kept: bool = False
    """Gradients stay allocated from step to step (``zero_grad(set_to_none=False)``: torchtitan
    0.3 with CUDA graphs on, its default); otherwise they appear during backward."""
    version: str = ""
    """The release whose source the rules are read from."""
    defaults: tuple[tuple[str, object], ...] = ()
    """The framework's own defaults, as (TrainingSetup field, value): what a command uses for
    an option the user did not give (said on stderr)."""
    unsharded_precision: str | None = None
    """The precision default when FSDP2 is not applied (one rank), if not ``defaults``'."""
    sharding: ShardingEngine = ShardingEngine.torch
    """The framework's own data-parallel / ZeRO engine (``--zero-engine`` chooses another)."""

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
        torch_context_parallel=False,
    ),
    FrameworkName.reference: Framework(
        FrameworkName.reference, TensorParallel.dtensor, PipelineRuntime.torch, ModelCode.ours
    ),
    FrameworkName.torchtitan: Framework(
        FrameworkName.torchtitan,
        TensorParallel.torchtitan,
        PipelineRuntime.torch,
        ModelCode.torchtitan,
        layer_code=torchtitan.T30_CODE,
        checkpointing=torchtitan.T30_CHECKPOINTING,
        fsdp_groups=FsdpGroups.torchtitan,
        always_fsdp=True,
        fsdp_data_parallel=True,
        shards_over_cp=True,
        grads_kept=True,
        version="0.3.0",
        defaults=torchtitan.T30_DEFAULTS,
    ),
    FrameworkName.torchtitan_0_2_2: Framework(
        FrameworkName.torchtitan_0_2_2,
        TensorParallel.torchtitan,
        PipelineRuntime.torch,
        ModelCode.torchtitan,
        layer_code=torchtitan.T22_CODE,
        checkpointing=torchtitan.T22_CHECKPOINTING,
        fsdp_groups=FsdpGroups.torchtitan,
        fsdp_data_parallel=True,
        shards_over_cp=True,
        version="0.2.2",
        defaults=torchtitan.T22_DEFAULTS,
        unsharded_precision="amp-bf16",
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


def sharding_engine(name: ShardingEngine | str) -> ShardingEngine:
    """The sharding engine called ``name`` (any case).

    >>> sharding_engine("DeepSpeed").value
    'deepspeed'
    """
    try:
        return ShardingEngine(str(getattr(name, "value", name)).lower())
    except ValueError:
        raise one_of("--zero-engine", name, [e.value for e in ShardingEngine]) from None


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
    TensorParallel.torchtitan: "torch",
}
"""The ``parallel_impl`` a framework's tensor parallelism reports in JSON (the key's old
values)."""
