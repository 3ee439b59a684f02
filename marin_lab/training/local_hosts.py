"""Run a step function (`train_lm`, `finetune_lm`, ...) as several processes on this machine, each
standing in for one host.

Each process gets `XLA_FLAGS=--xla_force_host_platform_device_count=N` (N CPU devices) and the
`MARIN_*` variables of `training.distributed`, exactly what the slice runner gives a TPU host, so
the step function's `Trainer` joins one JAX cluster of hosts x N devices with real cross-process collectives (gloo).
Used by the multi-host tests, `experiments/tiny_multihost.py` and the multi-process benchmark.

    python -m marin_lab.training.local_hosts CONFIG.pkl OUT.json   # one host; env says which
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from marin_lab.host_env import process_env


@dataclasses.dataclass
class HostsResult:
    """What a local multi-process run left: exit codes, the summary of process 0, stderr tails."""

    returncodes: list[int]
    summary: dict[str, Any] | None
    stderr_tails: list[str]

    @property
    def ok(self) -> bool:
        return all(rc == 0 for rc in self.returncodes)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_hosts(
    config: Any,
    *,
    fn: Callable[[Any], dict[str, Any]],
    hosts: int,
    devices_per_host: int,
    workdir: str,
    extra_env: Mapping[str, str] | None = None,
    only: Sequence[int] | None = None,
) -> list[subprocess.Popen]:
    """Start one process per host (or only the listed ones) running `fn(config)` (a module-level
    step function: it is pickled by name)."""
    os.makedirs(workdir, exist_ok=True)
    config_path = os.path.join(workdir, f"config-{time.monotonic_ns()}.pkl")
    with open(config_path, "wb") as f:
        pickle.dump((fn, config), f)
    coordinator = f"127.0.0.1:{free_port()}"
    procs = []
    for pid in range(hosts) if only is None else only:
        env = {
            **os.environ,
            **(extra_env or {}),
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}",
        }
        if hosts > 1:
            env.update(process_env(coordinator, hosts, pid))
        out = os.path.join(workdir, f"host-{pid}.json")
        err = open(os.path.join(workdir, f"host-{pid}.stderr"), "w")  # noqa: SIM115 - closed by wait_hosts
        proc = subprocess.Popen(
            [sys.executable, "-m", "marin_lab.training.local_hosts", config_path, out],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        proc.marin_files = (out, err)  # type: ignore[attr-defined]
        procs.append(proc)
    return procs


def wait_hosts(procs: Sequence[subprocess.Popen], timeout_s: float = 900) -> HostsResult:
    """Wait for every host; if one fails, stop the others (as the slice runner does)."""
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.2)
    codes, tails, summary = [], [], None
    for i, p in enumerate(procs):
        out, err = p.marin_files  # type: ignore[attr-defined]
        err.close()
        codes.append(p.returncode)
        with open(err.name) as f:
            tails.append(f.read()[-20000:])
        if i == 0 and os.path.exists(out):
            with open(out) as f:
                summary = json.load(f)
    return HostsResult(codes, summary, tails)


def run_hosts(
    config: Any,
    *,
    fn: Callable[[Any], dict[str, Any]],
    hosts: int,
    devices_per_host: int,
    workdir: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout_s: float = 900,
) -> HostsResult:
    """`fn(config)` on hosts x devices_per_host local CPU devices; waits for all."""
    workdir = workdir or tempfile.mkdtemp(prefix="marin-hosts-")
    procs = start_hosts(
        config, hosts=hosts, devices_per_host=devices_per_host, workdir=workdir, extra_env=extra_env, fn=fn
    )
    return wait_hosts(procs, timeout_s)


def _main(config_path: str, out_path: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open(config_path, "rb") as f:
        fn, config = pickle.load(f)
    summary = fn(config)
    with open(out_path, "w") as f:
        json.dump(summary, f, default=str)


if __name__ == "__main__":
    _main(*sys.argv[1:3])
