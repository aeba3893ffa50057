"""TrainingSetup: everything about the run that changes memory but is not the model."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memcalc.dtypes import DType as DType  # re-exported: the vocabulary of specs
from memcalc.frameworks import (
    Framework,
    FrameworkName,
    ModelCode,
    ShardingEngine,
    default_framework,
    framework,
)
from memcalc.spec.deepspeed import DeepSpeedZero
from memcalc.spec.deepspeed import check_setup as check_deepspeed
from memcalc.spec.finetune import LoraSpec, Quantize
from memcalc.spec.megatron import MEGATRON_DEFAULTS, MegatronOptions
from memcalc.spec.parallel import SINGLE_GPU, Parallelism
from memcalc.validate import FieldError, check, replace, spec_field


class GradDType(str, Enum):
    """Dtypes gradients can have (the --grad-dtype choices)."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class Precision(str, Enum):
    """Precision recipe: dtypes of weights, gradients, master weights and activations."""

    fp32 = "fp32"
    """Everything fp32: 4-byte weights, grads and optimizer states."""
    bf16 = "bf16"
    """Pure bf16, as after ``model.to(torch.bfloat16)``: weights, grads, optimizer states bf16."""
    fp16 = "fp16"
    """Pure fp16 (as bf16, but fp16). Rarely trains stably; shown for completeness."""
    bf16_mixed = "bf16-mixed"
    """bf16 weights and activations, fp32 master weights in the optimizer, grads in
    ``grad_dtype`` (fp32 by default: Megatron's 2 + 4 + 12 = 18 bytes/param with AdamW)."""
    fp16_mixed = "fp16-mixed"
    """As bf16-mixed with fp16 (plus a loss scaler, which holds no per-parameter state)."""
    fp8_mixed = "fp8-mixed"
    """bf16-mixed with fp8 (e4m3) copies of the linear inputs saved for backward
    (Transformer Engine style); weights, grads and master weights as bf16-mixed."""
    amp_bf16 = "amp-bf16"
    """torch.autocast(dtype=bfloat16) over fp32 weights (HF Trainer ``--bf16``, PyTorch AMP):
    fp32 weights, grads and optimizer states (4 + 4 + 8 bytes/param with AdamW, no separate
    master copy); matmuls run in bf16 on bf16 casts of their inputs and of the weights, which
    they save for backward; the residual stream, norms and softmax stay fp32."""
    amp_fp16 = "amp-fp16"
    """As amp-bf16 with float16 (plus a GradScaler, which holds no per-parameter state)."""
    fsdp_bf16 = "fsdp-bf16"
    """FSDP2 ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``
    (torchtitan's default, ``torch/distributed/fsdp/_fully_shard/_fsdp_api.py``): the sharded
    parameters, their gradients and the optimizer states are fp32 (4 + 4 + 8 bytes/param with
    AdamW, no separate master copy); each group is all-gathered in bf16, forward and backward
    run in bf16, the bf16 gradients are cast into an fp32 reduce-scatter buffer. Needs FSDP2
    (``--zero 3``)."""

    @property
    def is_amp(self) -> bool:
        """True under torch.autocast: fp32 weights, 16-bit matmuls."""
        return self in (Precision.amp_bf16, Precision.amp_fp16)

    @property
    def is_fsdp_policy(self) -> bool:
        """True for an FSDP2 MixedPrecisionPolicy: fp32 shards, 16-bit gathered weights."""
        return self is Precision.fsdp_bf16

    @property
    def gathered_dtype(self) -> DType:
        """The dtype FSDP2 all-gathers a group's weights in (``param_dtype``), in which the
        forward and backward see them and write their unsharded gradients."""
        return DType.bf16 if self.is_fsdp_policy else self.weight_dtype

    @property
    def weight_dtype(self) -> DType:
        """The dtype the parameters are stored in (an FSDP2 policy's shards: fp32)."""
        if self is Precision.fp32 or self.is_amp or self.is_fsdp_policy:
            return DType.fp32
        return DType.fp16 if self in (Precision.fp16, Precision.fp16_mixed) else DType.bf16

    @property
    def activation_dtype(self) -> DType:
        """The dtype matmuls compute in (their outputs)."""
        if self is Precision.amp_bf16:
            return DType.bf16
        if self is Precision.amp_fp16:
            return DType.fp16
        return self.gathered_dtype

    @property
    def is_mixed(self) -> bool:
        """True when the optimizer keeps fp32 master weights beside 16-bit model weights."""
        return self.value.endswith("-mixed")


