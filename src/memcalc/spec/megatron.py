"""Megatron-LM's arguments that change memory, as one validated value (``TrainingSetup.megatron``).

Each field is named as Megatron-LM's argument (``megatron/training/arguments.py``) or its
``TransformerConfig`` / ``DistributedDataParallelConfig`` field and defaults to Megatron's own
default. Read only by ``--framework megatron`` (its model code, ``graph/blocks/megatron/``, and
its mechanisms, ``strategies/residency/``); the model's shape (layers, widths, norm, dropout)
is the ModelSpec's, and the layout (tp, pp, vpp, cp, ep, the distributed optimizer as
``zero = 1``) is ``Parallelism``'s. ``memcalc.spec.megatron_args`` maps a Megatron argument
list (a functional test's ``model_config.yaml``) onto all three.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memcalc.validate import FieldError, check, replace, spec_field


class TransformerImpl(str, Enum):
    """``--transformer-impl``: whose layers build the GPT model."""

    transformer_engine = "transformer_engine"
    """``get_gpt_layer_with_transformer_engine_spec``: TE fused norm + linear modules."""
    local = "local"
    """``get_gpt_layer_local_spec``: Megatron-core's own linears, norms and attention."""


class AttentionBackend(str, Enum):
    """``--attention-backend`` (``megatron/core/transformer/enums.py`` ``AttnBackend``)."""

    auto = "auto"
    """TE chooses (``attention/dot_product_attention/utils.py`` ``get_attention_backend``):
    FusedAttention (cuDNN) on compute capability 9.0 and up, FlashAttention below."""
    fused = "fused"
    """TE FusedAttention (cuDNN): saves q, k, v, out and the fp32 softmax statistics."""
    flash = "flash"
    """TE FlashAttention (flash-attn 2): bshd copies of q, k, v, its out, the fp32 logsumexp,
    and the sbhd copy of out the output projection saves."""
    unfused = "unfused"
    """TE UnfusedDotProductAttention: the b x a x s x s softmax output, dropout mask and
    dropped probabilities (5 bytes a score with dropout, 2 without)."""
    local = "local"
    """Megatron-core's own ``DotProductAttention`` (the local spec's): unfused as above."""


class CrossEntropyFusion(str, Enum):
    """``--cross-entropy-loss-fusion`` with ``--cross-entropy-fusion-impl``."""

    none = "none"
    """``tensor_parallel.vocab_parallel_cross_entropy``: one fp32 copy of the logits, softmax
    and gradient computed in it in place."""
    native = "native"
    """``fusions/fused_cross_entropy.py`` under torch.compile: the in-place ops are
    functionalised, one more fp32 b*s*V/t tensor at the forward peak."""
    te = "te"
    """TE ``cross_entropy.py`` ``CrossEntropyFunction`` (triton): an fp32 gradient saved,
    no fp32 copy of the logits."""


class TokenDispatcher(str, Enum):
    """``--moe-token-dispatcher-type`` (``moe/token_dispatcher.py``)."""

    allgather = "allgather"
    """``MoEAllGatherTokenDispatcher``: hidden states, probs and routing map gathered over the
    tp x ep ranks, permuted locally."""
    alltoall = "alltoall"
    """``MoEAlltoAllTokenDispatcher``: tokens permuted locally, exchanged by all-to-all over
    ep, gathered over the expert tensor-parallel ranks."""


RECOMPUTE_MODULES = (
    "core_attn",
    "mlp",
    "moe",
    "moe_act",
    "layernorm",
    "shared_experts",
    "mla_up_proj",
)
"""What ``--recompute-modules`` may name (``transformer_config.py`` ``recompute_modules``)."""

OUTPUT_DISCARDING_MODULES = frozenset({"moe_act", "layernorm", "mla_up_proj"})
"""Modules Megatron recomputes with ``CheckpointWithoutOutput``
(``tensor_parallel/random.py``): their forward runs without a graph and their output is
freed once its consumer has saved it; backward rebuilds both."""


