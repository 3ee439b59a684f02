"""Executor overhead beside Ray's floor: N trivial steps through `executor_main` on local Ray, the same
function as plain Ray tasks, and Marin's Ray-era executor, side by side.

Question: what does the executor add per step over what Ray itself needs to run the same function,
and where does it go? Two shapes: a chain (each step reads the one before) and a fan-out (no
dependencies). The step function returns at once (benchmarks/executor_overhead.py's `noop_step`),
so each side's time is all overhead:

- ours: `executor_main(steps, args=["--prefix", P, "--backend", "ray"])` on a fresh prefix (every
  step runs: lease, statuses, record, log capture, provenance, manifest), at most `--max_concurrent`
  (default: the executor's own, max(cores, 4)) steps at once;
- ray: the floor, `ray.remote(noop_step)` on the same configs, the chain passing each task's
  ObjectRef to the next (Ray orders them), the fan-out submitted at once; then `ray.get`;
- marin: Marin's `Executor.run` on a fresh prefix (its StatusActor, status files, its info files).

Ray is started (and one worker warmed) before the clock starts, in every side's process. Each
figure is the median of `--repeats` fresh processes, the sides alternating in a rotating order.
`--profile` also runs ours once under cProfile, every step thread profiled (the supervisor runs each
step in a thread of the driver), and prints where the driver's time goes by part of the executor.

    python benchmarks/ray_floor.py [--steps 1000] [--repeats 3] [--shapes chain,fanout] [--profile]
        [--marin-src DIR] [--skip-marin]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import json
import os
import platform
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))

import executor_overhead as eo  # noqa: E402 (the DAGs, the step function, the child-process harness)

# Where a profiled driver's time goes: the first pattern found in a function's file names its part.
PARTS = (
    ("lease", ("execution/state/lease.py", "io/conditional.py")),
    ("status", ("execution/state/status.py", "store/status.py")),
    ("record", ("execution/record/builder.py", "store/step_record.py", "execution/record/artifacts.py")),
    ("provenance", ("execution/record/provenance.py", "execution/record/code_provenance.py", "host_env.py")),
    ("manifest, files", ("io/fs.py", "io/manifest.py", "fsspec/")),
    ("log capture", ("execution/run/logs.py",)),
    ("secrets scrub", ("io/secrets.py",)),
    ("ray client", ("/ray/",)),
    ("supervisor, backend", ("execution/run/supervisor.py", "execution/run/backends.py")),
    ("json", ("json/",)),
)


def noop_after(config: eo.StepConfig, previous: Any = None) -> None:
    """The step function, after `previous` (an ObjectRef Ray resolves first): the floor's chain."""
    return eo.noop_step(config)


def _ray_init() -> None:
    import ray

    ray.init(
        address="local",
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([eo.REPO, os.path.dirname(HERE)])}},
    )
    ray.get(ray.remote(lambda: 1).remote())  # a worker is up before timing


def mode_side(args: argparse.Namespace) -> dict[str, Any]:
    shape = eo.chain_dag if args.shape == "chain" else eo.fanout_dag
    n = args.steps
    if args.impl == "ray":
        import ray

        _ray_init()
        cfgs = [eo.StepConfig(inputs=[], output_path=f"{args.prefix}/s{i}", param=i) for i in range(n)]
        remote = ray.remote(noop_after)
        t0 = time.perf_counter()
        if args.shape == "chain":
            ref = None
            for cfg in cfgs:
                ref = remote.remote(cfg, ref)
            ray.get(ref)
        else:
            ray.get([remote.remote(cfg) for cfg in cfgs])
        return {"run_s": time.perf_counter() - t0}
    if args.impl == "ours":
        from marin_lab.execution import executor_main

        _ray_init()
        steps = shape("ours", n)
        argv = ["--prefix", args.prefix, "--backend", "ray"]
        profiler = _profile_steps() if args.profile_out else None
        t0 = time.perf_counter()
        report = executor_main(steps, description="ray floor", args=argv)
        run_s = time.perf_counter() - t0
        assert len(report.executed) == n, len(report.executed)
        if profiler is not None:
            profiler.dump(args.profile_out)
        return {"run_s": run_s}
    import marin.execution.executor as mx

    eo._marin_ray_init()
    import ray

    ray.get(ray.remote(lambda: 1).remote())
    steps = shape("marin", n)
    ex = mx.Executor(prefix=args.prefix, executor_info_base_path=f"{args.prefix}/experiments")
    t0 = time.perf_counter()
    ex.run(steps)
    return {"run_s": time.perf_counter() - t0}


