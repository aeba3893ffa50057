"""Time `memcalc trace` on a 7B-shaped model: HF LlamaForCausalLM with the sizes of the
llama-2-7b preset, built under FakeTensorMode (no memory allocated), at batch 1 x seq 4096.

Run: python benchmarks/trace_7b.py [impl] [BxS]      (impl: hf (default) or ours)
Prints the seconds taken and the traced vs analytic (graph/lower.py) activation bytes, in
total and by scope. The trace must take seconds, not minutes.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _requires import require

require("torch", "transformers")

import time

from memcalc.graph.lower import lower
from memcalc.measure.build import Impl
from memcalc.measure.trace import parse_input_shape, trace_spec
from memcalc.params import count_params
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup


def main() -> None:
    impl = Impl(sys.argv[1]) if len(sys.argv) > 1 else Impl.hf
    batch, seq = parse_input_shape(sys.argv[2] if len(sys.argv) > 2 else "1x4096")
    spec = preset("llama-2-7b")
    setup = TrainingSetup(batch=batch, seq=seq, precision="bf16-mixed", attention="sdpa")
    start = time.perf_counter()
    trace = trace_spec(spec, setup, impl)
    seconds = time.perf_counter() - start
    analytic = lower(spec, setup, device="cpu")
    traced = trace.graph
    print(f"{spec.name} ({impl.value}) at {batch}x{seq}, {setup.precision.value}, sdpa")
    print(f"trace: {seconds:.2f} s, {traced.num_layers} blocks, {trace.num_ops} ops")
    rows = [
        ("prologue", traced.prologue_saved_bytes, analytic.prologue_saved_bytes),
        ("blocks", traced.block_saved_bytes, analytic.block_saved_bytes),
        ("epilogue", traced.epilogue_saved_bytes, analytic.epilogue_saved_bytes),
        ("total", traced.saved_bytes, analytic.saved_bytes),
    ]
    print(f"{'activations':<12}{'traced (bytes)':>18}{'analytic (bytes)':>18}  match")
    for name, t, a in rows:
        print(f"{name:<12}{t:>18,}{a:>18,}  {'yes' if t == a else f'{t - a:+,}'}")
    same = trace.counts == count_params(spec)
    print(f"parameters: {trace.counts.total:,} traced, equal to count_params: {same}")


if __name__ == "__main__":
    main()
