"""Whether a training setup makes sense for a model and a GPU: what no real run could do is an
error, what a run would do differently from what the user probably meant is a warning (one
line each), and what the GPU cannot do by default is replaced by what it can, said so."""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.errors import MemcalcError
from memcalc.profiles import GpuProfile
from memcalc.spec.model import ModelSpec, Positions
from memcalc.spec.training import DEFAULT_MOE_IMBALANCE, Attention, Precision, TrainingSetup


@dataclass(frozen=True)
class Fallback:
    """A default replaced because the model or the GPU does not support it."""

    field: str
    value: str
    why: str

    @property
    def message(self) -> str:
        return f"{self.field}: using {self.value} ({self.why})"


def check(spec: ModelSpec, setup: TrainingSetup, model: str | None = None) -> list[str]:
    """Errors (raised) and warnings (returned, one line each) for ``setup`` on ``spec``;
    ``model`` is the model as the user named it (``--model``: a file's path, not the name
    read from it), ``spec.name`` when not given."""
    model = model or spec.name
    if spec.positions is Positions.learned and setup.seq > spec.max_position_embeddings:
        raise MemcalcError(
            f"--seq: {setup.seq} is over {model}'s {spec.max_position_embeddings} learned "
            "positions (max_position_embeddings): its position table has no row for them"
        )
    experts = spec.moe.num_experts if spec.moe is not None else 0
    if setup.parallel.ep > 1 and (not experts or experts % setup.parallel.ep):
        raise MemcalcError(
            f"--ep: {setup.parallel.ep} must divide {model}'s {experts} routed experts"
            if experts
            else f"--ep: {model} has no experts to split (expert parallelism is for MoE)"
        )
    warnings = []
    if spec.positions is Positions.rotary and setup.seq > spec.max_position_embeddings:
        warnings.append(
            f"--seq: {setup.seq} is over {model}'s max_position_embeddings "
            f"({spec.max_position_embeddings}); rotary models run it, but were not trained on it"
        )
    par = setup.parallel
    # a framework whose data parallelism is FSDP2 shards over dp x cp whatever --zero says
    fsdp_dp = setup.framework_def.fsdp_data_parallel
    if par.dp > 1 and par.zero == 0 and not fsdp_dp:
        warnings.append(
            f"--dp {par.dp} without --zero: plain DDP, every GPU keeps all parameters, "
            "gradients and optimizer states; --zero 1, 2 or 3 shards them"
        )
    if par.dp == 1 and par.zero > 0 and not fsdp_dp:
        warnings.append(
            f"--zero {par.zero} on one data-parallel GPU shards nothing; add --dp N (--gpus N)"
        )
    if spec.moe is None:
        routing = [
            flag
            for flag, given in (
                ("--moe-imbalance", setup.moe_imbalance != DEFAULT_MOE_IMBALANCE),
                ("--capacity-factor", setup.capacity_factor is not None),
            )
            if given
        ]
        warnings += [f"{flag} has no effect: {model} has no experts" for flag in routing]
    return warnings


def fallbacks(
    spec: ModelSpec,
    profile: GpuProfile,
    *,
    precision: Precision | None,
    attention: Attention | None,
) -> list[Fallback]:
    """Replacements for the defaults (``None``: the user left it at the default) that the GPU
    or the model's HF implementation cannot run: bf16 recipes on a GPU without bf16 tensor
    cores (T4, V100) become their fp16 twin; SDPA on a family HF runs without it (Gemma 2)
    becomes eager."""
    from memcalc.spec.families import family_of

    out = []
    if precision is None and not profile.bf16_flops_per_s:
        out.append(
            Fallback(
                "--precision",
                Precision.fp16_mixed.value,
                f"{profile.display_name} has no bf16 tensor cores; pass --precision to choose",
            )
        )
    refused = family_of(spec).impl.sdpa_refused
    if attention is None and refused:
        out.append(
            Fallback(
                "--attention",
                Attention.eager.value,
                f"HF {spec.family.value} has no SDPA path: {refused}; --attention flash for "
                "flash-attention 2",
            )
        )
    return out


def framework_fallback(spec: ModelSpec, setup: TrainingSetup) -> Fallback | None:
    """The framework a setup that names none runs when the default for its layout (Megatron-LM
    with tp / pp) cannot build the model or setup: HF (``None`` when the default stands or is
    HF already)."""
    from memcalc.frameworks import ModelCode
    from memcalc.spec.megatron_setup import megatron_gap

    if setup.framework is not None or setup.framework_def.model_code is not ModelCode.megatron_core:
        return None
    megatron = setup.replace(framework="megatron")
    gap = megatron_gap(spec, megatron)
    if gap is None:
        return None
    return Fallback("--framework", "hf", f"Megatron-core's GPT model has no {gap}")
