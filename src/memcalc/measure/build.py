"""ModelSpec -> a real torch model: memcalc's reference implementation or Hugging Face's.

Both are built from the same ModelSpec with random init (no weights are downloaded), in the
weight dtype of the precision recipe, so their saved tensors can be compared with the op graph.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch
from torch import nn

from memcalc.errors import MemcalcError
from memcalc.install_hints import TRANSFORMERS
from memcalc.measure.reference_model import Config, Transformer
from memcalc.spec.families import hf_config_dict
from memcalc.spec.model import ModelSpec, Positions
from memcalc.spec.training import Attention, DType, TrainingSetup


class Impl(str, Enum):
    """Which implementation of the model is run."""

    ours = "ours"
    """memcalc's reference model (measure/reference_model.py): one readable file."""
    hf = "hf"
    """Hugging Face transformers (GPT2LMHeadModel / LlamaForCausalLM / Qwen2ForCausalLM)."""
    torchtitan = "torchtitan"
    """torchtitan's own Llama 3 and ``parallelize_llama`` (``measure/torchtitan/``)."""


TORCH_DTYPES = {DType.fp32: torch.float32, DType.bf16: torch.bfloat16, DType.fp16: torch.float16}


def torch_dtype(dtype: DType) -> torch.dtype:
    try:
        return TORCH_DTYPES[dtype]
    except KeyError:
        raise MemcalcError(
            f"--precision: measure runs fp32, bf16 and fp16 weights; "
            f"{dtype.value} weights are not supported"
        ) from None


def attention_kind(setup: TrainingSetup, spec: ModelSpec | None = None) -> str:
    """The kernel run: ``eager``, or ``sdpa`` for sdpa, flash and flex -- the same saved
    tensors, except where HF gives SDPA a sliding-window mask (flash-attention 2 and flex take
    the window in the kernel or the block mask) or has no SDPA at all (Gemma 2): then ``flash``
    or ``flex`` of ``spec`` is refused (flash-attention 2 itself needs CUDA; flex runs as SDPA
    here, whose sliding-window mask the estimate's block mask is not)."""
    if setup.attention is Attention.eager:
        return "eager"
    if setup.attention in (Attention.flash, Attention.flex) and spec is not None:
        from memcalc.graph.blocks.attention import sliding_mask
        from memcalc.spec.families import family_of

        types = set(spec.first_layers) | set(spec.layer_pattern)
        if family_of(spec).impl.sdpa_refused or any(
            sliding_mask(spec, setup.seq, t) for t in types
        ):
            kernel = {Attention.flash: "flash-attention 2 (a CUDA kernel)"}.get(
                setup.attention, "flex attention"
            )
            raise MemcalcError(
                f"--attention {setup.attention.value}: measure and trace run SDPA in place of "
                f"{kernel}, and for {spec.name} at --seq {setup.seq} the two differ "
                "(sliding-window mask, or no SDPA); use --attention sdpa or eager"
            )
    return "sdpa"


def build_model(
    spec: ModelSpec, setup: TrainingSetup, impl: Impl, device: torch.device, seed: int = 0
) -> nn.Module:
    """The model in training mode, weights in the recipe's weight dtype, on ``device``."""
    if setup.seq > spec.max_position_embeddings and spec.positions is Positions.learned:
        raise MemcalcError(
            f"--seq: {setup.seq} is longer than the model's "
            f"max_position_embeddings ({spec.max_position_embeddings})"
        )
    dtype = torch_dtype(setup.weight_dtype)
    torch.manual_seed(seed)
    if impl is Impl.ours:
        if spec.sliding_window is not None and setup.seq > spec.sliding_window:
            raise MemcalcError(
                f"--framework reference: the reference model has no sliding-window attention and "
                f"--seq {setup.seq} is longer than {spec.name}'s window "
                f"({spec.sliding_window}); use --framework hf"
            )
        model: nn.Module = Transformer(Config.from_spec(spec, attention_kind(setup, spec)))
        return model.to(device=device, dtype=dtype).train()
    # built in the weight dtype as from_pretrained(dtype=...) loads it: the parameters the
    # model keeps in fp32 (_keep_in_fp32_modules_strict: DeepSeek's router) stay fp32 --
    # unless the run casts every parameter (FSDP2 needs one dtype per group; DeepSpeed
    # casts them itself)
    model = _hf_model(spec, attention_kind(setup, spec), dtype)
    if not setup.keeps_fp32_modules:
        model = model.to(dtype=dtype)
    return model.to(device=device).train()


def _hf_model(spec: ModelSpec, attention: str, dtype: torch.dtype) -> nn.Module:
    try:
        import transformers
    except ImportError:
        raise MemcalcError(f"--framework hf needs transformers: {TRANSFORMERS}") from None
    cfg = dict(hf_config_dict(spec))
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    return transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=attention, dtype=dtype
    )


def layer_list(model: nn.Module) -> tuple[nn.Module, str]:
    """(parent, attribute) of the decoder-block ModuleList, in ours and in HF models."""
    paths = ("h", "transformer.h", "model.layers", "model.decoder.layers", "gpt_neox.layers")
    # a PEFT model wraps the HF model twice: PeftModel.base_model (LoraModel).model
    for path in (*paths, *(f"base_model.model.{p}" for p in paths)):
        parent: Any = model
        *head, last = path.split(".")
        try:
            for name in head:
                parent = getattr(parent, name)
            if isinstance(getattr(parent, last, None), nn.ModuleList):
                return parent, last
        except AttributeError:
            continue
    raise MemcalcError(f"cannot find the decoder blocks of {type(model).__name__}")


def forward_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """One forward with ``labels = ids``; only the loss is kept (logits are freed, as the HF
    Trainer does)."""
    inner = getattr(model, "module", model)  # DistributedDataParallel wraps the model
    if isinstance(inner, Transformer):
        return model(ids, ids)
    out = model(input_ids=ids, labels=ids)
    return out.loss