class _StepProfiles:
    """cProfile of the driver's main thread and of every step thread (a profiler per thread, merged)."""

    def __init__(self) -> None:
        from marin_lab.execution.run.supervisor import StepSupervisor

        self.profiles: list[cProfile.Profile] = []
        self.main = cProfile.Profile()
        run = StepSupervisor.run

        def profiled(supervisor: Any, plan: Any, ps: Any) -> Any:
            p = cProfile.Profile()
            p.enable()
            try:
                return run(supervisor, plan, ps)
            finally:
                p.disable()
                self.profiles.append(p)

        StepSupervisor.run = profiled  # type: ignore[method-assign]
        self.main.enable()

    def dump(self, path: str) -> None:
        self.main.disable()
        stats = pstats.Stats(self.main)
        for p in self.profiles:
            stats.add(p)
        stats.dump_stats(path)


def _profile_steps() -> _StepProfiles:
    return _StepProfiles()


def profile_parts(path: str, steps: int) -> list[str]:
    """The profile's own time (tottime) by part of the executor, per step; and the top functions."""
    stats = pstats.Stats(path)
    parts: collections.Counter[str] = collections.Counter()
    waiting = 0.0
    for (file, _line, func), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if func in ("<method 'acquire' of '_thread.lock' objects>", "<built-in method time.sleep>") or (
            "select" in func or "poll" in func
        ):
            waiting += tottime
            continue
        part = next((name for name, pats in PARTS if any(p in file for p in pats)), None)
        if part is None:
            part = "other marin_lab" if "marin_lab" in file else "other"
        parts[part] += tottime
    total = sum(parts.values())
    lines = [
        f"driver CPU-side time over all threads: {total:.2f} s ({total / steps * 1000:.2f} ms per step); "
        f"waiting (locks, sleeps, polls) {waiting:.2f} s"
    ]
    for part, t in parts.most_common():
        lines.append(f"  {part:<22} {t:7.2f} s  {t / steps * 1000:6.2f} ms/step  {t / total:5.1%}")
    top = sorted(
        (
            (ct, nc, f"{os.path.relpath(file, eo.REPO) if file.startswith(eo.REPO) else file}:{func}")
            for (file, _l, func), (_cc, nc, _tt, ct, _c) in stats.stats.items()  # type: ignore[attr-defined]
            if "marin_lab" in file
        ),
        reverse=True,
    )[:25]
    lines.append("  top marin_lab functions by cumulative time (summed over threads; nested calls count in each):")
    lines += [f"    {ct:7.2f} s  {nc:>7} calls  {name}" for ct, nc, name in top]
    return lines


