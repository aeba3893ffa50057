"""The features a framework is made of, as data the lowering and the residency rules read:
how its model code writes the ops (``LayerCode``), what its activation-checkpointing modes do
(``Checkpointing``), and how its FSDP2 wrapping groups the parameters (``FsdpGroups``).

Nothing here imports the specs: the lowering turns a ``LayerCode`` into overrides of the
family's ``Implementation`` (``spec/families/base.py``), keyed by the family's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class NormKernel(str, Enum):
    """Which code runs an RMSNorm."""

    family = "family"
    """The family's own module as HF writes it (``LlamaRMSNorm``: fp32 copy, rstd, the
    normalised tensor cast back to the input dtype)."""
    torch_rms_norm = "torch_rms_norm"
    """``torch.nn.RMSNorm`` (``aten.rms_norm``, ``aten/src/ATen/native/layer_norm.cpp``
    ``rms_norm_symint``): on CUDA the fused kernel ``_fused_rms_norm`` when the weight's dtype is
    the input's, whose backward node saves the input, the weight and the fp32 rstd
    (``FusedRmsNormBackward0`` in torch's generated ``autograd/generated/Functions.h``); the CPU
    wheel has only its composite (``rms_norm_composite``: ``x.float()``, rstd, ``x * rstd``,
    times the weight in fp32, ``type_as``), which saves the fp32 input copy, rstd and the fp32
    normalised tensor."""


class SdpaGqa(str, Enum):
    """How grouped-query attention reaches the SDPA kernel."""

    hf = "hf"
    """HF's ``use_gqa_in_sdpa``: ``enable_gqa`` without a mask and for head dims up to 256,
    else ``repeat_kv`` copies k and v to every head."""
    enable_gqa = "enable_gqa"
    """Always ``enable_gqa=True``: the kernel reads (and saves) k and v at their kv heads."""
    repeat_kv = "repeat_kv"
    """Always ``repeat_kv`` before the kernel: k and v are saved at every query head."""


class RotaryCache(str, Enum):
    """Where a model keeps its rotary table as a buffer (bytes for the whole step)."""

    none = "none"
    per_layer = "per-layer"
    shared = "shared"


@dataclass(frozen=True)
class LayerCode:
    """How a framework's model code writes one block and the loss, as overrides of the HF
    ``Implementation`` fields (name, value); ``families`` are the family names it has a model
    for (None: every family, HF's own code)."""

    families: tuple[str, ...] | None = None
    overrides: tuple[tuple[str, object], ...] = ()
    """For every family it runs."""
    per_family: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()
    """Further overrides for one family (its name)."""
    source: str = ""
    """Where the framework's model code is (for the report and the errors)."""

    def overrides_for(self, family: str) -> dict[str, object]:
        out = dict(self.overrides)
        for name, extra in self.per_family:
            if name == family:
                out.update(extra)
        return out


HF_CODE = LayerCode()
"""The family's own HF modeling code, unchanged."""


class SelectiveRule(str, Enum):
    """What ``--recompute selective`` means in a framework."""

    core_attention = "core-attention"
    """Korthikanti et al. 2022, sec. 5: a checkpoint around the attention core only."""
    op_sac = "op-sac"
    """Op-level selective checkpointing (``torch.utils.checkpoint`` with a
    ``create_selective_checkpoint_contexts`` policy around every block): the outputs of the ops
    in a save list are kept, every other matmul is recomputed, everything else is rebuilt in
    backward."""


class EveryKRule(str, Enum):
    """What ``--recompute every-k --every K`` means in a framework."""

    segments = "segments"
    """Chen et al. 2016: segments of K blocks, each checkpointed at its first input."""
    layer_sac = "layer-sac"
    """Layer-level selective checkpointing: every K-th block (1-based: blocks K, 2K, ...) is
    wrapped in a full checkpoint, the others keep everything."""
    refused = "refused"
    """The framework has no such mode."""


@dataclass(frozen=True)
class Checkpointing:
    """A framework's activation-checkpointing modes."""

    selective: SelectiveRule = SelectiveRule.core_attention
    save_kernels: frozenset[str] = frozenset()
    """Op-level SAC: the op kinds (``Op.kernel``) whose outputs are always saved."""
    alternate_mm: bool = False
    """Op-level SAC: matmuls (``Op.kernel == "mm"``) are saved one in two, counted per block
    from 1: odd ones saved, even ones recomputed."""
    every_k: EveryKRule = EveryKRule.segments
    budget: bool = True
    """memcalc's per-block knapsack (``--recompute budget``) is a mode of this framework."""
    source: str = ""
    refusal: str = ""
    """Why ``every-k`` or ``budget`` is refused (the framework's own words)."""


MEMCALC_CHECKPOINTING = Checkpointing()
"""torch.utils.checkpoint as memcalc applies it (HF's gradient checkpointing per block, the
attention core for selective, segments for every-k, the knapsack for budget)."""


class FsdpGroups(str, Enum):
    """How ``fully_shard`` groups the parameters."""

    root = "root"
    """``fully_shard`` on every block, then on the model: the embedding, final norm and head
    are the root's group, gathered from its forward to the end of backward."""
    torchtitan = "torchtitan"
    """torchtitan's ``apply_fsdp`` / ``apply_fsdp_to_decoder``: every block; the token
    embedding alone (with the norm and head when tied); ``[norm, lm_head]`` together, not
    resharded after forward (``reshard_after_forward`` only under the "always" policy); then
    the root, which holds nothing else."""


class Kernel(str, Enum):
    """The aten kernels a save-list policy tells apart (``Op.kernel``)."""

    mm = "mm"
    """``aten.mm`` / ``aten.linear`` (every ``nn.Linear``)."""
    sdpa = "sdpa"
    """A CUDA SDPA kernel: ``_scaled_dot_product_flash_attention`` / ``_efficient_attention``
    / ``_cudnn_attention``."""
    sdpa_cpu = "sdpa_cpu"
    """``_scaled_dot_product_flash_attention_for_cpu``: in no torchtitan save list."""
    flex = "flex"
    """The ``flex_attention`` higher-order op."""
    reduce_scatter = "reduce_scatter"
    """``_c10d_functional.reduce_scatter_tensor`` (sequence-parallel row-parallel outputs)."""
    scaled_mm = "scaled_mm"
    """``aten._scaled_mm`` (a float8 matmul)."""
    amax = "amax"
    """``aten.max`` (float8 scale: the absolute maximum)."""
