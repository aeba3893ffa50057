"""Compact table of one layer's saved storages from a tools/dump_saved.py --json result.

    python tools/saved_table.py /tmp/d.json [--layer 1]

One row per storage the layer saved first (views and re-saves of it are folded in, their ops
listed): ops | shape | dtype | bytes. Then the layer total and the tensors passed to the layer.
"""

from __future__ import annotations

import argparse
import json
from collections import OrderedDict


def table(res: dict, layer: int) -> str:
    scope = f"layer {layer}"
    rows: OrderedDict[int, dict] = OrderedDict()
    for r in res["records"]:
        sid = r["storage"]
        if r["scope"] == scope and r["new"]:
            rows[sid] = {
                "ops": set(r["ops"]),
                "shape": r["shape"],
                "dtype": r["dtype"],
                "bytes": r["storage_bytes"],
                "module": r["module"],
                "views": set(),
            }
        elif sid in rows:
            rows[sid]["ops"].update(r["ops"])
            if r["shape"] != rows[sid]["shape"]:
                rows[sid]["views"].add(tuple(r["shape"]))
    shared = OrderedDict()
    for r in res["records"]:
        if (
            r["scope"] == scope
            and not r["new"]
            and r["storage"] not in rows
            and r["note"] != "parameter/buffer"
        ):
            shared.setdefault(r["storage"], r)
    out = [
        "| # | module | ops (autograd node.saved field) | shape | dtype | bytes |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows.values()):
        ops = ", ".join(sorted(r["ops"])) or "(no node)"
        views = f" (+ views {', '.join(str(v) for v in sorted(r['views']))})" if r["views"] else ""
        mod = r["module"].split(".", 3)[-1] if r["module"].count(".") >= 3 else r["module"]
        out.append(
            f"| {i} | {mod} | {ops} | {tuple(r['shape'])}{views} | {r['dtype']} | {r['bytes']} |"
        )
    total = sum(r["bytes"] for r in rows.values())
    out.append(f"\nlayer {layer} total (new storages): **{total} B**")
    if shared:
        out.append(
            "re-saved storages first saved elsewhere (not charged here): "
            + "; ".join(
                f"{tuple(r['shape'])} {r['dtype']} {','.join(sorted(set(r['ops'])))} ({r['note']})"
                for r in shared.values()
            )
        )
    li = res.get("layer_inputs", {}).get(str(layer)) or res.get("layer_inputs", {}).get(layer)
    if li:
        out.append(
            "layer inputs: " + "; ".join(f"{x['arg']} {tuple(x['shape'])} {x['dtype']}" for x in li)
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--layer", type=int, default=1)
    a = ap.parse_args()
    res = json.load(open(a.json))
    print(
        f"`{res['config']}` dtype={res['dtype']} attn={res['attn']} "
        f"b={res['batch']} s={res['seq']}\n"
    )
    print(table(res, a.layer))


if __name__ == "__main__":
    main()
