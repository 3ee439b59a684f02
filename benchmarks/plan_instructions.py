"""Machine instructions of a plan, C work included, counted under valgrind (independent of load).

Builds the planning benchmark's DAG (`executor_overhead.build_dag`: N steps, 10 layers, fan-in 1-2)
and, with `plan`, plans it and runs the young collection that follows; with `noplan` it stops after
building. Run each under callgrind, per tree; the difference of the two "Collected" totals is the
plan's instructions:

    PYTHONPATH=TREE valgrind --tool=callgrind python TREE/benchmarks/plan_instructions.py 10000 plan
    PYTHONPATH=TREE valgrind --tool=callgrind python TREE/benchmarks/plan_instructions.py 10000 noplan
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from executor_overhead import build_dag  # noqa: E402

from marin_lab.execution import Executor, ExecutorMainConfig  # noqa: E402


def main() -> None:
    n, mode = int(sys.argv[1]), sys.argv[2]
    ex = Executor(ExecutorMainConfig(prefix=tempfile.mkdtemp(), backend="local"))
    ex.plan(build_dag("ours", 20, 2))  # first use fills the per-class caches and lazy imports
    steps = build_dag("ours", n, 10)
    gc.collect(0)
    if mode == "plan":
        plan = ex.plan(steps)
        gc.collect(0)  # the young collection that follows planning
        assert len(plan.steps) == n


if __name__ == "__main__":
    main()
