"""What is alive at the measured peak of one real CPU step, grouped by the op that made each
storage and the phase it was made in -- for chasing a peak the estimate misses (issue 20's
open peaks).

    PYTHONPATH=src python tools/peak_composition.py tests/data/hf/tiny/llama.json \\
        '{"batch": 3, "seq": 8, "precision": "fp16", "optimizer": "sgd",
          "lora": {"rank": 4, "targets": ["down_proj", "gate_proj", "up_proj"]}}' full

The second argument is ``training_setup``'s keyword arguments as JSON (the flags of
``memcalc measure``, ``lora`` as a LoraSpec's fields), the third the recompute strategy
(and a fourth its k). It runs ``memcalc.measure.runner.measure`` on the HF model with the
live-memory tracker wrapped so that each tracked storage remembers the aten op that made it;
at each new peak the live storages are summed by (op, phase). "pre" is what existed before
the measured step (parameters, optimizer state, the batch). Beside it, the estimate's peak
moment for the same step on the CPU's kernels.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _instrument() -> list[Any]:
    """Wrap ``LiveMemoryTracker`` so that it records where each storage came from and what
    was alive at its peak; returns the list the trackers made are appended to."""
    from memcalc.measure import tracker as tracking

    cls = tracking.LiveMemoryTracker
    made: list[Any] = []
    current = ["pre"]
    init, track, dispatch, note = (
        cls.__init__,
        cls._track_storage,
        cls.__torch_dispatch__,
        cls._note_peak,
    )

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.origin, self.at_peak = {}, Counter()
        made.append(self)

    def _track_storage(self: Any, storage: Any) -> bool:
        grew = track(self, storage)
        if grew:
            self.origin[storage.data_ptr()] = (current[0], self.phase)
        return grew

    def __torch_dispatch__(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None):  # type: ignore[no-untyped-def]
        current[0] = func.__name__
        return dispatch(self, func, types, args, kwargs)

    def _note_peak(self: Any, op_name: str) -> None:
        if self.live_bytes > self.peak_bytes:
            self.at_peak = Counter()
            for key, nbytes in self.live.items():
                self.at_peak[self.origin.get(key, ("pre", ""))] += nbytes
        note(self, op_name)

    cls.__init__ = __init__  # type: ignore[method-assign]
    cls._track_storage = _track_storage  # type: ignore[method-assign]
    cls.__torch_dispatch__ = __torch_dispatch__  # type: ignore[method-assign]
    cls._note_peak = _note_peak  # type: ignore[method-assign]
    return made


def main(argv: list[str]) -> int:
    warnings.filterwarnings("ignore")
    made = _instrument()
    from memcalc.estimate import Options
    from memcalc.measure.build import Impl
    from memcalc.measure.compare import estimate_for
    from memcalc.measure.runner import measure
    from memcalc.profiles import load_profile
    from memcalc.spec.loaders import load_model, training_setup
    from memcalc.strategies.recompute import Recompute

    model, fields, recompute = argv[0], json.loads(argv[1]), Recompute(argv[2])
    every = int(argv[3]) if len(argv) > 3 else None
    spec, setup = load_model(model), training_setup(**fields)
    measure(spec, setup, impl=Impl.hf, recompute=recompute, every=every, device="cpu")
    tracker = made[-1]
    print(f"measured peak {tracker.peak_bytes:,} B ({tracker.peak_phase}, at {tracker.peak_op})")
    for (op, phase), nbytes in tracker.at_peak.most_common():
        print(f"  {nbytes:>12,}  {op} ({phase or 'before the step'})")
    setup = setup.with_kbit_input_grads(recompute is not Recompute.none)
    options = Options(recompute=recompute, every=every)
    peak = estimate_for(spec, setup, load_profile("h100-sxm-80gb"), options, "cpu").peak
    print(
        f"estimated peak {peak.total_bytes:,} B ({peak.phase}, at {peak.where}): params "
        f"{peak.parameter_bytes:,} grads {peak.gradient_bytes:,} optimizer "
        f"{peak.optimizer_bytes:,} activations {peak.activation_bytes:,} transient "
        f"{peak.transient_bytes:,}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
