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
from memcalc.measure.reference_model import Config, Transformer
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import Attention, DType, TrainingSetup


class Impl(str, Enum):
    """Which implementation of the model is run."""

    ours = "ours"
    """memcalc's reference model (measure/reference_model.py): one readable file."""
    hf = "hf"
    """Hugging Face transformers (GPT2LMHeadModel / LlamaForCausalLM / Qwen2ForCausalLM)."""


TORCH_DTYPES = {DType.fp32: torch.float32, DType.bf16: torch.bfloat16, DType.fp16: torch.float16}


def torch_dtype(dtype: DType) -> torch.dtype:
    try:
        return TORCH_DTYPES[dtype]
    except KeyError:
        raise MemcalcError(
            f"--precision: measure runs fp32, bf16 and fp16 weights; "
            f"{dtype.value} weights are not supported"
        ) from None


def attention_kind(setup: TrainingSetup) -> str:
    """The kernel run: ``eager``, or ``sdpa`` for both sdpa and flash (the same saved tensors)."""
    return "eager" if setup.attention is Attention.eager else "sdpa"


def hf_config_dict(spec: ModelSpec) -> dict[str, Any]:
    """The HF config.json of ``spec`` (GPT2Config / LlamaConfig / Qwen2Config fields).

    Qwen2 is chosen for a llama-family spec with q/k/v biases but no output bias (what
    ``LlamaConfig.attention_bias`` cannot express).

    >>> from memcalc.spec.presets import preset
    >>> hf_config_dict(preset("gpt2"))["n_embd"]
    768
    """
    if spec.is_gpt2:
        return {
            "model_type": "gpt2",
            "vocab_size": spec.vocab_size,
            "n_embd": spec.hidden_size,
            "n_layer": spec.num_layers,
            "n_head": spec.num_heads,
            "n_inner": spec.intermediate_size,
            "n_positions": spec.max_position_embeddings,
            "activation_function": spec.act.value,
            "tie_word_embeddings": spec.tied,
            "embd_pdrop": spec.embedding_dropout,
            "attn_pdrop": spec.attention_dropout,
            "resid_pdrop": spec.residual_dropout,
            "use_cache": False,
        }
    if spec.has_qkv_bias and not spec.has_out_bias and not spec.has_mlp_bias:
        model_type, bias = "qwen2", {}
    elif spec.has_qkv_bias != spec.has_out_bias:
        raise MemcalcError(
            "--impl hf: q/k/v bias without output bias is only expressible as "
            "Qwen2 (no MLP bias); use --impl ours"
        )
    else:
        model_type, bias = (
            "llama",
            {"attention_bias": spec.has_qkv_bias, "mlp_bias": spec.has_mlp_bias},
        )
    return {
        "model_type": model_type,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.mlp_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.kv_heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "hidden_act": spec.act.value,
        "tie_word_embeddings": spec.tied,
        "attention_dropout": spec.attention_dropout,
        "use_cache": False,
        **bias,
    }


def build_model(
    spec: ModelSpec, setup: TrainingSetup, impl: Impl, device: torch.device, seed: int = 0
) -> nn.Module:
    """The model in training mode, weights in the recipe's weight dtype, on ``device``."""
    if setup.seq > spec.max_position_embeddings and spec.is_gpt2:
        raise MemcalcError(
            f"--seq: {setup.seq} is longer than the model's "
            f"max_position_embeddings ({spec.max_position_embeddings})"
        )
    dtype = torch_dtype(setup.weight_dtype)
    torch.manual_seed(seed)
    if impl is Impl.ours:
        model: nn.Module = Transformer(Config.from_spec(spec, attention_kind(setup)))
    else:
        model = _hf_model(spec, attention_kind(setup))
    return model.to(device=device, dtype=dtype).train()


def _hf_model(spec: ModelSpec, attention: str) -> nn.Module:
    try:
        import transformers
    except ImportError:
        raise MemcalcError("--impl hf needs transformers: pip install 'memcalc[hf]'") from None
    cfg = dict(hf_config_dict(spec))
    model_type = cfg.pop("model_type")
    config_cls = {
        "gpt2": transformers.GPT2Config,
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
    }[model_type]
    config = config_cls(**cfg)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attention)


def layer_list(model: nn.Module) -> tuple[nn.Module, str]:
    """(parent, attribute) of the decoder-block ModuleList, in ours and in HF models."""
    for path in ("h", "transformer.h", "model.layers"):
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
    if isinstance(model, Transformer):
        return model(ids, ids)
    out = model(input_ids=ids, labels=ids)
    return out.loss
