"""`marin-lab launch`: run an experiment's driver on a Ray cluster as a Ray Job, restarted when it dies.

    marin-lab launch experiments/x.py --address 10.0.0.2:6379 --prefix gs://b/p [--max_restarts 3] [--follow]
    marin-lab launch --status RUN --prefix gs://b/p [--address 10.0.0.2:6379]
    marin-lab launch --stop RUN --address 10.0.0.2:6379 --prefix gs://b/p

Everything is checked before anything starts (the file, the prefix, the budget, the address, the
cluster's resources, its dashboard): bad input is one line and leaves nothing behind. Then the run's
record is written under the prefix and the supervisor (cluster/supervisor.py) is submitted through
Ray Jobs (`JobSubmissionClient`, at the dashboard of the cluster `--address` names) with the working
tree as its runtime environment (`working_dir`, minus `.git`, `.venv` and what `.gitignore` names).
The job's submission id is the run id and its metadata names the run, so `ray job list`, `ray job
logs RUN`, `ray job stop RUN` and the dashboard's job view all see it. From there on nothing depends
on this terminal.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import socket
import sys
import time
import uuid
from typing import Any

from marin_lab.cluster.errors import ClusterError
from marin_lab.cluster.launch_state import (
    TERMINAL,
    LaunchRecordError,
    now_iso,
    read_state,
    run_folder,
    write_state,
)
from marin_lab.cluster.supervisor import NAMESPACE, drop_handoff, put_handoff
from marin_lab.io.fs import is_local, remove
from marin_lab.io.secrets import scrub_text, scrubber_with, secrets_in_args

HEAD_RESOURCE = "node:__internal_head__"
EXCLUDES = [".git", ".venv", "__pycache__", "*.pyc", "marin_store"]
CONNECT_TIMEOUT_S = 5.0
STOP_WAIT_S = 30
"""Seconds Ray Jobs waits after SIGTERM before it kills the supervisor (RAY_JOB_STOP_WAIT_TIME_S):
time to stop the driver and write STOPPED."""
JOB_DONE = ("SUCCEEDED", "FAILED", "STOPPED")
"""Ray's terminal job states."""


class LaunchError(ClusterError, ValueError):
    """A launch refused before anything started (bad file, prefix, budget, address or resources)."""


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
"""A client's HTTP/2 connection preface and an empty SETTINGS frame: a gRPC server (Ray's GCS)
answers with a SETTINGS frame of its own."""