@dataclass(frozen=True)
class MegatronOptions:
    """Megatron-LM arguments that change memory (defaults: Megatron's)."""

    transformer_impl: TransformerImpl = spec_field(
        "--transformer-impl: transformer_engine or local.",
        default=TransformerImpl.transformer_engine,
    )
    attention_backend: AttentionBackend = spec_field(
        "--attention-backend: auto (TE picks by GPU), fused, flash, unfused or local.",
        default=AttentionBackend.auto,
    )
    fused_adam: bool = spec_field(
        "TE's (or apex's) FusedAdam is installed; without both Megatron falls back to "
        "torch.optim.AdamW (megatron/core/optimizer/__init__.py): foreach temporaries and "
        "per-parameter step tensors.",
        default=True,
    )
    fused_softmax: bool = spec_field(
        "The local spec's FusedScaleMaskSoftmax finds apex's scaled_*_softmax_cuda kernels; "
        "False: its torch fallback (fusions/fused_softmax.py forward_torch_softmax).",
        default=True,
    )
    attention_softmax_in_fp32: bool = spec_field(
        "--attention-softmax-in-fp32: the softmax fallback runs (and saves) fp32.",
        default=False,
    )
    deterministic: bool = spec_field(
        "NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 (--deterministic-mode): TE keeps only deterministic "
        "attention backends (no FusedAttention below compute capability 9.0).",
        default=False,
    )
    cross_entropy_fusion: CrossEntropyFusion = spec_field(
        "--cross-entropy-loss-fusion and --cross-entropy-fusion-impl: none, native or te.",
        default=CrossEntropyFusion.none,
    )
    bias_activation_fusion: bool = spec_field(
        "--bias-gelu-fusion / --bias-swiglu-fusion (Megatron's fused activations).",
        default=True,
    )
    apply_rope_fusion: bool = spec_field(
        "--rope-fusion: TE FusedRoPEFunc (saves only the frequencies).", default=True
    )
    recompute_modules: tuple[str, ...] = spec_field(
        "--recompute-modules: what --recompute selective replays (core_attn, mlp, moe, moe_act, "
        "layernorm, shared_experts, mla_up_proj).",
        default=("core_attn",),
    )
    overlap_grad_reduce: bool = spec_field(
        "--overlap-grad-reduce: the DDP buffer is split into buckets (bucket ends padded).",
        default=False,
    )
    ddp_bucket_size: int | None = spec_field(
        "--ddp-bucket-size in elements (default max(40M, 1M x dp) with overlap).",
        default=None,
        ge=1,
        le=10**12,
    )
    distributed_optimizer_instances: int = spec_field(
        "--num-distributed-optimizer-instances: the optimizer states are sharded over dp / this.",
        default=1,
        ge=1,
        le=10**6,
    )
    make_vocab_size_divisible_by: int = spec_field(
        "--make-vocab-size-divisible-by: the vocabulary is padded to a multiple of this x tp.",
        default=128,
        ge=1,
        le=10**6,
    )
    cublas_workspace_config: str | None = spec_field(
        "CUBLAS_WORKSPACE_CONFIG (e.g. :4096:8, as Megatron's CI sets): PyTorch's cuBLAS "
        "workspace per handle and stream; None: PyTorch's default for the GPU.",
        default=None,
    )
    microbatch_group_size_per_vp_stage: int | None = spec_field(
        "--microbatch-group-size-per-virtual-pipeline-stage (default: pp).",
        default=None,
        ge=1,
        le=10**6,
    )
    first_stage_layers: int | None = spec_field(
        "--decoder-first-pipeline-num-layers.", default=None, ge=0, le=10**6
    )
    last_stage_layers: int | None = spec_field(
        "--decoder-last-pipeline-num-layers.", default=None, ge=0, le=10**6
    )
    account_for_embedding_in_pipeline_split: bool = spec_field(
        "--account-for-embedding-in-pipeline-split: the embedding counts as a layer.",
        default=False,
    )
    account_for_loss_in_pipeline_split: bool = spec_field(
        "--account-for-loss-in-pipeline-split: the loss counts as a layer.", default=False
    )
    moe_token_dispatcher: TokenDispatcher = spec_field(
        "--moe-token-dispatcher-type: allgather or alltoall.", default=TokenDispatcher.allgather
    )
    moe_grouped_gemm: bool = spec_field(
        "--moe-grouped-gemm: TE GroupedLinear experts (else a SequentialMLP of TE linears).",
        default=False,
    )

    def __post_init__(self) -> None:
        check(self)

    def _check(self) -> None:
        bad = [m for m in self.recompute_modules if m not in RECOMPUTE_MODULES]
        if bad:
            raise FieldError(
                "recompute_modules",
                f"unknown module {bad[0]!r}; choose from: {', '.join(RECOMPUTE_MODULES)}",
            )
        config = self.cublas_workspace_config
        if config is not None and cublas_workspace_bytes(config) is None:
            raise FieldError(
                "cublas_workspace_config",
                f"expected :SIZE:COUNT pairs (e.g. :4096:8), got {config!r}",
            )

    def replace(self, **changes: object) -> MegatronOptions:
        return replace(self, **changes)


def cublas_workspace_bytes(config: str) -> int | None:
    """Bytes of one PyTorch cuBLAS workspace under ``CUBLAS_WORKSPACE_CONFIG``: the sum of
    SIZE KiB x COUNT over its ``:SIZE:COUNT`` pairs (``aten/src/ATen/cuda/CublasHandlePool.cpp``
    ``parseChosenWorkspaceSize``); None when nothing parses.

    >>> cublas_workspace_bytes(":4096:8") == 32 * 2**20
    True
    """
    import re

    pairs = re.findall(r":([0-9]+):([0-9]+)", config)
    if not pairs:
        return None
    return sum(int(size) * 1024 * int(count) for size, count in pairs)


MEGATRON_DEFAULTS = MegatronOptions()
"""Megatron's defaults (a setup that names no Megatron argument)."""


def resolve_backend(opts: MegatronOptions, compute_capability: float) -> AttentionBackend:
    """The attention backend TE runs for ``--attention-backend`` on a GPU of
    ``compute_capability``. ``auto`` follows ``get_attention_backend``
    (``transformer_engine/pytorch/attention/dot_product_attention/utils.py``): neither
    FlashAttention 2 nor FusedAttention below sm80 (unfused); with both available,
    "Disabling FlashAttention to give FusedAttention preference on Hopper+" (fused on 9.0 and
    up) and FlashAttention below; with ``deterministic`` the F16 FusedAttention is off below
    9.0 anyway. FlashAttention is taken as installed (NVIDIA's PyTorch containers ship it).

    >>> resolve_backend(MegatronOptions(), 9.0).value, resolve_backend(MegatronOptions(), 8.0).value
    ('fused', 'flash')
    """
    if opts.attention_backend is not AttentionBackend.auto:
        return opts.attention_backend
    if compute_capability < 8:
        return AttentionBackend.unfused
    return AttentionBackend.fused if compute_capability >= 9 else AttentionBackend.flash
