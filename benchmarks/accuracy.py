"""Estimate vs measured (CPU, exact byte counts) for a grid of small GPT-2 and Llama configs,
one small config of each dense HF family of issue 8 (--families) and one per MoE family
(--moe: Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3 with MLA; tests/data/hf/tiny), as a
markdown table: the "How accurate is it?" section of the README (docs/accuracy.md).

    PYTHONPATH=src python benchmarks/accuracy.py [--device cpu|cuda] [--families | --moe]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _requires import require

require("torch", "transformers")

import argparse
from pathlib import Path

from memcalc.estimate import Options
from memcalc.measure.build import Impl
from memcalc.measure.compare import compare, estimate_for
from memcalc.measure.runner import measure
from memcalc.profiles import load_profile
from memcalc.spec.loaders import load_model
from memcalc.spec.model import ModelSpec
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
GPT2 = load_model(str(DATA / "gpt2-mini.toml"))
LLAMA = load_model(str(DATA / "llama-mini.toml"))
CASES = [
    # (spec, impl, precision, attention, dropout, recompute)
    (GPT2, Impl.hf, "fp32", "eager", 0.1, Recompute.none),
    (GPT2, Impl.hf, "bf16", "eager", 0.1, Recompute.full),
    (GPT2, Impl.hf, "bf16-mixed", "sdpa", 0.0, Recompute.none),
    (GPT2, Impl.ours, "bf16", "eager", 0.1, Recompute.selective),
    (GPT2, Impl.ours, "fp32", "sdpa", 0.0, Recompute.every_k),
    (LLAMA, Impl.hf, "bf16", "eager", 0.0, Recompute.none),
    (LLAMA, Impl.hf, "bf16-mixed", "sdpa", 0.0, Recompute.full),
    (LLAMA, Impl.ours, "fp32", "eager", 0.0, Recompute.selective),
    (LLAMA, Impl.ours, "bf16", "eager", 0.0, Recompute.full),
    (GPT2, Impl.hf, "amp-bf16", "eager", 0.1, Recompute.none),
    (LLAMA, Impl.hf, "amp-bf16", "sdpa", 0.0, Recompute.full),
    (LLAMA, Impl.ours, "amp-bf16", "eager", 0.0, Recompute.selective),
]


TINY = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf" / "tiny"


def _tiny(model_type: str) -> ModelSpec:
    """The research tiny config of a family, with room for --seq positions (OPT's table)."""
    spec = load_model(str(TINY / f"{model_type}.json"))
    return spec.replace(name=f"tiny {model_type}", max_position_embeddings=4096)


FAMILY_CASES = [
    # one small config per dense family (b and s from --batch / --seq)
    (_tiny("qwen3"), Impl.hf, "bf16", "sdpa", None, Recompute.none),
    (_tiny("gemma2"), Impl.hf, "bf16", "eager", None, Recompute.full),
    (_tiny("gemma3_text"), Impl.hf, "bf16", "sdpa", None, Recompute.none),
    (_tiny("phi3"), Impl.hf, "fp32", "sdpa", None, Recompute.selective),
    (_tiny("gpt_neox"), Impl.hf, "bf16", "eager", None, Recompute.none),
    (_tiny("opt"), Impl.hf, "bf16", "eager", None, Recompute.none),
    (_tiny("olmo2"), Impl.hf, "fp32", "eager", None, Recompute.full),
    (_tiny("mistral"), Impl.hf, "amp-bf16", "sdpa", None, Recompute.none),
]


def _wide(name: str, base: str, layers: int = 2) -> ModelSpec:
    """A preset's real widths (hidden, heads, kv heads, MLP, vocabulary) with fewer blocks, so
    that 7B-shaped layers at real sequence lengths run on a CPU."""
    return preset(base).replace(name=name, num_layers=layers)


WIDE_CASES = [
    # (spec, impl, precision, attention, dropout, recompute, batch, seq)
    (
        _wide("llama-2-7b x2 blocks", "llama-2-7b"),
        Impl.hf,
        "bf16",
        "sdpa",
        0.0,
        Recompute.none,
        1,
        2048,
    ),
    (
        _wide("llama-2-7b x2 blocks", "llama-2-7b"),
        Impl.hf,
        "bf16",
        "sdpa",
        0.0,
        Recompute.full,
        1,
        2048,
    ),
    (
        _wide("mistral-7b x2 blocks", "mistral-7b"),
        Impl.hf,
        "bf16",
        "eager",
        0.0,
        Recompute.none,
        1,
        1024,
    ),
    (
        _wide("qwen2.5-7b x2 blocks", "qwen2.5-7b"),
        Impl.hf,
        "bf16",
        "sdpa",
        0.0,
        Recompute.selective,
        1,
        1024,
    ),
    (_wide("gpt2-xl x2 blocks", "gpt2-xl"), Impl.hf, "bf16", "eager", 0.1, Recompute.none, 1, 1024),
]


def _tiny(family: str) -> ModelSpec:
    """The tiny config of an MoE family (E = 4 experts, k = 2, h = 64)."""
    return load_model(f"tests/data/hf/tiny/{family}.json").replace(name=f"{family}-tiny")


MOE_CASES = [
    # (spec, impl, precision, attention, dropout, recompute): HF's grouped_mm experts on CPU
    case
    for family in ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")
    for case in (
        (_tiny(family), Impl.hf, "bf16", "sdpa", 0.0, Recompute.none),
        (_tiny(family), Impl.hf, "fp32", "eager", 0.0, Recompute.full),
        (_tiny(family), Impl.hf, "amp-bf16", "eager", 0.0, Recompute.selective),
    )
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument(
        "--wide", action="store_true", help="7B-width layers at real sequence lengths (minutes)"
    )
    ap.add_argument(
        "--families", action="store_true", help="one tiny config per dense HF family instead"
    )
    ap.add_argument("--moe", action="store_true", help="the MoE families' tiny configs")
    args = ap.parse_args()
    grid = FAMILY_CASES if args.families else MOE_CASES if args.moe else CASES
    cases = WIDE_CASES if args.wide else [(*c, args.batch, args.seq) for c in grid]
    gpu = load_profile("h100-sxm-80gb")
    cols = ["parameters", "gradients", "optimizer states", "stored activations", "peak of the step"]
    print(f"| model | impl | precision | attention | dropout | recompute | {' | '.join(cols)} |")
    print("|" + "---|" * (6 + len(cols)))
    for spec, impl, precision, attention, dropout, rc, batch, seq in cases:
        setup = TrainingSetup(
            batch=batch,
            seq=seq,
            precision=precision,
            attention=attention,
            dropout=dropout,
        )
        m = measure(spec, setup, impl=impl, recompute=rc, every=2, device=args.device)
        b = estimate_for(spec, setup, gpu, Options(recompute=rc, every=2), m.device)
        rows = {r.component: r for r in compare(b, m)}
        cells = [f"{rows[c].measured_bytes:,} ({rows[c].error:+.1%})" for c in cols]
        print(
            f"| {spec.name} b{batch} s{seq} | {impl.value} | {precision} | {attention} | "
            f"{dropout} | "
            f"{m.strategy} | {' | '.join(cells)} |"
        )


if __name__ == "__main__":
    main()
