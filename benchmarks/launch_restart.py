"""Time from a killed driver to the resumed pipeline under `marin-lab launch`.

Question: when a launched experiment's driver is killed (kill -9) in the middle of a step, how long
until the supervisor has a new driver running that step again, with nobody acting?

A local three-node Ray (`ray.cluster_utils.Cluster`: a head holding only the supervisor, two nodes
that can host the driver), the three-step `tests/launch_experiment.py` (its middle step waits on a
gate file). Each round launches into a fresh prefix, waits until the middle step runs, kills the
driver and measures:
  detect   kill -> the supervisor records the attempt as died
  restart  kill -> the supervisor records the next attempt started (its driver placed and running)
  resumed  kill -> the middle step starts again in the new driver (plan, records read, lease taken)
then opens the gate and waits for SUCCEEDED. Printed: each figure per round, medians, and the load.

    python benchmarks/launch_restart.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep every Ray address on 127.0.0.1
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MARIN_RAY_DASHBOARD", "0")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from marin_lab.cluster.launch import launch  # noqa: E402
from marin_lab.cluster.launch_state import TERMINAL, read_state  # noqa: E402
from marin_lab.ray_niceness import run_workers_at_normal_priority  # noqa: E402

SCRIPT = str(REPO / "tests" / "launch_experiment.py")


def _wait(cond, timeout_s=300.0, poll_s=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(poll_s)
    raise TimeoutError("condition not met")


def _lines(path):
    return open(path).read().splitlines() if os.path.exists(path) else []


def _ts(iso):
    return datetime.datetime.fromisoformat(iso).timestamp()


def one_round(address, root, n):
    prefix, events, gate = f"{root}/p{n}", f"{root}/e{n}", f"{root}/g{n}"
    run_id = launch(
        SCRIPT,
        [events, gate],
        address=address,
        prefix=prefix,
        max_restarts=2,
        driver_resources='{"driver": 1}',
        working_dir=str(REPO),
    )["run_id"]
    _wait(lambda: any(x.startswith("start gated") for x in _lines(events)))
    pid = _wait(lambda: read_state(prefix, run_id)["attempts"][0].get("pid"))
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    _wait(lambda: (s := read_state(prefix, run_id)) and len(s["attempts"]) >= 2 and s)
    _wait(lambda: sum(x.startswith("start gated") for x in _lines(events)) >= 2)
    resumed = time.time()
    open(gate, "w").close()
    final = _wait(lambda: (s := read_state(prefix, run_id))["status"] in TERMINAL and s)
    assert final["status"] == "SUCCEEDED", final
    first, second = final["attempts"][:2]
    return {
        "detect": _ts(first["ended"]) - killed,
        "restart": _ts(second["started"]) - killed,
        "resumed": resumed - killed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    run_workers_at_normal_priority()
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=2, resources={"driver": 1})
    ray.init(address=cluster.address, logging_level="error", log_to_driver=False)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="launch-bench-") as root:
            for n in range(args.rounds):
                load = Path("/proc/loadavg").read_text().split()[0]
                row = one_round(cluster.address, root, n)
                rows.append(row)
                print(
                    f"round {n + 1}: detect {row['detect']:.2f} s, restart {row['restart']:.2f} s, "
                    f"resumed {row['resumed']:.2f} s (load {load})",
                    flush=True,
                )
    finally:
        ray.shutdown()
        cluster.shutdown()
    for key in ("detect", "restart", "resumed"):
        print(f"median {key}: {statistics.median(r[key] for r in rows):.2f} s")
    print(f"load after: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
