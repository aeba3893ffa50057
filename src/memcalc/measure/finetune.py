"""Frozen-base fine-tuning for real: PEFT LoRA adapters (``get_peft_model``), bitsandbytes
quantized base linears, and PEFT's ``prepare_model_for_kbit_training`` -- applied to the HF
model as a user's training script does, so ``measure`` and ``trace`` count what they keep."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from memcalc.errors import MemcalcError
from memcalc.install_hints import PEFT
from memcalc.spec.finetune import ALL_LINEAR, AdapterDtype, Quantize
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup


def apply_finetune(model: nn.Module, spec: ModelSpec, setup: TrainingSetup) -> nn.Module:
    """``model`` with the setup's quantization, k-bit preparation and LoRA adapters."""
    lora = setup.lora
    if lora is None:
        return model
    try:
        import peft
    except ImportError:
        raise MemcalcError(f"--lora-rank: measuring LoRA needs peft: {PEFT}") from None
    if setup.quantize is not Quantize.none:
        model = _quantize(model, setup.quantize)
    for p in model.parameters():
        p.requires_grad_(False)
    if setup.prepared_for_kbit:
        # peft/utils/other.py prepare_model_for_kbit_training, without its own gradient
        # checkpointing (memcalc applies recompute itself): fp32 for every non-4-bit 16-bit
        # parameter.
        for p in model.parameters():
            if p.dtype in (torch.float16, torch.bfloat16) and type(p).__name__ != "Params4bit":
                p.data = p.data.to(torch.float32)
    if setup.embedding_output_requires_grad:
        model.enable_input_require_grads()  # type: ignore[operator]
    from memcalc.graph.lower import finetune_of
    from memcalc.spec.families import family_of

    ft = finetune_of(spec, setup, family_of(spec).impl)
    assert ft is not None
    targets = _peft_target_modules(lora.targets)
    config = peft.LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        target_modules=targets,
        lora_dropout=lora.dropout,
        # as a user's script passes them: PEFT wraps each in a ModulesToSaveWrapper (a trained
        # copy beside the frozen original), embed_tokens and lm_head included
        modules_to_save=sorted(lora.modules_to_save) or None,
        bias="none",
    )
    try:
        wrapped = peft.get_peft_model(
            model, config, autocast_adapter_dtype=lora.adapter_dtype is AdapterDtype.fp32
        )
    except ValueError as e:  # PEFT refuses the targets (missing, or half of a fused pair)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MemcalcError(f"--lora-targets: PEFT refuses {targets}: {first}") from None
    if lora.train_embeddings:  # trained in place (no copy)
        train_embeddings(wrapped)
    return wrapped


def train_embeddings(wrapped: Any) -> None:
    """``--train-embeddings``: the model's own input embedding and output head (whatever the
    family calls them: GPT-2's wte, GPT-NeoX's embed_in) trained in place -- but a module in
    modules_to_save is trained as PEFT's copy only (its original stays frozen), and a head
    tied to such a frozen original stays frozen with it."""
    base = wrapped.get_base_model()
    originals = {
        id(p)
        for name, p in wrapped.named_parameters(remove_duplicate=False)
        if "original_module" in name
    }
    embedding, head = base.get_input_embeddings(), base.get_output_embeddings()
    if not hasattr(embedding, "original_module"):  # not a ModulesToSaveWrapper
        for p in embedding.parameters():
            p.requires_grad_(True)
    if head is not None and not hasattr(head, "original_module"):
        for p in head.parameters():
            if id(p) not in originals:
                p.requires_grad_(True)


def _peft_target_modules(targets: tuple[str, ...]) -> Any:
    """``LoraConfig.target_modules`` as a user writes it: the targets given, ``"all-linear"``,
    or None for PEFT's default -- PEFT itself then resolves them (its transformers-5 MoE
    conversion to ``target_parameters`` included), as ``finetune_of`` models."""
    if not targets:
        return None
    return ALL_LINEAR if ALL_LINEAR in targets else sorted(targets)


def _quantize(model: nn.Module, how: Quantize) -> nn.Module:
    """``model`` loaded again through transformers' own bitsandbytes integration, as a user's
    script loads a quantized base: its weights saved to a temporary folder and read back by
    ``from_pretrained(..., quantization_config=BitsAndBytesConfig(...))``, so the modules
    transformers converts are the ones quantized (``integrations/bitsandbytes.py``
    ``replace_with_bnb_linear``: ``nn.Linear`` and GPT-2's ``Conv1D``, not the LM head or a
    router that is a module of its own), with the 4-bit compute dtype the weights' dtype."""
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise MemcalcError("--quantize: measuring it needs bitsandbytes") from None
    import tempfile

    import safetensors.torch
    import transformers

    weight = next(p for p in model.parameters() if p.is_floating_point())
    if how is Quantize.int8:
        config = transformers.BitsAndBytesConfig(load_in_8bit=True)
    else:
        config = transformers.BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="fp4" if how is Quantize.fp4 else "nf4",
            bnb_4bit_use_double_quant=how is Quantize.nf4_dq,
            bnb_4bit_compute_dtype=weight.dtype,
        )
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # the "Loading weights" bar
    try:
        with tempfile.TemporaryDirectory(prefix="memcalc-quantize-") as folder:
            model.config.save_pretrained(folder)  # type: ignore[operator]
            safetensors.torch.save_model(model, f"{folder}/model.safetensors")
            loaded = transformers.AutoModelForCausalLM.from_pretrained(
                folder,
                quantization_config=config,
                dtype=weight.dtype,
                device_map={"": weight.device},
                attn_implementation=model.config._attn_implementation,  # type: ignore[union-attr]
            )
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    return loaded.train()


def quant_state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The tensors bitsandbytes keeps beside quantized weights (absmax, codes, scales): they
    are device memory of the parameters, though not parameters themselves."""
    out: list[torch.Tensor] = []
    for p in model.parameters():
        state = getattr(p, "quant_state", None)
        if state is not None:
            out += [state.absmax, state.code]
            if state.nested:
                out += [state.state2.absmax, state.state2.code, state.offset]
        scb = getattr(p, "SCB", None)
        if isinstance(scb, torch.Tensor):
            out.append(scb)
    for m in model.modules():
        # Linear8bitLt.init_8bit_state (first forward) moves the weight's SCB to the module's
        # MatmulLtState and sets weight.SCB = None (bitsandbytes/nn/modules.py)
        scb = getattr(getattr(m, "state", None), "SCB", None)
        if type(m).__name__ == "Linear8bitLt" and isinstance(scb, torch.Tensor):
            out.append(scb)
    return [t for t in out if isinstance(t, torch.Tensor)]


def keeps_ctx_attributes(model: nn.Module) -> bool:
    """The model has layers whose autograd Function keeps its input as a ctx attribute,
    invisible to saved-tensor hooks: bitsandbytes ``Linear8bitLt`` (``MatMul8bitFp.forward``
    ``ctx.A = A`` on CPU, ``MatMul8bitLt.forward`` ``ctx.tensors = (CAt, subA, A)`` on CUDA,
    ``bitsandbytes/autograd/_functions.py``)."""
    return any(type(m).__name__ == "Linear8bitLt" for m in model.modules())
