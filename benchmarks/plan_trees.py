"""Planning time of two (or more) source trees, alternating: is a change to the planner faster?

Each row is one `Executor.plan` of `executor_overhead.py`'s DAG (N steps, 10 layers, fan-in 1-2)
in a fresh process, with the tree's own `marin_lab` and `benchmarks/executor_overhead.py`; the trees
take turns row by row, so a machine that speeds up or slows down during the run weighs on each
alike. Prints every row and, per tree, the median and range in milliseconds.

    python benchmarks/plan_trees.py --steps 100000 --rows 5 TREE_A TREE_B

(a tree is a checkout of the repository, e.g. `git worktree add /tmp/base <commit>`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

# One plan, run inside the tree under test (its own imports), printing the seconds it took.
CHILD = """
import sys, tempfile, time
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import executor_overhead
from marin_lab.execution import Executor
steps = executor_overhead.build_dag("ours", int(sys.argv[2]), 10)
executor = Executor(prefix=tempfile.mkdtemp(prefix="plan-trees-"), backend="local")
started = time.perf_counter()
plan = executor.plan(steps)
elapsed = time.perf_counter() - started
assert len(plan.steps) == int(sys.argv[2])
print(elapsed)
"""


def plan_once(tree: str, steps: int) -> float:
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, tree, str(steps)], env=env, cwd=tree, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="+", help="repository checkouts to compare")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=5, help="plans per tree")
    args = parser.parse_args()
    times: dict[str, list[float]] = {tree: [] for tree in args.trees}
    for row in range(args.rows):
        for tree in args.trees:
            seconds = plan_once(os.path.abspath(tree), args.steps)
            times[tree].append(seconds)
            print(f"row {row + 1}  {tree}  {seconds * 1e3:.1f} ms", flush=True)
    print(f"{args.steps:,} steps, {args.rows} rows per tree, load average {os.getloadavg()[0]:.2f} at the end")
    for tree, rows in times.items():
        ms = [t * 1e3 for t in rows]
        print(f"{tree}: median {statistics.median(ms):.1f} ms ({min(ms):.1f}-{max(ms):.1f})")


if __name__ == "__main__":
    main()
