"""Regenerate tests/data/hf/param_counts.json from the preset config.json files beside it.

Each config is built with ``AutoModelForCausalLM.from_config`` under ``torch.device("meta")``
(no memory: DeepSeek-V3 and Llama-3.1-405B build in seconds) with the installed transformers
(recorded in the output). Counts are over ``model.parameters()``, which yields each Parameter
once, so tied weights (``tie_word_embeddings``) count once.

Roles, from the parameter's module path (``model.layers.<i>.<...>`` is layer i):

* ``embedding``: every ``nn.Embedding`` (token and, for OPT, learned positions);
* ``lm_head``: the output projection when it is a separate Parameter (0 when tied);
* ``norms``: modules whose class name contains "Norm" (per layer and the final norm);
* per layer ``attention`` (``self_attn`` / ``attention``), and the MLP split into
  ``mlp_dense`` (a dense MLP, or DeepSeek's dense-first layers), ``router`` (the top-k gate),
  ``experts`` (the routed experts' fused 3-D tensors), ``shared_expert`` (Qwen2-MoE's
  ``shared_expert`` + ``shared_expert_gate``, DeepSeek's ``shared_experts``);
* ``other``: anything else (should be 0; e.g. OPT's project_in/out when present).

Active parameters per token (MoE): every parameter except the routed experts, plus, in each
MoE layer, ``num_experts_per_tok`` experts' worth of that layer's routed-expert parameters
(all experts of a layer have the same shape). Embeddings and the LM head are included;
``active_nonembedding`` leaves out the token embedding table (and the LM head).

Usage: PYTHONPATH=src python tests/data/hf/make_param_counts.py [--check]
(``--check`` compares with the committed JSON and exits 1 on any difference).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import torch
import transformers
from torch import nn

HERE = Path(__file__).resolve().parent
PRESETS = [
    "qwen3-8b",
    "qwen3-32b",
    "gemma-2-9b",
    "gemma-2-27b",
    "gemma-3-4b",
    "gemma-3-27b",
    "phi-3-mini",
    "pythia-6.9b",
    "opt-6.7b",
    "olmo-2-7b",
    "mixtral-8x7b",
    "qwen3-30b-a3b",
    "qwen1.5-moe-a2.7b",
    "deepseek-v2-lite",
    "deepseek-v3",
    "mistral-nemo-12b",
    "llama-3.1-405b",
]
DROP_BEFORE_BUILD = ("quantization_config",)
"""DeepSeek-V3's published FP8 quantization_config would make from_config build FP8 linears;
the counts are of the bf16 model that training uses (same shapes, no scale tensors)."""

LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
RESOLVED_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "sliding_window",
    "layer_types",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "decoder_sparse_step",
    "mlp_only_layers",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "rotary_pct",
    "partial_rotary_factor",
    "use_parallel_residual",
    "ffn_dim",
    "word_embed_proj_dim",
    "query_pre_attn_scalar",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "hidden_act",
    "hidden_activation",
    "rms_norm_eps",
    "layer_norm_eps",
    "norm_topk_prob",
    "scoring_func",
    "topk_method",
    "n_group",
    "topk_group",
    "routed_scaling_factor",
    "router_aux_loss_coef",
    "output_router_logits",
    "max_position_embeddings",
)


def load_config(name: str) -> transformers.PretrainedConfig:
    data = json.loads((HERE / f"{name}.json").read_text())
    data = {k: v for k, v in data.items() if k not in DROP_BEFORE_BUILD}
    model_type = data.pop("model_type")
    data["use_cache"] = False
    return transformers.AutoConfig.for_model(model_type, **data)


def role_of(path: str, module: nn.Module, pname: str) -> str:
    cls = type(module).__name__
    if isinstance(module, nn.Embedding):
        return "embedding"
    if "norm" in cls.lower():
        return "norms"
    if LAYER.search(path + "."):
        p = path + "." + pname
        if ".shared_expert" in p:  # shared_expert, shared_expert_gate, shared_experts
            return "shared_expert"
        if ".experts." in p + "." and "shared" not in p:
            return "experts"
        if re.search(r"\.(gate|router)(\.|$)", path + ".") and "proj" not in pname:
            return "router"
        if any(k in path for k in ("self_attn", "attention", "attn")):
            return "attention"
        if any(k in path for k in ("mlp", "feed_forward", "block_sparse_moe", "fc1", "fc2")):
            return "mlp_dense"
        return "other_layer"
    if cls == "Linear" and path.endswith(("lm_head", "embed_out")):
        return "lm_head"
    return "other"


def count(name: str) -> dict:
    config = load_config(name)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    modules = dict(model.named_modules())
    owner: dict[int, tuple[str, nn.Module, str]] = {}
    for mpath, m in modules.items():
        for pname, p in m.named_parameters(recurse=False):
            owner.setdefault(id(p), (mpath, m, pname))
    roles: dict[str, int] = defaultdict(int)
    per_layer: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    experts_by_layer: dict[int, tuple[int, int]] = {}
    n_tensors = total = 0
    shapes: dict[str, list[int]] = {}
    for p in model.parameters():  # each Parameter once
        mpath, m, pname = owner[id(p)]
        role = role_of(mpath, m, pname)
        n = p.numel()
        total += n
        n_tensors += 1
        roles[role] += n
        lm = LAYER.search(mpath + ".")
        if lm:
            i = int(lm.group(1))
            per_layer[i][role] += n
            if role == "experts":
                e = p.shape[0]
                prev = experts_by_layer.get(i, (0, e))
                experts_by_layer[i] = (prev[0] + n, e)
            if i == 0 or role == "experts":
                generic = LAYER.sub(lambda mt: mt.group(0).replace(mt.group(1), "N"), mpath + ".")
                shapes.setdefault(f"{generic}{pname}", list(p.shape))
        else:
            shapes[f"{mpath}.{pname}"] = list(p.shape)
    emb = model.get_input_embeddings()
    out = model.get_output_embeddings()
    tied = out is not None and out.weight is emb.weight
    top_k = getattr(config, "num_experts_per_tok", None)
    result: dict = {
        "model_type": config.model_type,
        "class": type(model).__name__,
        "total": total,
        "num_tensors": n_tensors,
        "tied_embeddings": bool(tied),
        "by_role": dict(sorted(roles.items())),
        "layers": len(per_layer),
        "per_layer_kinds": [],
        "shapes": shapes,
        "resolved_config": {k: getattr(config, k) for k in RESOLVED_KEYS if hasattr(config, k)},
    }
    # group layers of identical role breakdown: [{"layers": [i..], "counts": {...}}]
    kinds: dict[str, list[int]] = {}
    for i in sorted(per_layer):
        key = json.dumps(dict(sorted(per_layer[i].items())))
        kinds.setdefault(key, []).append(i)
    for key, idx in kinds.items():
        result["per_layer_kinds"].append({"layers": idx, "counts": json.loads(key)})
    if experts_by_layer:
        routed = sum(n for n, _ in experts_by_layer.values())
        active_routed = sum(n // e * top_k for n, e in experts_by_layer.values())
        active = total - routed + active_routed
        embed_numel = emb.weight.numel()
        head_numel = 0 if tied or out is None else out.weight.numel()
        result["moe"] = {
            "moe_layers": sorted(experts_by_layer),
            "experts_per_layer": sorted({e for _, e in experts_by_layer.values()}),
            "top_k": top_k,
            "routed_expert_params": routed,
            "params_per_expert": sorted({n // e for n, e in experts_by_layer.values()}),
            "active_params_per_token": active,
            "active_nonembedding": active - embed_numel - head_numel,
        }
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("presets", nargs="*", default=PRESETS)
    args = ap.parse_args()
    out = {
        "_generated_by": "tests/data/hf/make_param_counts.py",
        "_transformers": transformers.__version__,
        "_torch": torch.__version__,
        "presets": {name: count(name) for name in args.presets},
    }
    text = json.dumps(out, indent=1, default=str) + "\n"
    target = HERE / "param_counts.json"
    if args.check:
        old = json.loads(target.read_text())
        diff = [
            n for n in out["presets"] if old["presets"].get(n) != json.loads(text)["presets"][n]
        ]
        print("differ:" if diff else "same", *diff)
        return 1 if diff else 0
    target.write_text(text)
    for name, r in out["presets"].items():
        moe = r.get("moe", {})
        print(
            f"{name:20s} {r['total']:>16,d} tied={r['tied_embeddings']!s:5s} "
            f"active={moe.get('active_params_per_token', r['total']):>16,d}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