def driver(args: argparse.Namespace) -> None:
    marin_ok = not args.skip_marin and os.path.exists(os.path.join(args.marin_src, "marin", "execution", "executor.py"))
    work = tempfile.mkdtemp(prefix="ray-floor-")
    eo.HERE = HERE  # eo.Bench.child starts the file named here as the child
    bench = eo.Bench(args, work)
    bench.env["PYTHONPATH"] += os.pathsep + os.path.dirname(HERE)  # Ray workers import the step function
    loads = [os.getloadavg()[0]]
    rows = []
    profile_lines: list[str] = []
    sides = ["ours", "ray"] + (["marin"] if marin_ok else [])
    try:
        for shape in args.shapes.split(","):
            results: dict[str, list[float]] = {s: [] for s in sides}
            for r in range(args.repeats):
                for impl in sides[r % len(sides) :] + sides[: r % len(sides)]:
                    prefix = tempfile.mkdtemp(prefix=f"{impl}-{shape}-", dir=work)
                    res, _ = bench.child(
                        "side",
                        "--impl",
                        impl,
                        "--shape",
                        shape,
                        "--steps",
                        str(args.steps),
                        "--prefix",
                        prefix,
                        timeout=3600,
                    )
                    results[impl].append(res["run_s"])
                    loads.append(os.getloadavg()[0])
                    print(f"  {shape} {impl}: {res['run_s']:.2f} s", flush=True)
                    shutil.rmtree(prefix, ignore_errors=True)
            rows.append((shape, {s: statistics.median(v) for s, v in results.items()}, results))
            if args.profile:
                prefix = tempfile.mkdtemp(prefix=f"profile-{shape}-", dir=work)
                out = os.path.join(work, f"profile-{shape}.pstats")
                bench.child(
                    "side",
                    "--impl",
                    "ours",
                    "--shape",
                    shape,
                    "--steps",
                    str(args.steps),
                    "--prefix",
                    prefix,
                    "--profile-out",
                    out,
                    timeout=3600,
                )
                loads.append(os.getloadavg()[0])
                profile_lines += [
                    f"{shape} (ours under cProfile, {args.steps} steps):",
                    *profile_parts(out, args.steps),
                ]
                if args.keep_profile:
                    shutil.copy(out, args.keep_profile.replace("SHAPE", shape))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    n = args.steps
    print()
    print(
        f"Executor overhead beside Ray's floor: {n} trivial steps on local Ray "
        f"(Marin: {args.marin_src if marin_ok else 'not run'})"
    )
    print(
        f"host {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, medians of "
        f"{args.repeats} (fresh processes, sides alternating); load average (1 min) during the run: "
        f"min {min(loads):.2f}, median {statistics.median(loads):.2f}, max {max(loads):.2f}"
    )
    print()
    print(f"{'shape':<7} {'side':<6} {'run':>9} {'per step':>9} {'over the floor':>15} {'Marin/ours':>10}  runs")
    for shape, med, results in rows:
        floor = med["ray"]
        for side in sides:
            over = f"{(med[side] - floor) / n * 1000:.2f} ms" if side != "ray" else "-"
            ratio = f"{med['marin'] / med['ours']:.2f}x" if side == "ours" and "marin" in med else "-"
            print(
                f"{shape:<7} {side:<6} {eo.fmt_s(med[side]):>9} {med[side] / n * 1000:>7.2f}ms {over:>15} "
                f"{ratio:>10}  {[round(x, 2) for x in results[side]]}"
            )
    if profile_lines:
        print()
        print("\n".join(profile_lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shapes", default="chain,fanout")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--keep-profile", default="", help="copy each profile here (SHAPE replaced by the shape)")
    p.add_argument("--marin-src", default=os.environ.get("MARIN_SRC", eo.DEFAULT_MARIN_SRC))
    p.add_argument("--skip-marin", action="store_true")
    p.add_argument("--child", choices=["side"])
    p.add_argument("--impl", choices=["ours", "ray", "marin"], default="ours")
    p.add_argument("--shape", default="chain")
    p.add_argument("--prefix", default="")
    p.add_argument("--profile-out", default="")
    args = p.parse_args()
    args.marin_src = os.path.abspath(args.marin_src)
    if args.child:
        if args.impl == "marin":
            sys.path.insert(0, args.marin_src)
        print("RESULT " + json.dumps(mode_side(args)), flush=True)
        return
    driver(args)


if __name__ == "__main__":
    main()
