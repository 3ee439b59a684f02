"""What the one containment rule costs the browser: `Roots.resolve` over 1,000 step records.

An experiment page of 1,000 steps resolves about 1,000 paths. Timed here for a local prefix (real
folders, symlinks resolved) and a bucket prefix (no I/O: canonical forms only), with a plain
string-prefix check beside it as the floor (what the browser compared before the rule was shared,
without its symlink resolution). Medians of `--rounds`, milliseconds per 1,000 paths; the load is
printed beside them.

    python benchmarks/path_containment.py --rounds 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marin_lab.browser.paths import Roots  # noqa: E402


def _median_ms(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        for i in range(args.steps):
            os.makedirs(os.path.join(root, f"step-{i:04d}"))
        cases = {
            "local prefix": (root, [f"{root}/step-{i:04d}/.executor_info" for i in range(args.steps)]),
            "gs:// prefix": (
                "gs://bucket/prefix",
                [f"gs://bucket/prefix/step-{i:04d}/.executor_info" for i in range(args.steps)],
            ),
        }
        print(
            f"{'case':<14} {'Roots.resolve':>14} {'string prefix':>14}  (ms per {args.steps} paths, median of "
            f"{args.rounds})"
        )
        for name, (prefix, paths) in cases.items():
            roots = Roots.of([prefix])
            ours = _median_ms(lambda: [roots.resolve(p) for p in paths], args.rounds)  # noqa: B023
            floor = _median_ms(lambda: [p.startswith(prefix + "/") for p in paths], args.rounds)  # noqa: B023
            print(f"{name:<14} {ours:>14.1f} {floor:>14.2f}")
    print(f"load: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
