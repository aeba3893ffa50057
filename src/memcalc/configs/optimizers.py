"""The optimizer names of HF ``TrainingArguments.optim`` (``transformers.training_args
.OptimizerNames``; axolotl's ``optimizer`` takes the same) as memcalc options."""

from __future__ import annotations

from memcalc.configs.base import Fields

HF_OPTIMIZERS: dict[str, dict[str, object]] = {
    # name: memcalc options (Trainer.get_optimizer_cls_and_kwargs)
    "adamw_torch": {"optimizer": "adamw"},
    "adamw_hf": {"optimizer": "adamw"},
    "adamw_torch_fused": {"optimizer": "adamw", "fused": True},
    "adamw_apex_fused": {"optimizer": "adamw", "fused": True},
    "adamw_8bit": {"optimizer": "adamw-8bit"},
    "adamw_bnb_8bit": {"optimizer": "adamw-8bit"},
    "paged_adamw_8bit": {"optimizer": "adamw-8bit"},
    "paged_adamw_32bit": {"optimizer": "adamw"},
    "paged_adamw": {"optimizer": "adamw"},
    "adafactor": {"optimizer": "adafactor"},
    "sgd": {"optimizer": "sgd"},
    "lion_32bit": {"optimizer": "lion"},
    "paged_lion_32bit": {"optimizer": "lion"},
}
PAGED = (
    "bitsandbytes pages its states to host memory only under memory pressure; counted on the GPU"
)


def read_hf_optimizer(f: Fields, key: str) -> None:
    """``f[key]``, an HF optimizer name, as memcalc's optimizer (and --fused)."""
    name = f.text(key)
    if name is None:
        return
    options = HF_OPTIMIZERS.get(name.lower())
    if options is None:
        f.unmodelled(
            key,
            f"{name!r} is not modelled (memcalc reads: {', '.join(HF_OPTIMIZERS)}); "
            "pass --optimizer",
        )
        return
    for option, value in options.items():
        f.set(option, value)
    if name.lower().startswith("paged_"):
        f.unmodelled(key, f"{name!r}: {PAGED}")
