"""Reruns against a bucket: a dry run and a no-op rerun of finished work on GCS, with a real round trip.

Question: how long does a rerun of an experiment whose steps all succeeded take when every request to
the bucket costs what it costs against real GCS (30-50 ms from a laptop or another region), and how
many requests does it make per step? Ours (`marin_lab.execution.executor_main`) beside Marin's
Ray-era executor on the same DAG, each on its own prefix of the same emulator.

How the latency is made: the GCS emulator (the bundled fake-gcs-server binary, in memory) sits
behind a TCP proxy on 127.0.0.1 (asyncio, in this process) that holds each HTTP request `--latency-ms`
before forwarding it: a request is the client's bytes after the server last answered on that
connection, so one request/response exchange costs one delay, whatever the connection reuse. The
proxy also reads each request line, so the table gives the requests each run made, by kind
(download = a read of an object, list, metadata = an object's info, upload, delete).

The DAG is benchmarks/executor_overhead.py's (`build_dag`: 10 layers, every step after the first
layer reading 1-2 steps of the layer before, one versioned field each): 1,000 steps (10 x 100) and
10,000 (10 x 1,000). "Finished" state is written straight to the emulator (no latency) by each
executor's own status writer; ours also gets a step record beside every SUCCESS (the bytes of a real
record, taken from a one-step run on local disk), because our executor reads it: a SUCCESS beside a
damaged record is CORRUPT. Marin's record is not read by its rerun, so it gets none.

Each figure is a fresh process (`--child`), timed around the executor call (`run`) and whole
(`whole`: Python start, imports, Ray start for Marin); the sides alternate run by run. Goal: a
1,000-step no-op rerun in < 5 s at 50 ms per request, and >= 5x Marin's.

    python benchmarks/rerun_bucket.py [--steps 1000,10000] [--latency-ms 50] [--repeats 3]
        [--marin-src DIR] [--skip-marin] [--marin-max-steps 1000]

With MARIN_BENCH_PROFILE=DIR set, each of our runs also leaves a cProfile of its executor call in DIR.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import cProfile
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))

import executor_overhead as eo  # noqa: E402 (the DAG, the emulator, the child-process harness)

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # see shared ENVIRONMENT.md traps


# ------------------------------------------------------------------------------------------------
# The latency proxy


def request_kind(line: bytes) -> str:
    """A JSON-API request line as what it does to the bucket."""
    try:
        method, target = line.decode("latin-1").split(" ")[:2]
    except ValueError:
        return "other"
    if method == "GET" and target.startswith("/download/"):
        return "download"
    if target.startswith("/upload/"):
        return "upload"
    if method == "DELETE":
        return "delete"
    path = target.split("?", 1)[0]
    if method == "GET" and re.fullmatch(r"/storage/v1/b/[^/]+/o", path):
        return "list"
    if method == "GET" and re.fullmatch(r"/storage/v1/b/[^/]+/o/.+", path):
        return "metadata"
    return f"{method.lower()} other"


class LatencyProxy:
    """127.0.0.1:port -> the emulator, each request held `latency_s` first; counts requests by kind."""

    def __init__(self, upstream_port: int, latency_s: float):
        self.upstream_port, self.latency_s = upstream_port, latency_s
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.port = 0

        async def start() -> None:
            server = await asyncio.start_server(self._client, "127.0.0.1", 0, backlog=1024)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())
            self._loop.run_forever()

        threading.Thread(target=run, daemon=True, name="latency-proxy").start()
        ready.wait(10)

    def take_counts(self) -> dict[str, int]:
        with self._lock:
            out = dict(self.counts)
            self.counts.clear()
        return out

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        answered = [True]  # the server answered since the client last sent: the next bytes start a request

        async def client_to_server() -> None:
            while data := await reader.read(65536):
                if answered[0]:
                    answered[0] = False
                    with self._lock:
                        self.counts[request_kind(data.split(b"\r\n", 1)[0])] += 1
                    await asyncio.sleep(self.latency_s)
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def server_to_client() -> None:
            while data := await up_reader.read(65536):
                answered[0] = True
                writer.write(data)
                await writer.drain()
            writer.close()

        await asyncio.gather(client_to_server(), server_to_client(), return_exceptions=True)


# ------------------------------------------------------------------------------------------------
# Child modes (a fresh process each; one RESULT line)


def record_template(work: str) -> tuple[bytes, dict[str, Any]]:
    """The record and SUCCESS status of one trivial step really run on local disk."""
    from marin_lab.execution import executor_main

    prefix = os.path.join(work, "template")
    steps = eo.fanout_dag("ours", 1)
    executor_main(steps, description="record template", args=["--prefix", prefix, "--backend", "local"])
    (folder,) = [p for p in Path(prefix, "fan").iterdir() if p.is_dir()]
    return (folder / ".executor_info").read_bytes(), json.loads((folder / ".executor_status").read_text())


def mode_seed(args: argparse.Namespace) -> dict[str, Any]:
    steps = eo.build_dag(args.impl, int(args.steps), 10)
    if args.impl == "ours":
        from marin_lab.execution import Executor, ExecutorMainConfig
        from marin_lab.execution.plan.hashing import unversioned_fingerprint
        from marin_lab.execution.state.status import Status, info_url, write_status
        from marin_lab.io.fs import atomic_write_bytes

        record, status = record_template(args.work)
        plan = Executor(ExecutorMainConfig(prefix=args.prefix, backend="local")).plan(steps)
        extra = {k: v for k, v in status.items() if k in ("duration_s", "files", "bytes", "code_fingerprint")}

        def mark(ps: Any) -> None:
            atomic_write_bytes(info_url(ps.output_path), record)
            write_status(
                ps.output_path,
                Status.SUCCESS,
                attempt=1,
                driver="benchmark-seed",
                config_fingerprint=unversioned_fingerprint(ps.scan.unversioned),
                **extra,
            )

        todo = list(plan.steps)
    else:
        from marin.execution.executor import Executor
        from marin.execution.executor_step_status import STATUS_SUCCESS, append_status, get_status_path

        eo._marin_ray_init()
        ex = Executor(prefix=args.prefix, executor_info_base_path=os.path.join(args.prefix, "experiments"))
        for s in steps:
            ex.compute_version(s, is_pseudo_dep=False)

        def mark(step: Any) -> None:
            append_status(get_status_path(ex.output_paths[step]), STATUS_SUCCESS)

        todo = list(ex.steps)
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        list(pool.map(mark, todo))
    return {"marked": len(todo)}


def mode_run(args: argparse.Namespace) -> dict[str, Any]:
    steps = eo.build_dag(args.impl, int(args.steps), 10)
    dry = args.what == "dry"
    if args.impl == "ours":
        from marin_lab.execution import executor_main

        argv = ["--prefix", args.prefix, "--backend", "local"] + (["--dry_run", "true"] if dry else [])
        profile = os.environ.get("MARIN_BENCH_PROFILE")  # a folder: the executor call's cProfile, per run
        profiler = cProfile.Profile() if profile else None
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        report = executor_main(steps, description="rerun against a bucket", args=argv)
        run_s = time.perf_counter() - t0
        if profiler is not None and profile:
            profiler.disable()
            os.makedirs(profile, exist_ok=True)
            profiler.dump_stats(os.path.join(profile, f"{args.what}-{args.steps}-{time.monotonic_ns()}.prof"))
        if not dry:
            assert not report.executed, f"a no-op rerun executed {len(report.executed)} steps"
        else:
            runs = [d for d in report.decisions if d.action != "skip"]
            assert not runs, f"the dry run would run {len(runs)} steps: {runs[0].reason}"
    else:
        import marin.execution.executor as mx

        eo._marin_ray_init()
        sys.argv = [sys.argv[0], "--prefix", args.prefix] + (["--dry_run", "True"] if dry else [])
        t0 = time.perf_counter()
        mx.executor_main(steps=steps, description="rerun against a bucket")
        run_s = time.perf_counter() - t0
    return {"run_s": run_s}


# ------------------------------------------------------------------------------------------------
# The driver


def driver(args: argparse.Namespace) -> None:
    marin_ok = not args.skip_marin and os.path.exists(os.path.join(args.marin_src, "marin", "execution", "executor.py"))
    work = tempfile.mkdtemp(prefix="rerun-bucket-")
    eo.HERE = HERE  # eo.Bench.child starts the file named here as the child
    bench = eo.Bench(args, work)
    loads = [os.getloadavg()[0]]
    rows: list[dict[str, Any]] = []
    emulator, url = eo.start_gcs_emulator()
    upstream_port = int(url.rsplit(":", 1)[1])
    proxy = LatencyProxy(upstream_port, args.latency_ms / 1000)
    try:
        for n in [int(x) for x in args.steps.split(",")]:
            sides = ["ours"] + (["marin"] if marin_ok and n <= args.marin_max_steps else [])
            for impl in sides:  # seeded straight to the emulator: no latency
                bench.env["STORAGE_EMULATOR_HOST"] = url
                eo.make_bucket(url, f"rb-{impl}-{n}")
                t0 = time.perf_counter()
                bench.child(
                    "seed",
                    "--impl",
                    impl,
                    "--prefix",
                    f"gs://rb-{impl}-{n}/store",
                    "--steps",
                    str(n),
                    "--work",
                    work,
                    timeout=3600,
                )
                print(f"seeded {impl} {n} steps in {time.perf_counter() - t0:.1f} s", flush=True)
            bench.env["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{proxy.port}"
            for what in ("dry", "noop"):
                results: dict[str, list[tuple[float, float, dict[str, int]]]] = {s: [] for s in sides}
                for r in range(args.repeats):
                    for impl in sides[r % len(sides) :] + sides[: r % len(sides)]:
                        proxy.take_counts()
                        res, wall = bench.child(
                            "run",
                            "--impl",
                            impl,
                            "--what",
                            what,
                            "--prefix",
                            f"gs://rb-{impl}-{n}/store",
                            "--steps",
                            str(n),
                            timeout=3600,
                        )
                        counts = proxy.take_counts()
                        results[impl].append((res["run_s"], wall, counts))
                        loads.append(os.getloadavg()[0])
                        print(
                            f"  {what} {n} {impl}: run {res['run_s']:.2f} s, whole {wall:.2f} s, requests {counts}",
                            flush=True,
                        )
                for impl, runs in results.items():
                    counts = runs[-1][2]
                    rows.append(
                        {
                            "what": what,
                            "steps": n,
                            "impl": impl,
                            "run_s": statistics.median(r[0] for r in runs),
                            "whole_s": statistics.median(r[1] for r in runs),
                            "runs": [round(r[0], 2) for r in runs],
                            "requests": sum(counts.values()),
                            "by_kind": counts,
                        }
                    )
    finally:
        proxy._loop.call_soon_threadsafe(proxy._loop.stop)
        emulator.kill()
        emulator.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(
        f"Reruns against a bucket: the GCS emulator behind a {args.latency_ms:g} ms-per-request proxy; "
        f"marin_lab vs Marin's Ray-era executor ({args.marin_src if marin_ok else 'not run'})"
    )
    print(
        f"host {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, medians of "
        f"{args.repeats} (fresh processes, sides alternating); load average (1 min) during the run: "
        f"min {min(loads):.2f}, median {statistics.median(loads):.2f}, max {max(loads):.2f}"
    )
    print()
    print(
        f"{'what':<6} {'steps':>6} {'side':<6} {'run':>9} {'whole':>9} {'Marin/ours':>10} "
        f"{'requests':>9} {'per step':>8}  by kind"
    )
    for row in rows:
        peer = next(
            (p for p in rows if p["impl"] == "marin" and p["what"] == row["what"] and p["steps"] == row["steps"]), None
        )
        ratio = f"{peer['run_s'] / row['run_s']:.1f}x" if peer and row["impl"] == "ours" else "-"
        print(
            f"{row['what']:<6} {row['steps']:>6} {row['impl']:<6} {eo.fmt_s(row['run_s']):>9} "
            f"{eo.fmt_s(row['whole_s']):>9} {ratio:>10} {row['requests']:>9} "
            f"{row['requests'] / row['steps']:>8.2f}  {json.dumps(row['by_kind'], sort_keys=True)}  runs {row['runs']}"
        )
    print()
    print(
        "- run: the executor call (ours: executor_main; Marin: executor_main after its ray.init); whole: the "
        "process. Requests: those of the last repeat, counted at the proxy."
    )
    print("- Marin's dry run and rerun read each step's status one after the other (one round trip each).")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", default="1000,10000")
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--marin-src", default=os.environ.get("MARIN_SRC", eo.DEFAULT_MARIN_SRC))
    p.add_argument("--skip-marin", action="store_true")
    p.add_argument(
        "--marin-max-steps",
        type=int,
        default=1000,
        help="Marin's side only up to this many steps (its rerun reads one status at a time)",
    )
    p.add_argument("--child", choices=["seed", "run"])
    p.add_argument("--impl", choices=["ours", "marin"], default="ours")
    p.add_argument("--what", choices=["dry", "noop"], default="noop")
    p.add_argument("--prefix", default="")
    p.add_argument("--work", default="")
    args = p.parse_args()
    args.marin_src = os.path.abspath(args.marin_src)
    if args.child:
        if args.impl == "marin":
            sys.path.insert(0, args.marin_src)
        result = {"seed": mode_seed, "run": mode_run}[args.child](args)
        print("RESULT " + json.dumps(result), flush=True)
        return
    driver(args)


if __name__ == "__main__":
    main()
