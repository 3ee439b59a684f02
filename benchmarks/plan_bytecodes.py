"""Where planning's Python work goes, counted rather than timed: bytecode instructions per step.

`Executor.plan` of the planning benchmark's DAG (`executor_overhead.build_dag`: N steps, 10 layers,
fan-in 1-2) under `sys.settrace` with opcode events, grouped by the part of the planner that
executes them. A count does not depend on the machine's load, so two trees can be compared on a
shared machine where wall and CPU times mostly measure the other jobs. C work (the JSON encoder,
sha256, dict and list operations) is not seen: each call into it counts as the instructions that
make the call. Run it once per tree:

    PYTHONPATH=TREE python TREE/benchmarks/plan_bytecodes.py [--steps 2000]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from executor_overhead import build_dag  # noqa: E402

from marin_lab.execution import Executor, ExecutorMainConfig  # noqa: E402

WALK = {"scan_config", "_add_versioned", "_field_names", "portable_value"}
CHECKS = {"_check_step", "_plain", "validate_name", "_normalized", "executor_resources", "_ray_function"}


def part(filename: str, function: str) -> str:
    name = os.path.basename(filename)
    if name == "<string>" or function in ("__post_init__", "__init__"):
        return "dataclass constructors (ConfigScan, PlannedStep, Plan)"
    if (name == "hashing.py" and (function.startswith("_walk") or function in WALK)) or function == "portable_value":
        return "identity walk (hashing.scan_config)"
    if name == "hashing.py":
        return "version, canonical JSON, sha256 (the Python side)"
    if function in CHECKS:
        return "step checks"
    if name == "plan.py":
        return "planner loop (plan._build_plan and its comprehensions)"
    if name == "regions.py":
        return "egress guard"
    return f"other ({name}:{function})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--layers", type=int, default=10)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as prefix:
        ex = Executor(ExecutorMainConfig(prefix=prefix, backend="local"))
        ex.plan(build_dag("ours", 20, 2))  # first use fills the per-class caches and lazy imports
        steps = build_dag("ours", args.steps, args.layers)
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        calls = [0]

        def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
            frame.f_trace_opcodes = True
            if event == "opcode":
                counts[(frame.f_code.co_filename, frame.f_code.co_name)] += 1
            elif event == "call":
                calls[0] += 1
            return tracer

        sys.settrace(tracer)
        try:
            ex.plan(steps)
        finally:
            sys.settrace(None)
    parts: collections.Counter[str] = collections.Counter()
    for (filename, function), n in counts.items():
        parts[part(filename, function)] += n
    total = sum(parts.values())
    print(
        f"{args.steps} steps, {args.layers} layers: {total / args.steps:.0f} bytecode instructions and "
        f"{calls[0] / args.steps:.1f} Python calls per step"
    )
    for name, n in parts.most_common():
        if n / args.steps >= 0.5:
            print(f"  {n / args.steps:6.0f} {n / total:5.0%}  {name}")


if __name__ == "__main__":
    main()
