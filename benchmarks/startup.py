"""Whole-process start-up time of `memcalc estimate` beside `python -c pass`.

Run: python benchmarks/startup.py [repeats]
Prints the median wall time of each and their ratio. `memcalc estimate` must not import torch;
the ratio shows what the CLI costs on top of the interpreter itself.
"""

import statistics
import subprocess
import sys
import time


def median_seconds(argv: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    bare = median_seconds([sys.executable, "-c", "pass"], repeats)
    estimate = median_seconds([sys.executable, "-m", "memcalc", "estimate"], repeats)
    torch_import = median_seconds([sys.executable, "-c", "import torch"], max(3, repeats // 3))
    print(f"python -c pass        {bare * 1e3:8.1f} ms")
    print(f"memcalc estimate      {estimate * 1e3:8.1f} ms   ratio {estimate / bare:5.1f}x")
    print(f"python -c import torch{torch_import * 1e3:8.1f} ms   (what estimate avoids)")


if __name__ == "__main__":
    main()