def _check_address(address: str) -> None:
    """Fail in seconds, not after Ray's minute of reconnect attempts, when nothing listens there,
    and not never when something else does (`ray.init` retries a port that is not Ray without end)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise LaunchError(f"--address {address!r} is not HOST:PORT (the Ray head's GCS address, e.g. 10.0.0.2:6379)")
    try:
        conn = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
    except OSError as err:
        raise LaunchError(
            f"--address {address}: no Ray cluster answers there ({err.strerror or err}); "
            "start one with `ray start --head` or check the head's address and port"
        ) from None
    head = b""
    try:
        conn.settimeout(CONNECT_TIMEOUT_S)
        conn.sendall(_HTTP2_PREFACE)
        while len(head) < 9 and (chunk := conn.recv(9 - len(head))):
            head += chunk
    except OSError:
        pass
    finally:
        conn.close()
    if len(head) < 9 or head[3] != 0x04:  # the frame header of a SETTINGS frame
        raise LaunchError(
            f"--address {address}: something listens there but it is not a Ray head (no gRPC answer "
            f"within {CONNECT_TIMEOUT_S:g} s); give the head's GCS address (port 6379 unless "
            "`ray start --head --port` said otherwise)"
        )


def _connect(address: str) -> Any:
    import ray

    _check_address(address)
    if not ray.is_initialized():
        ray.init(
            address=address,
            namespace=NAMESPACE,
            log_to_driver=False,
            configure_logging=False,
            logging_level=logging.ERROR,
        )
    return ray


def _parse_resources(text: str | None) -> dict[str, float]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise LaunchError(f"--driver_resources {text!r} is not JSON ({err.msg}); e.g. '{{\"CPU\": 1}}'") from None
    if not isinstance(value, dict) or not all(isinstance(v, int | float) and v >= 0 for v in value.values()):
        raise LaunchError(
            f"--driver_resources {text!r}: give an object of resource name -> amount, e.g. '{{\"CPU\": 1}}'"
        )
    return {str(k): float(v) for k, v in value.items()}


def _check_resources(ray: Any, need: dict[str, float]) -> None:
    total = ray.cluster_resources()
    if total.get(HEAD_RESOURCE, 0) <= 0:
        raise LaunchError(
            "the cluster reports no head node (resource node:__internal_head__); the supervisor "
            "must live there: use a cluster started with `ray start --head`"
        )
    missing = {k: v for k, v in need.items() if total.get(k, 0) < v}
    if missing:
        have = ", ".join(f"{k}={v:g}" for k, v in sorted(total.items()) if not k.startswith("node:")) or "nothing"
        raise LaunchError(
            f"--driver_resources {json.dumps(missing)}: no node of this cluster "
            f"has that (it has {have}); "
            "add such a node or ask for less"
        )


def _driver_argv(python: str, script: str, script_args: list[str], prefix: str) -> list[str]:
    argv = [python, script, *script_args]
    flags = {a.split("=", 1)[0] for a in script_args}
    if "--prefix" not in flags:
        argv += ["--prefix", prefix]
    if "--backend" not in flags:
        argv += ["--backend", "ray"]  # the steps run on the cluster the driver was placed in
    return argv


def job_client(address: str) -> Any:
    """The Ray Jobs client of the cluster at `address`, at the dashboard that cluster reports."""
    ray = _connect(address)
    from ray.job_submission import JobSubmissionClient

    url = ray._private.worker.global_worker.node.address_info.get("webui_url")
    if not url:
        raise LaunchError(
            f"--address {address}: the cluster runs no dashboard, which Ray Jobs needs; start its head "
            "with `ray start --head --include-dashboard=true`"
        )
    try:
        return JobSubmissionClient(f"http://{url}")
    except ConnectionError as err:
        raise LaunchError(
            f"--address {address}: the cluster's dashboard at http://{url} does not answer ({err})"
        ) from None


def launch(
    script: str,
    script_args: list[str],
    *,
    address: str,
    prefix: str,
    max_restarts: int = 3,
    driver_resources: str | None = None,
    working_dir: str | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """Validate, then start the supervisor; returns the run's initial record."""
    if max_restarts < 1:
        raise LaunchError(
            f"--max_restarts {max_restarts}: a launched run must be allowed at least one restart; "
            f"to run once with nobody restarting it, run `python {script}` directly"
        )
    if not prefix:
        raise LaunchError(
            "no prefix: pass --prefix (or set MARIN_PREFIX) to storage every node reaches, e.g. gs://bucket/path"
        )
    if is_local(prefix):
        prefix = os.path.abspath(prefix)  # a local prefix serves a cluster on one machine only
    tree = os.path.abspath(working_dir or os.getcwd())
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        raise LaunchError(f"{script}: no such experiment file")
    if os.path.commonpath([tree, path]) != tree:
        raise LaunchError(
            f"{script} is outside the working tree {tree} that is shipped to the cluster; "
            "run from the repository root or pass --working_dir"
        )
    resources = _parse_resources(driver_resources)
    ray = _connect(address)
    _check_resources(ray, resources)

    stem = os.path.splitext(os.path.basename(script))[0]
    run_id = f"{stem}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    argv = _driver_argv(python or sys.executable, os.path.relpath(path, tree), script_args, prefix)
    # The record shows the arguments scrubbed; the driver gets them as given (held by the supervisor
    # only, in memory), and the supervisor the secrets they carry, to scrub them wherever it writes:
    # the cluster's nodes do not have this terminal's environment.
    secrets = secrets_in_args(argv)
    scrub = scrubber_with(secrets)
    state = {
        "run_id": run_id,
        "script": os.path.relpath(path, tree),
        "script_args": [scrub(a) for a in script_args],
        "argv": [scrub(a) for a in argv],
        "prefix": prefix,
        "max_restarts": max_restarts,
        "driver_resources": resources,
        "status": "STARTING",
        "created": now_iso(),
        "attempts": [],
    }
    client = job_client(address)
    interpreter = shlex.quote(python or sys.executable)
    # The cluster's own GCS address, not the RAY_ADDRESS=auto Ray Jobs gives an entrypoint: "auto"
    # is the latest cluster started on the head's machine, another one where several share it.
    gcs = ray.get_runtime_context().gcs_address
    entrypoint = (
        f"{interpreter} -m marin_lab.cluster.supervisor {run_id} --prefix {shlex.quote(prefix)} --address {gcs}"
    )
    state["job"] = {"submission_id": run_id, "dashboard": client.get_address(), "entrypoint": entrypoint}
    write_state(prefix, state)
    try:
        put_handoff(run_id, argv, secrets, resources)
        client.submit_job(
            entrypoint=entrypoint,
            submission_id=run_id,
            runtime_env={
                "working_dir": tree,
                "excludes": EXCLUDES,
                "env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(STOP_WAIT_S)},
            },
            metadata={"marin_run_id": run_id, "marin_script": state["script"], "marin_prefix": prefix},
        )
    except Exception as err:  # e.g. the tree is too large to upload: leave no half-started run
        remove(run_folder(prefix, run_id), recursive=True)
        drop_handoff(run_id)
        raise LaunchError(f"could not submit {script} as a Ray job on {address}: {err}") from err
    return state


