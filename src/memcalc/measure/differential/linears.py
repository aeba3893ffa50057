"""The linear layers of a family's real HF model, by leaf name and side (attention / MLP):
what a user can pass to ``--lora-targets``. Read from the model transformers builds (on the
meta device), not from memcalc's own graph, so a name memcalc does not know is still drawn."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ATTENTION_WORDS = ("attn", "attention")
"""A linear whose path has one of these parts is on the attention side (self_attn.q_proj,
attn.c_attn, attention.query_key_value); every other linear inside a block is on the MLP side
(mlp.down_proj, block_sparse_moe.gate, mlp.shared_expert.up_proj)."""


@dataclass(frozen=True)
class Linears:
    """Leaf names of the linear layers inside the decoder blocks, sorted, and the module names
    of the input embedding and the output head (what --modules-to-save may name)."""

    attention: tuple[str, ...]
    mlp: tuple[str, ...]
    embedding: str
    head: str

    @property
    def every(self) -> tuple[str, ...]:
        return tuple(sorted({*self.attention, *self.mlp}))


@cache
def linears_of(config_path: str) -> Linears:
    """The Linears of the HF model built from ``config_path`` (a config.json)."""
    import torch
    import transformers
    from transformers.pytorch_utils import Conv1D

    cfg = json.loads(Path(config_path).read_text())
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    attention: set[str] = set()
    mlp: set[str] = set()
    for name, module in model.named_modules():
        if not isinstance(module, (torch.nn.Linear, Conv1D)) or not _in_block(name):
            continue
        parts = name.split(".")
        side = attention if any(w in p for p in parts[:-1] for w in ATTENTION_WORDS) else mlp
        side.add(parts[-1])
    names = {id(m): n for n, m in model.named_modules()}
    embedding = names[id(model.get_input_embeddings())].split(".")[-1]
    head = names[id(model.get_output_embeddings())].split(".")[-1]
    return Linears(tuple(sorted(attention)), tuple(sorted(mlp)), embedding, head)


def _in_block(name: str) -> bool:
    """True for a module inside a decoder block (``...layers.3.``, ``h.0.``)."""
    parts = name.split(".")
    return any(p.isdigit() for p in parts)
