"""What PEFT itself builds from a user's flags, asked independently of memcalc: the HF model
from the tiny config, ``peft.LoraConfig`` from the flags as typed (no --lora-targets:
``target_modules=None``, PEFT's own default for the model type), ``get_peft_model``, then the
trainable count (``PeftModel.get_nb_trainable_parameters``) or PEFT's refusal.

``memcalc measure`` passes PEFT the targets memcalc resolved (``measure/finetune.py``), so a
default PEFT refuses, or an all-linear PEFT widens (fused MoE experts), never shows there; this
probe is where they show. The base is not quantized here: bitsandbytes changes what a weight
stores, not which modules PEFT adapts or trains."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from memcalc.measure.differential.cases import Case


@dataclass(frozen=True)
class PeftAnswer:
    """PEFT's trainable and total counts, or the first line of its refusal."""

    trainable: int | None
    total: int | None
    refused: str | None


def ask_peft(case: Case) -> PeftAnswer:
    """Build ``case``'s PEFT model on the CPU in fp32 (the counts do not depend on dtype)."""
    import peft
    import torch
    import transformers

    assert case.lora is not None
    lora = case.lora
    cfg = json.loads(Path(case.model).read_text())
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    for p in model.parameters():
        p.requires_grad_(False)
    targets: object = None
    if lora.targets == ("all-linear",):
        targets = "all-linear"
    elif lora.targets:
        targets = list(lora.targets)
    lora_config = peft.LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        target_modules=targets,
        lora_dropout=lora.dropout,
        modules_to_save=list(lora.modules_to_save) or None,
        bias="none",
    )
    try:
        wrapped = peft.get_peft_model(model, lora_config)
    except (ValueError, TypeError, KeyError, NotImplementedError) as e:
        text = str(e).strip()
        return PeftAnswer(None, None, text.splitlines()[0] if text else type(e).__name__)
    if lora.train_embeddings:
        # --train-embeddings is memcalc's flag, not PEFT's: trained as measure trains them
        # (the embedding and an untied head in place; a modules_to_save module as PEFT's copy,
        # its original -- and a head tied to it -- frozen)
        from memcalc.measure.finetune import train_embeddings

        train_embeddings(wrapped)
    trainable, total = wrapped.get_nb_trainable_parameters()
    return PeftAnswer(trainable, total, None)