class OptimizerKind(str, Enum):
    """Optimizer, by the state it keeps per parameter."""

    sgd = "sgd"
    """Plain SGD: no state."""
    sgd_momentum = "sgd-momentum"
    """SGD with momentum: one buffer per parameter."""
    adam = "adam"
    """Adam (Kingma & Ba 2015): exp_avg and exp_avg_sq per parameter."""
    adamw = "adamw"
    """AdamW (Loshchilov & Hutter 2019): same state as Adam."""
    adamw_8bit = "adamw-8bit"
    """bitsandbytes AdamW8bit (Dettmers et al. 2022): two 1-byte states + fp32 block absmax."""
    adafactor = "adafactor"
    """Adafactor (Shazeer & Stern 2018), no first moment: factored row + column second moment."""
    lion = "lion"
    """Lion (Chen et al. 2023): one momentum buffer per parameter."""


class Attention(str, Enum):
    """Attention kernel: decides whether the s x s scores are saved for backward."""

    eager = "eager"
    """matmul + softmax + matmul in Python: saves the s x s probabilities (and dropout mask)."""
    sdpa = "sdpa"
    """torch scaled_dot_product_attention (flash / memory-efficient): saves out + logsumexp."""
    flash = "flash"
    """flash-attention 2 kernel: saves out + logsumexp (same as sdpa for memory)."""
    flex = "flex"
    """torch FlexAttention (torchtitan 0.3's default): saves out, logsumexp and the fp32 row
    maxima, and one block mask for every layer."""


class Loss(str, Enum):
    """How the LM loss is computed."""

    standard = "standard"
    """HF: logits upcast to fp32, ``log_softmax`` saves b*s*V fp32."""
    fused = "fused"
    """Fused / chunked linear + cross-entropy (e.g. Liger): saves no b*s*V tensor."""


MAX_TOKENS = 10**9
"""Most tokens one micro-batch may hold (batch x seq): beyond any real run."""

DEFAULT_MOE_IMBALANCE = 1.25
"""Tokens the busiest expert receives, as a multiple of the fair share t*k/E. Fedus et al.
2022 (Switch Transformer, sec. 2.2 and Table 1) train with expert capacity factors of 1.0-1.25
and find 1.25 drops few tokens, i.e. the busiest expert of a batch gets about 1.25x its share.
Only a rank that holds some of the experts can receive more than its share (expert
parallelism); with every expert on one rank, dropless routing computes all t*k rows whatever
their split."""


