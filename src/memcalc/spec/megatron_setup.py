"""What a TrainingSetup asks of Megatron-core beyond ``MegatronOptions``: whether its model
code builds a spec at all (``megatron_gap``), and the attention backend TE runs for it on a GPU
(``requested_backend``, ``for_gpu``)."""

from __future__ import annotations

from memcalc.frameworks import ModelCode
from memcalc.spec.megatron import AttentionBackend, resolve_backend
from memcalc.spec.model import Activation, Mlp, ModelSpec, Norm, NormPlacement, QkNorm
from memcalc.spec.training import TrainingSetup


def megatron_gap(spec: ModelSpec, setup: TrainingSetup | None = None) -> str | None:
    """What of ``spec`` (and ``setup``) Megatron-core's GPT model does not build or memcalc
    does not model for it; None when it builds all of it."""
    gaps = [
        (spec.norm not in (Norm.layer_norm, Norm.rms_norm), f"{spec.norm.value} norms"),
        (spec.norm_placement is not NormPlacement.pre, f"{spec.norm_placement.value}-norm blocks"),
        (spec.parallel_residual, "parallel residual blocks"),
        (spec.qk_norm is QkNorm.whole, "a q/k norm over all heads at once"),
        (spec.attention_softcap is not None or spec.final_softcap is not None, "soft-capping"),
        (spec.embedding_scale, "a scaled embedding"),
        (spec.position_offset != 0, "a position table offset"),
        (spec.mla is not None, "multi-head latent attention (not modelled yet)"),
        (spec.mlp is Mlp.gated and spec.activation is not Activation.silu, "gated non-SiLU MLPs"),
        (spec.mlp is Mlp.plain and spec.activation is Activation.silu, "ungated SiLU MLPs"),
    ]
    if setup is not None:
        gaps += [
            (setup.lora is not None, "LoRA adapters"),
            (setup.precision.is_amp, "torch.autocast (Megatron runs --bf16 / --fp16 mixed)"),
            (setup.parallel.cp > 1, "context parallelism (TE's ring attention is not modelled)"),
            (
                setup.parallel.zero >= 2 and setup.parallel.dp > 1,
                "ZeRO-2/3 (its distributed optimizer is ZeRO-1, --zero 1; Megatron-FSDP is "
                "not modelled)",
            ),
            (setup.quantize.value != "none", "quantized base weights"),
            (
                setup.optimizer.value in ("adamw-8bit", "adafactor"),
                f"{setup.optimizer.value} optimizer (Megatron runs adam, sgd)",
            ),
        ]
    return next((why for bad, why in gaps if bad), None)


ATTENTION_BACKENDS = {"eager": AttentionBackend.unfused, "flash": AttentionBackend.flash}
"""What memcalc's ``--attention`` asks of Megatron when ``--attention-backend`` is auto: eager
is TE's unfused attention, flash its FlashAttention (sdpa: TE chooses)."""


def requested_backend(setup: TrainingSetup) -> AttentionBackend:
    """``--attention-backend``, or when auto what ``--attention`` names (ATTENTION_BACKENDS)."""
    backend = setup.megatron_options.attention_backend
    if backend is AttentionBackend.auto:
        return ATTENTION_BACKENDS.get(setup.attention.value, backend)
    return backend


def for_gpu(setup: TrainingSetup, compute_capability: float) -> TrainingSetup:
    """``setup`` with its attention backend resolved for a GPU of ``compute_capability``
    (``requested_backend``, then ``resolve_backend``); unchanged for other model code."""
    if setup.framework_def.model_code is not ModelCode.megatron_core:
        return setup
    opts = setup.megatron_options
    chosen = opts.replace(attention_backend=requested_backend(setup))
    backend = resolve_backend(chosen, compute_capability)
    if backend is opts.attention_backend:
        return setup
    # the framework pinned: the single-GPU copies an estimate makes keep the same model code
    return setup.replace(
        framework=setup.framework_def.name, megatron=opts.replace(attention_backend=backend)
    )
