"""Print every tensor autograd saves in one real CPU training step of an HF model.

    PYTHONPATH=src python tools/dump_saved.py tests/data/hf/tiny/gemma2.json \
        --dtype bf16 --attn eager [--batch 2 --seq 32] [--experts grouped_mm] [--json out.json]

The model is built from the config.json with random init (``AutoModelForCausalLM.from_config``,
``use_cache=False``, ``model.train()``), in one of three precisions:

* ``fp32``: fp32 weights and activations;
* ``bf16``: ``model.to(torch.bfloat16)``;
* ``autocast``: fp32 weights, forward under ``torch.autocast("cpu", torch.bfloat16)``.

One forward on int64 ids of shape (batch, seq) with ``labels=ids`` runs under
``torch.autograd.graph.saved_tensors_hooks``; the pack hook records every saved tensor (parameters
and buffers are skipped unless ``--params``), the module that was running (from forward
pre/post hooks on every module) and so its scope: ``prologue`` (before the first decoder layer),
``layer i`` or ``epilogue``. After the forward, the autograd graph of the loss is walked and each
node's ``_saved_*`` attributes are matched to the recorded tensors (by data pointer, shape,
stride and dtype) to name the op that saved them (``MmBackward0.mat2`` ...). Then backward runs
(so a failing backward shows too).

Storage identity: two saved tensors with the same ``untyped_storage().data_ptr()`` are one
allocation (views of one buffer). A storage's bytes are charged once, to the first tensor that
saved it (``new``); later ones are marked ``view of #n`` / ``same as #n``. Totals per scope are
sums of the storages' ``nbytes`` (the whole storage, as the caching allocator holds it).

``--layer-inputs`` also lists every tensor argument passed to each decoder layer (hidden state,
RoPE cos/sin, masks, position ids...): what a non-reentrant ``torch.utils.checkpoint`` around the
layer keeps alive instead of the layer's saved tensors.

CPU only. It measures what the CPU kernels save (e.g. SDPA on CPU picks the flash kernel only
when q/k/v head dims match and no mask forces the math path); see docs/research/families.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import OrderedDict, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn


@dataclass
class SavedRec:
    index: int
    scope: str
    module: str
    shape: list[int]
    stride: list[int]
    dtype: str
    storage: int
    """Short id of the storage (order of first appearance)."""
    storage_bytes: int
    tensor_bytes: int
    new: bool
    note: str = ""
    ops: list[str] = field(default_factory=list)


def load_model(path: str, attn: str, experts: str | None, dtype: str) -> nn.Module:
    import transformers

    cfg = json.loads(Path(path).read_text())
    cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    model_type = cfg.pop("model_type")
    cfg["use_cache"] = False
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    kwargs: dict[str, Any] = {"attn_implementation": attn}
    if experts:
        kwargs["experts_implementation"] = experts
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, **kwargs)
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    return model.train()


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    best: list[nn.Module] = []
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and len(m) and len({type(c) for c in m}) == 1:
            if sum(p.numel() for p in m.parameters()) > sum(
                p.numel() for c in best for p in c.parameters()
            ):
                best = list(m)
    return best


def key(t: torch.Tensor) -> tuple:
    return (
        t.untyped_storage().data_ptr(),
        t.storage_offset(),
        tuple(t.shape),
        tuple(t.stride()),
        t.dtype,
    )


def run(args: argparse.Namespace) -> dict:
    model = load_model(args.config, args.attn, args.experts, args.dtype)
    layers = decoder_layers(model)
    layer_index = {id(m): i for i, m in enumerate(layers)}
    paths = {id(m): p for p, m in model.named_modules(remove_duplicate=False)}
    param_ptrs = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}

    state = {"scope": "prologue", "stack": []}
    records: list[SavedRec] = []
    by_key: dict[tuple, list[int]] = defaultdict(list)
    storage_ids: OrderedDict[int, int] = OrderedDict()
    first_of_storage: dict[int, int] = {}
    keep: list[torch.Tensor] = []
    layer_inputs: dict[int, list[dict]] = {}

    def pre(m: nn.Module, a: tuple, kw: dict) -> None:
        i = layer_index.get(id(m))
        if i is not None:
            state["scope"] = f"layer {i}"
            if args.layer_inputs and i not in layer_inputs:
                flat = [(f"arg{j}", v) for j, v in enumerate(a)] + list(kw.items())
                rows = []
                for name, v in flat:
                    vs = v if isinstance(v, (tuple, list)) else (v,)
                    for k, t in enumerate(vs):
                        if isinstance(t, torch.Tensor):
                            rows.append(
                                {
                                    "arg": name + (f"[{k}]" if len(vs) > 1 else ""),
                                    "shape": list(t.shape),
                                    "dtype": str(t.dtype).replace("torch.", ""),
                                    "storage_bytes": t.untyped_storage().nbytes(),
                                    "requires_grad": t.requires_grad,
                                }
                            )
                layer_inputs[i] = rows
        state["stack"].append(paths.get(id(m), "?"))

    def post(m: nn.Module, a: Any, kw: Any, out: Any) -> None:
        if state["stack"]:
            state["stack"].pop()
        i = layer_index.get(id(m))
        if i is not None:
            state["scope"] = "epilogue" if i == len(layers) - 1 else f"between {i},{i + 1}"

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        is_param = ptr in param_ptrs
        if is_param and not args.params:
            return t
        sid = storage_ids.setdefault(ptr, len(storage_ids))
        new = sid not in first_of_storage
        idx = len(records)
        note = "parameter/buffer" if is_param else ""
        if not new:
            j = first_of_storage[sid]
            same = key(t) == key(keep[j])
            note = note or (f"same as #{j}" if same else f"view of #{j}")
        else:
            first_of_storage[sid] = idx
            if t._base is not None or t.untyped_storage().nbytes() != t.numel() * t.element_size():
                note = (
                    "view (storage larger than tensor)"
                    if t.untyped_storage().nbytes() > t.numel() * t.element_size()
                    else "view"
                )
        rec = SavedRec(
            idx,
            state["scope"],
            state["stack"][-1] if state["stack"] else "",
            list(t.shape),
            list(t.stride()),
            str(t.dtype).replace("torch.", ""),
            sid,
            t.untyped_storage().nbytes(),
            t.numel() * t.element_size(),
            new and not is_param,
            note,
        )
        records.append(rec)
        keep.append(t)
        by_key[key(t)].append(idx)
        return t

    handles = []
    for m in model.modules():
        handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(m.register_forward_hook(post, with_kwargs=True, always_call=True))
    vocab = model.get_input_embeddings().num_embeddings
    torch.manual_seed(1)
    ids = torch.randint(0, vocab, (args.batch, args.seq))
    ac = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if args.dtype == "autocast"
        else contextlib.nullcontext()
    )
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with ac:
            out = model(input_ids=ids, labels=ids)
    for h in handles:
        h.remove()
    loss = out.loss
    # name the ops: walk the graph, match _saved_* tensors to records
    seen: set[int] = set()
    stack = [loss.grad_fn]
    node_seq: list[tuple[int, str]] = []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        name = type(node).__name__
        node_seq.append((node._sequence_nr(), name))
        attrs = [a for a in dir(node) if a.startswith("_saved_")]
        for a in attrs:
            try:
                v = getattr(node, a)
            except Exception:
                continue
            for t in v if isinstance(v, (tuple, list)) else (v,):
                if isinstance(t, torch.Tensor):
                    for i in by_key.get(key(t), []):
                        records[i].ops.append(f"{name}.{a[7:]}")
        if hasattr(node, "saved_tensors"):
            try:
                for t in node.saved_tensors:
                    if isinstance(t, torch.Tensor):
                        for i in by_key.get(key(t), []):
                            records[i].ops.append(f"{name}.saved_tensors")
            except Exception:
                pass
        stack.extend(n for n, _ in node.next_functions)
    backward_error = None
    try:
        loss.backward()
    except Exception as e:  # noqa: BLE001 - report, do not hide
        backward_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    totals: dict[str, int] = defaultdict(int)
    for r in records:
        if r.new:
            totals[r.scope] += r.storage_bytes
    return {
        "config": args.config,
        "dtype": args.dtype,
        "attn": args.attn,
        "experts": args.experts,
        "batch": args.batch,
        "seq": args.seq,
        "loss_dtype": str(loss.dtype),
        "logits": [list(out.logits.shape), str(out.logits.dtype)],
        "backward_error": backward_error,
        "records": [asdict(r) for r in records],
        "totals": dict(totals),
        "total": sum(totals.values()),
        "layer_inputs": layer_inputs,
    }


def print_report(res: dict) -> None:
    print(
        f"# {res['config']}  dtype={res['dtype']} attn={res['attn']} experts={res['experts']} "
        f"b={res['batch']} s={res['seq']}  logits={res['logits']}"
    )
    if res["backward_error"]:
        print(f"# BACKWARD FAILED: {res['backward_error']}")
    scope = None
    for r in res["records"]:
        if r["scope"] != scope:
            scope = r["scope"]
            print(f"\n## {scope}")
        ops = ",".join(sorted(set(r["ops"]))) or "(no node claims it)"
        flag = "new" if r["new"] else "   "
        print(
            f"#{r['index']:<4d} {flag} s{r['storage']:<4d} {r['storage_bytes']:>9d}B "
            f"{r['dtype']:8s} {str(tuple(r['shape'])):22s} {ops:50s} {r['module']} {r['note']}"
        )
    print("\n## totals (unique storages, bytes, charged to the scope that first saved them)")
    for k, v in res["totals"].items():
        print(f"{k:16s} {v:>12d}")
    print(f"{'total':16s} {res['total']:>12d}")
    if res["layer_inputs"]:
        print("\n## tensors passed to each decoder layer (what a non-reentrant checkpoint keeps)")
        for i, rows in res["layer_inputs"].items():
            print(
                f"layer {i}: "
                + "; ".join(
                    f"{r['arg']} {tuple(r['shape'])} {r['dtype']} {r['storage_bytes']}B"
                    for r in rows
                )
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--dtype", choices=["fp32", "bf16", "autocast"], default="fp32")
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="sdpa")
    ap.add_argument(
        "--experts", default=None, help="experts_implementation: eager, grouped_mm, batched_mm"
    )
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--params", action="store_true", help="also list saved parameters/buffers")
    ap.add_argument("--layer-inputs", action="store_true")
    ap.add_argument("--json", help="write the full result as JSON here")
    ap.add_argument("--quiet", action="store_true", help="only totals")
    args = ap.parse_args(argv)
    res = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    if args.quiet:
        print(
            json.dumps(
                {
                    "totals": res["totals"],
                    "total": res["total"],
                    "backward_error": res["backward_error"],
                }
            )
        )
    else:
        print_report(res)
    return 1 if res["backward_error"] else 0


if __name__ == "__main__":
    sys.exit(main())