def status(prefix: str, run_id: str) -> dict[str, Any]:
    try:
        state = read_state(prefix, run_id)
    except LaunchRecordError as err:
        raise LaunchError(str(err)) from None
    if state is None:
        raise LaunchError(f"no launched run {run_id!r} under {prefix} (launches/{run_id}/launch.json)")
    return state


def job_status(client: Any, run_id: str) -> str | None:
    """The run's Ray job state (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED); None when the cluster has no such job."""
    try:
        return str(client.get_job_status(run_id).value)
    except RuntimeError:  # the job server answers 404 for a job it does not know
        return None


def stop(address: str, prefix: str, run_id: str, *, timeout_s: float = 60.0) -> dict[str, Any]:
    """Stop the run's Ray job (its supervisor stops the driver and records STOPPED); the final record."""
    state = status(prefix, run_id)
    if state.get("status") in TERMINAL:
        return state
    client = job_client(address)
    if job_status(client, run_id) is None:
        raise LaunchError(
            f"run {run_id} is {state.get('status')} in its record but the cluster at {address} has no Ray job "
            "of that id (a different cluster, or the cluster restarted)"
        )
    client.stop_job(run_id)
    deadline = time.monotonic() + timeout_s
    while (state := status(prefix, run_id)).get("status") not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.3)
    return state


def follow(client: Any, prefix: str, run_id: str, *, out: Any = sys.stdout, poll_s: float = 0.5) -> dict[str, Any]:
    """Print the run's Ray job log as it grows (every attempt's output, a line at each restart) until
    the job ends; the run's final record."""
    shown = 0
    while True:
        done = job_status(client, run_id) in JOB_DONE
        text = client.get_job_logs(run_id)
        if len(text) > shown:  # scrubbed by the supervisor; by this terminal's secrets too
            out.write(scrub_text(text[shown:]))
            shown = len(text)
            out.flush()
        if done:
            return status(prefix, run_id)
        time.sleep(poll_s)