@dataclass(frozen=True)
class TrainingSetup:
    """Micro-batch, sequence, precision, optimizer and kernels of one training step.

    >>> TrainingSetup(batch=2, seq=1024).tokens
    2048
    """

    batch: int = spec_field(
        "Micro-batch size b (sequences per step).", default=1, ge=1, le=MAX_TOKENS
    )
    seq: int = spec_field(
        "Sequence length s (tokens per sequence).", default=1024, ge=1, le=MAX_TOKENS
    )
    precision: Precision = spec_field("Precision recipe.", default=Precision.bf16_mixed)
    grad_dtype: DType | None = spec_field(
        "Gradient dtype under a -mixed recipe: fp32 (default) or the 16-bit type.", default=None
    )
    optimizer: OptimizerKind = spec_field("Optimizer.", default=OptimizerKind.adamw)
    optimizer_foreach: bool = spec_field(
        "Multi-tensor optimizer step (CUDA default): temporaries the size of all parameters "
        "during step().",
        default=True,
    )
    optimizer_fused: bool = spec_field(
        "Fused Adam/AdamW (one CUDA kernel): updates in place, keeps step on the GPU.",
        default=False,
    )
    attention: Attention = spec_field("Attention kernel.", default=Attention.sdpa)
    loss: Loss = spec_field("Loss implementation.", default=Loss.standard)
    dropout: float | None = spec_field(
        "Override every dropout rate of the model.", default=None, ge=0.0, lt=1.0
    )
    parallel: Parallelism = spec_field(
        "How the step is split over GPUs (dp, tp, pp, cp, ep, ZeRO, micro-batches).",
        default=SINGLE_GPU,
    )
    lora: LoraSpec | None = spec_field(
        "LoRA adapters on a frozen base (None: full fine-tuning).", default=None
    )
    quantize: Quantize = spec_field(
        "Storage of the frozen base's linear weights (QLoRA: nf4).", default=Quantize.none
    )
    kbit_prep: bool | None = spec_field(
        "PEFT prepare_model_for_kbit_training: non-4-bit parameters upcast to fp32 and the "
        "embedding output requiring grad (default: on with --quantize).",
        default=None,
    )
    input_grads: bool | None = spec_field(
        "The embedding output requires grad (enable_input_require_grads), so the first layer "
        "saves for backward from its first op (default: with kbit_prep).",
        default=None,
    )

    framework: FrameworkName | None = spec_field(
        "Whose code runs the step (memcalc.frameworks): hf, megatron, reference, torchtitan "
        "or torchtitan-0.2.2; None: megatron for a tensor- or pipeline-parallel layout, hf "
        "otherwise.",
        default=None,
    )
    zero_engine: ShardingEngine | None = spec_field(
        "What implements data parallelism and ZeRO (memcalc.frameworks.ShardingEngine): torch "
        "(DDP / FSDP2) or deepspeed (DeepSpeed's ZeRO engine); None: the framework's own.",
        default=None,
    )
    deepspeed: DeepSpeedZero | None = spec_field(
        "DeepSpeed ZeRO settings (bucket sizes, overlap_comm, ZeRO-3 thresholds, ...) under "
        "zero_engine deepspeed; None: DeepSpeed's defaults.",
        default=None,
    )
    megatron: MegatronOptions | None = spec_field(
        "Megatron-LM arguments that change memory (memcalc.spec.megatron); None: Megatron's "
        "defaults. Only --framework megatron reads them.",
        default=None,
    )
    moe_imbalance: float = spec_field(
        "MoE load imbalance: tokens the busiest expert receives as a multiple of its fair "
        "share t*k/E; scales the dispatch buffers and expert activations of a rank that holds "
        "a subset of the experts (dropless routing).",
        default=DEFAULT_MOE_IMBALANCE,
        ge=1.0,
        le=1024,
    )
    capacity_factor: float | None = spec_field(
        "MoE expert capacity as a multiple of the fair share t*k/E (token-dropping routing, "
        "Megatron-core get_capacity: every expert's buffer has ceil(t*k/E * factor) rows); "
        "None: the model's own routing (dropless, as HF).",
        default=None,
        gt=0,
        le=1024,
    )

    def __post_init__(self) -> None:
        check(self)

    def _check(self) -> None:
        if self.seq % self.parallel.cp:
            raise FieldError(
                "seq",
                f"context parallelism splits the sequence: cp ({self.parallel.cp}) "
                f"must divide seq ({self.seq})",
            )
        if self.parallel.cp > 1 and self.attention is Attention.eager:
            raise FieldError(
                "attention", "context parallelism runs a fused kernel (ring attention): use sdpa"
            )
        if self.quantize is not Quantize.none and self.lora is None:
            raise FieldError(
                "quantize", "a quantized base is frozen: train adapters with --lora-rank"
            )
        if self.batch * self.seq > MAX_TOKENS:
            raise FieldError(
                "seq", f"batch x seq = {self.batch * self.seq:,} tokens is over {MAX_TOKENS:,}"
            )
        self._check_framework()
        if self.grad_dtype is not None:
            allowed = {DType.fp32, self.precision.weight_dtype}
            if self.grad_dtype not in allowed:
                names = ", ".join(sorted(d.value for d in allowed))
                raise FieldError(
                    "grad_dtype", f"must be one of: {names} for {self.precision.value}"
                )

    def _check_framework(self) -> None:
        """What the framework (and FSDP2's MixedPrecisionPolicy) can run."""
        fw, par = self.framework_def, self.parallel
        if self.megatron is not None and fw.model_code is not ModelCode.megatron_core:
            raise FieldError(
                "megatron",
                f"Megatron-LM arguments need framework megatron, not {fw.label}",
            )
        if fw.fsdp_data_parallel and par.zero not in (0, 3):
            raise FieldError(
                "zero",
                f"{fw.label}'s data parallelism is FSDP2 (ZeRO-3 over dp x cp); use 0 or 3, "
                f"got {par.zero}",
            )
        if self.precision.is_fsdp_policy:
            shards = par.shard_ranks * (par.cp if fw.shards_over_cp else 1)
            fsdp = fw.always_fsdp or (shards > 1 and (par.zero == 3 or fw.fsdp_data_parallel))
            if not fsdp:
                raise FieldError(
                    "precision",
                    f"{self.precision.value} is FSDP2's MixedPrecisionPolicy: it needs FSDP2 "
                    "over more than one rank (--dp 2 or more with --zero 3), or "
                    "--framework torchtitan (which applies FSDP2 on one GPU too); on one GPU "
                    "use amp-bf16 (torch.autocast over fp32 weights)",
                )
        if self.sharding_engine is ShardingEngine.deepspeed:
            if fw.model_code is ModelCode.megatron_core:
                raise FieldError(
                    "zero_engine",
                    "deepspeed runs HF models here; Megatron-core shards with its own "
                    "distributed optimizer (--zero 1 under --framework megatron)",
                )
            par = self.parallel
            check_deepspeed(
                self.precision.value,
                self.optimizer.value,
                par.zero,
                {"tp": par.tp, "pp": par.pp, "cp": par.cp, "ep": par.ep},
                self.lora is not None,
            )
        elif self.deepspeed is not None:
            raise FieldError("deepspeed", "DeepSpeed settings need --zero-engine deepspeed")

    def with_kbit_input_grads(self, checkpointing: bool) -> TrainingSetup:
        """This setup with input grads as PEFT's k-bit preparation leaves them when the user
        did not say: ``peft/utils/other.py`` ``prepare_model_for_kbit_training`` calls
        ``model.enable_input_require_grads()`` only ``if ... and use_gradient_checkpointing``
        (which also turns gradient checkpointing on), so a step without recompute runs with a
        first layer whose input needs no grad.

        >>> s = TrainingSetup(lora=LoraSpec(rank=8), quantize="nf4")
        >>> s.with_kbit_input_grads(False).embedding_output_requires_grad
        False
        >>> s.with_kbit_input_grads(True).embedding_output_requires_grad
        True
        """
        if self.lora is None or self.input_grads is not None or not self.prepared_for_kbit:
            return self
        return self.replace(input_grads=checkpointing)

    def replace(self, **changes: object) -> TrainingSetup:
        """A copy with ``changes``, validated."""
        return replace(self, **changes)

    @property
    def megatron_options(self) -> MegatronOptions:
        """Megatron's arguments as set (``megatron``), or Megatron's defaults."""
        return self.megatron if self.megatron is not None else MEGATRON_DEFAULTS

    @property
    def framework_def(self) -> Framework:
        """The framework that runs the step (``framework``, or the layout's default)."""
        if self.framework is not None:
            return framework(self.framework)
        return default_framework(self.parallel.tp, self.parallel.pp)

    @property
    def sharding_engine(self) -> ShardingEngine:
        """What implements data parallelism and ZeRO (``zero_engine``, or the framework's)."""
        if self.zero_engine is not None:
            return self.zero_engine
        return self.framework_def.sharding

    @property
    def keeps_fp32_modules(self) -> bool:
        """Parameters a model keeps in fp32 when loaded in 16 bits (``from_pretrained``'s
        ``_keep_in_fp32_modules_strict``) stay fp32 in training: not under an engine that
        casts every parameter (DeepSpeed), nor under FSDP2, which refuses a group of mixed
        dtypes (torch ``_fsdp_param_group.py`` ``_init_mp_dtypes``: "FSDP expects uniform
        original parameter dtype"), so a user casts the model first."""
        fsdp = self.parallel.zero == 3 or self.framework_def.always_fsdp
        return not (self.sharding_engine.casts_every_parameter or fsdp)

    @property
    def deepspeed_config(self) -> DeepSpeedZero:
        """The DeepSpeed ZeRO settings in effect (DeepSpeed's defaults unless given)."""
        return self.deepspeed if self.deepspeed is not None else DeepSpeedZero()

    @property
    def prepared_for_kbit(self) -> bool:
        """PEFT's prepare_model_for_kbit_training is applied (on by default when quantized)."""
        if self.kbit_prep is None:
            return self.quantize is not Quantize.none
        return self.kbit_prep

    @property
    def embedding_output_requires_grad(self) -> bool:
        """The first layer's input requires grad: always in full fine-tuning; with a frozen
        embedding only after enable_input_require_grads (kbit prep, or asked for)."""
        if self.lora is None or self.lora.train_embeddings:
            return True
        if self.input_grads is None:
            return self.prepared_for_kbit
        return self.input_grads

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on one rank (its share of the sequence under cp)."""
        return self.batch * self.seq // self.parallel.cp

    @property
    def weight_dtype(self) -> DType:
        return self.precision.weight_dtype

    @property
    def activation_dtype(self) -> DType:
        return self.precision.activation_dtype

    @property
    def gradient_dtype(self) -> DType:
        """Gradients: the weight dtype, except fp32 main grads by default under -mixed (not
        under an engine that accumulates in the model dtype: DeepSpeed's)."""
        if self.grad_dtype is not None:
            return self.grad_dtype
        if self.precision is Precision.fp16_mixed and self.framework_def.accumulates_in_param_dtype:
            # Megatron-LM forces accumulate_allreduce_grads_in_fp32 for bf16 only
            # (megatron/training/arguments.py validate_args): fp16 gradient buffers
            return DType.fp16
        if self.precision.is_mixed and not self.sharding_engine.grads_in_model_dtype:
            return DType.fp32
        return self.weight_dtype

    @property
    def optimizer_dtype(self) -> DType:
        """Dtype of optimizer states and master weights: fp32 under -mixed, else weights'."""
        return DType.fp32 if self.precision.is_mixed else self.weight_dtype
