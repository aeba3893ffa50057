"""Which modules and parameters PEFT 0.21.2's LoRA adapts in a family, as
``BaseTuner.inject_adapter`` resolves ``target_modules`` under transformers 5.x -- and what it
refuses, with its reason.

Sources (peft 0.21.2):

- ``tuners/tuners_utils.py`` ``BaseTuner.inject_adapter``: under transformers >= 5 it first
  calls ``convert_peft_config_for_transformers`` (``utils/transformers_weight_conversion.py``),
  then ``LoraModel._prepare_adapter_config`` (``tuners/lora/model.py``) fills in the default
  targets (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``, ``utils/constants.py``).
- ``_convert_peft_config_moe``: for a model type transformers converts to the ``mixtral`` or
  ``qwen2_moe`` layout (``transformers/conversion_mapping.py`` ``_MODEL_TO_CONVERSION_PATTERN``,
  with PEFT's own ``_MODEL_TO_CONVERSION_PATTERN["mixtral"] = "mixtral"``; ``qwen2_moe``
  itself is no key there, so Qwen2-MoE is not converted), every target naming a v4 expert
  projection or the router (``_MOE_TARGET_MODULE_MAPPING``) becomes a ``target_parameters``
  entry -- the fused 3-D expert parameters and the router's ``gate.weight``, adapted by
  ``lora.ParamWrapper`` -- and leaves ``target_modules``. ``"all-linear"`` is first resolved
  to the leaf names of every ``nn.Linear`` plus those v4 names
  (``_resolve_string_target_modules``), so in DeepSeek the dense MLPs' and the shared
  experts' ``gate_proj`` / ``up_proj`` / ``down_proj`` -- the same leaf names -- leave the
  targets too. A fused pair (``gate_up_proj``) targeted whole gets rank 2r
  (``rank_pattern``); half of it is refused. With no targets given the converted config's
  ``target_modules`` is an empty set, not None, so no default applies and injection finds
  nothing: refused.
- ``ParamWrapper.__init__`` / ``update_layer`` (``tuners/lora/layer.py``): refuses
  ``lora_dropout != 0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memcalc.errors import MemcalcError


@dataclass(frozen=True)
class PeftMoeConversion:
    """PEFT's v4 -> v5 target conversion for one MoE layout (``_MOE_TARGET_MODULE_MAPPING``,
    ``_MOE_FUSED_TARGETS``)."""

    layout: str
    """The conversion pattern (``mixtral`` or ``qwen2_moe``)."""
    renamed: Mapping[str, str]
    """v4 module leaf name -> the v5 parameter it lives in."""
    fused: Mapping[str, tuple[str, ...]]
    """v5 parameter -> the v4 names fused into it."""


MIXTRAL_LAYOUT = PeftMoeConversion(
    layout="mixtral",
    renamed={"gate": "gate.weight", "w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj"},
    fused={"gate_up_proj": ("w1", "w3")},
)
QWEN2_MOE_LAYOUT = PeftMoeConversion(
    layout="qwen2_moe",
    renamed={
        "gate": "gate.weight",
        "gate_proj": "gate_up_proj",
        "up_proj": "gate_up_proj",
        "down_proj": "down_proj",
    },
    fused={"gate_up_proj": ("gate_proj", "up_proj")},
)

NO_DEFAULT = "Please specify `target_modules` or `target_parameters`in `peft_config`"
"""``LoraModel._prepare_adapter_config``'s ValueError: no default targets for the model type."""
NOTHING_MATCHED = "No `target_modules` passed but also no `target_parameters` found"
"""``BaseTuner.inject_adapter``'s NoMatchingPeftModuleError."""


@dataclass(frozen=True)
class PeftTargets:
    """What PEFT adapts: modules by leaf name (None: every nn.Linear but the LM head), minus
    ``excluded``; parameters wrapped by ``lora.ParamWrapper`` by key suffix, with their
    rank multiplier."""

    modules: frozenset[str] | None
    excluded: frozenset[str]
    params: Mapping[str, int]


def peft_targets(
    family: str,
    targets: tuple[str, ...],
    default: tuple[str, ...] | None,
    conversion: PeftMoeConversion | None,
    dropout: float,
) -> PeftTargets:
    """Resolve ``targets`` (empty: PEFT's default for ``family``; ``("all-linear",)``) as PEFT
    does; raise PEFT's refusals as one-line ``--lora-targets`` / ``--lora-dropout`` errors."""
    if conversion is None:
        if not targets and default is None:
            raise MemcalcError(
                f"--lora-targets: PEFT has no default target modules for {family} "
                f'("{NO_DEFAULT}", peft/tuners/lora/model.py _prepare_adapter_config); name '
                "them (e.g. q_proj,v_proj) or use all-linear"
            )
        chosen = targets or default or ()
        modules = None if chosen == ("all-linear",) else frozenset(chosen)
        return PeftTargets(modules, frozenset(), {})
    if not targets:
        raise MemcalcError(
            f"--lora-targets: PEFT has no default targets for {family} under transformers 5 "
            f'(its {conversion.layout} MoE conversion empties them: "{NOTHING_MATCHED}", '
            "peft/utils/transformers_weight_conversion.py _convert_peft_config_moe); name them "
            "(e.g. q_proj,v_proj) or use all-linear"
        )
    all_linear = targets == ("all-linear",)
    named = set(conversion.renamed) if all_linear else set(targets) & set(conversion.renamed)
    params: dict[str, int] = {}
    for old in sorted(named):
        params[conversion.renamed[old]] = 1
    for new, olds in conversion.fused.items():
        present = named & set(olds)
        if present and present != set(olds):
            missing = ", ".join(sorted(set(olds) - present))
            raise MemcalcError(
                f"--lora-targets: PEFT refuses {', '.join(sorted(present))} without {missing}: "
                f"they are fused into {new} (peft/utils/transformers_weight_conversion.py "
                "_convert_peft_config_moe)"
            )
        if present:
            params[new] = len(olds)  # rank_pattern: r * len(required_old_targets)
    if params and dropout > 0:
        raise MemcalcError(
            f"--lora-dropout: PEFT refuses lora_dropout {dropout:g} on the {family} experts and "
            f'router it adapts as parameters ({", ".join(sorted(params))}): "lora.ParamWrapper '
            'does not work with lora_dropout != 0" (peft/tuners/lora/layer.py '
            "ParamWrapper.__init__); use --lora-dropout 0 or name targets without them"
        )
    excluded = frozenset(conversion.renamed)
    modules = None if all_linear else frozenset(targets) - excluded
    return PeftTargets(modules, excluded, params)
