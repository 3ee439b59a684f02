"""`marin-lab launch` on a local multi-node Ray cluster: a Ray job whose driver comes back by itself.

One cluster for the module (a head that holds only the supervisor, the job's entrypoint, two worker
nodes that can host the driver and run steps), every address on 127.0.0.1 and the dashboard's job
server reachable there (`loopback_cluster_env`). The driver is killed mid-pipeline (kill -9 of its
process), and separately the node it runs on is removed; each time the experiment finishes with
nobody acting, the step that had finished is not run again, and the outputs are the same bytes.
Ray's own client lists the run's job with the run id in its metadata, and `--stop` stops that job.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from marin_lab.cli import main as cli_main
from marin_lab.cluster.launch import LaunchError, follow, job_client, job_status, launch, status
from marin_lab.cluster.launch_state import TERMINAL, attempt_log_url, read_state
from marin_lab.io.fs import read_text

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "tests", "launch_experiment.py")
DRIVER = '{"driver": 1}'


def _starting(start, tries: int = 3):
    """Ray 2.60 gives a starting node a fixed 30 s to register; on a machine at load 40 that is
    sometimes not enough (or a port it was given was taken meanwhile). Starting again is what a
    person would do; anything else is raised."""
    for i in range(tries):
        try:
            return start()
        except Exception as err:
            if not ("timed out during startup" in str(err) or "already occupied" in str(err)) or i == tries - 1:
                raise


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def loopback_cluster_env():
    """Every Ray address on 127.0.0.1: with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 Ray takes the
    loopback address as the node's own instead of rewriting it to the host's IP. The variable is
    inherited by every process the nodes start (raylets, dashboard, job entrypoints, drivers); this
    process read it when it imported Ray, so its constant is set too."""
    from ray._private import ray_constants

    saved = os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    yield
    ray_constants.ENABLE_RAY_CLUSTER = saved[1]
    if saved[0] is None:
        os.environ.pop(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, None)
    else:
        os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = saved[0]


@pytest.fixture(scope="module")
def cluster(loopback_cluster_env):
    import ray
    from ray.cluster_utils import Cluster

    ray.shutdown()  # another module's local Ray: this module needs its own multi-node one
    head = {
        "num_cpus": 0,
        "node_ip_address": "127.0.0.1",
        # The job server: the dashboard and the head's agent on ports of their own (the defaults,
        # 8265 and 52365, may be held by another Ray on the machine: then no job can be submitted).
        "include_dashboard": True,
        "dashboard_host": "127.0.0.1",
        "_system_config": {
            "health_check_initial_delay_ms": 0,
            "health_check_period_ms": 300,
            "health_check_timeout_ms": 10_000,
            "health_check_failure_threshold": 3,
        },
    }
    c = Cluster(initialize_head=False)
    # Fresh ports on every try: a head that timed out may still hold the last ones.
    _starting(lambda: c.add_node(**head, dashboard_port=_free_port(), dashboard_agent_listen_port=_free_port()))
    nodes = [
        _starting(lambda: c.add_node(num_cpus=2, resources={"driver": 1}, node_ip_address="127.0.0.1"))
        for _ in range(2)
    ]
    ray.init(address=c.address, logging_level="error", log_to_driver=False)
    yield c, nodes
    ray.shutdown()
    c.shutdown()


def _wait(what: str, cond, timeout_s: float = 90.0, explain=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s" + (f"\n{explain()}" if explain else ""))


def _job_says(c, run_id: str) -> str:
    """The run's Ray job as the job server tells it: its state, message and log."""
    client = job_client(c.address)
    info = client.get_job_info(run_id)
    return f"job {run_id}: {info.status} {info.message}\n{client.get_job_logs(run_id)}"


def _events(path: str) -> list[str]:
    """`start NAME` / `end NAME` lines (the pids dropped)."""
    return [line.rsplit(" ", 1)[0] for line in _raw_events(path)]


def _raw_events(path: str) -> list[str]:
    return Path(path).read_text().splitlines() if os.path.exists(path) else []


def _gone(pid: int) -> bool:
    """No such process, or a zombie (its parent died with the node and nobody reaped it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _start(c, tmp_path, name):
    prefix, events, gate = str(tmp_path / name), str(tmp_path / f"{name}.events"), str(tmp_path / f"{name}.gate")
    state = launch(
        SCRIPT,
        [events, gate],
        address=c.address,
        prefix=prefix,
        max_restarts=2,
        driver_resources=DRIVER,
        working_dir=REPO,
    )
    run_id = state["run_id"]
    # A job starts its entrypoint, which places the driver, which runs a step first: minutes on a
    # loaded 2-core machine.
    _wait(
        "the gated step starts (first done, driver mid-pipeline)",
        lambda: "start gated" in _events(events) and "end first" in _events(events),
        240,
        lambda: _job_says(c, run_id),
    )
    attempt = _wait(
        "attempt 1 records its driver pid",
        lambda: (
            (read_state(prefix, run_id) or {"attempts": [{}]})["attempts"][0].get("pid")
            and read_state(prefix, run_id)["attempts"][0]
        ),
    )
    return prefix, events, gate, run_id, attempt


def _finish(prefix, events, gate, run_id):
    _wait("attempt 2 starts", lambda: len(read_state(prefix, run_id)["attempts"]) >= 2)
    # The interrupted step's first execution stops once its driver is gone (its guard, or Ray
    # killing a dead driver's tasks); only then may the gate open, or it could still finish.
    old = next(int(line.split()[-1]) for line in _raw_events(events) if line.startswith("start gated"))
    _wait("the interrupted execution of the gated step stops", lambda: _gone(old))
    open(gate, "w").close()
    final = _wait("the run ends", lambda: (s := read_state(prefix, run_id))["status"] in TERMINAL and s, 120)
    assert final["status"] == "SUCCEEDED", final
    ev = _events(events)
    # The step that had finished never ran again; the interrupted one finished once; none abandoned.
    assert ev.count("start first") == 1 and ev.count("end first") == 1, ev
    assert ev.count("end gated") == 1 and ev.count("end last") == 1, ev
    outputs = sorted(
        os.path.relpath(os.path.join(d, f), prefix) for d, _, fs in os.walk(prefix) for f in fs if f == "data.txt"
    )
    return final, {p: Path(prefix, p).read_text() for p in outputs}


def test_a_killed_driver_and_a_lost_node_are_restarted_and_the_pipeline_finishes(cluster, tmp_path):
    c, nodes = cluster

    # 1. kill -9 of the driver process
    prefix, events, gate, run_id, attempt = _start(c, tmp_path, "killed")
    os.kill(attempt["pid"], signal.SIGKILL)
    final, outputs = _finish(prefix, events, gate, run_id)
    first, second = final["attempts"][:2]
    assert first["outcome"] == "died" and "SIGKILL" in first["reason"], first
    assert second["outcome"] == "succeeded" and len(final["attempts"]) == 2
    log1 = read_text(attempt_log_url(prefix, run_id, 1))
    log2 = read_text(attempt_log_url(prefix, run_id, 2))
    assert "launch/first" in log1 and "launch/last" in log2, (log1, log2)
    assert [p.split("-")[0] for p in sorted(outputs)] == ["launch/first", "launch/gated", "launch/last"]
    assert outputs[next(p for p in outputs if p.startswith("launch/last-"))] == "first\ngated\nlast"

    # 2. the node the driver runs on is removed
    prefix2, events2, gate2, run_id2, attempt2 = _start(c, tmp_path, "node_lost")
    node = next(n for n in nodes if n.node_id == attempt2["node_id"])
    c.remove_node(node, allow_graceful=False)
    final2, outputs2 = _finish(prefix2, events2, gate2, run_id2)
    lost = final2["attempts"][0]
    assert lost["outcome"] == "died" and final2["attempts"][1]["node_id"] != node.node_id, final2
    # Same experiment, same identities, same bytes, whatever happened to its drivers.
    assert outputs2 == outputs


def test_bad_input_is_one_line_and_starts_nothing(cluster, tmp_path, capsys):
    c, _ = cluster
    prefix = str(tmp_path / "p")
    with pytest.raises(LaunchError, match=r'--driver_resources \{"TPU": 8.0\}: no node of this cluster has that'):
        launch(SCRIPT, [], address=c.address, prefix=prefix, driver_resources='{"TPU": 8}', working_dir=REPO)
    assert not os.path.exists(prefix)
    with pytest.raises(LaunchError, match="no launched run 'nope'"):
        status(prefix, "nope")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max_restarts", "0"], "--max_restarts 0: a launched run must be allowed at least one restart"),
        (["--address", "127.0.0.1:1"], "--address 127.0.0.1:1: no Ray cluster answers there"),
        (["--address", "nowhere"], "--address 'nowhere' is not HOST:PORT"),
    ],
)
def test_launch_refuses_before_touching_anything(tmp_path, capsys, args, message):
    prefix = str(tmp_path / "p")
    argv = ["launch", SCRIPT, "--prefix", prefix, "--working_dir", REPO, *args]
    if "--address" not in args:
        argv += ["--address", "127.0.0.1:1"]
    assert cli_main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert not os.path.exists(prefix)


def test_stop_ends_the_run_without_a_restart_and_follow_and_status_read_the_record(
    cluster, tmp_path, capsys, monkeypatch
):
    c, _ = cluster
    prefix = str(tmp_path / "stopped")
    # A token-shaped argument reaches the driver as given, but never the run's record; nor does a
    # value known as a secret only by this process's environment (the cluster's nodes started without it).
    secret = "hf_" + "s3cr3t" * 5
    plain = "launcher-only-value-42"
    monkeypatch.setenv("LAUNCHER_SIDE_TOKEN", plain)
    events, gate = str(tmp_path / f"{secret}.{plain}.events"), str(tmp_path / "never.gate")
    run_id = launch(
        SCRIPT,
        [events, gate],
        address=c.address,
        prefix=prefix,
        max_restarts=2,
        driver_resources=DRIVER,
        working_dir=REPO,
    )["run_id"]
    _wait("the gated step starts", lambda: "start gated" in _events(events), 240, lambda: _job_says(c, run_id))
    pid = _wait("attempt 1 records its pid", lambda: read_state(prefix, run_id)["attempts"][0].get("pid"))
    # Ray's own tools see the run: its job, under the run id, the run named in the job's metadata.
    client = job_client(c.address)
    job = next(j for j in client.list_jobs() if j.submission_id == run_id)
    assert job.metadata["marin_run_id"] == run_id and job.status.value == "RUNNING", job
    assert "marin_lab.cluster.supervisor" in job.entrypoint and secret not in job.entrypoint
    assert cli_main(["launch", "--status", run_id, "--prefix", prefix, "--address", c.address]) == 0
    assert f"ray job {run_id}: RUNNING" in capsys.readouterr().out
    assert cli_main(["launch", "--stop", run_id, "--address", c.address, "--prefix", prefix]) == 0
    assert f"{run_id}: STOPPED" in capsys.readouterr().out
    state = read_state(prefix, run_id)
    assert state["status"] == "STOPPED" and len(state["attempts"]) == 1
    assert state["attempts"][0]["outcome"] == "stopped"
    _wait("the stopped driver is gone", lambda: _gone(pid), 30)
    _wait("Ray says the job stopped", lambda: job_status(client, run_id) == "STOPPED", 30)
    from io import StringIO

    out = StringIO()
    assert follow(client, prefix, run_id, out=out)["status"] == "STOPPED"
    text = out.getvalue()  # the job's log, read through Ray's client
    assert f"--- {run_id}: attempt 1 started" in text and "launch/first" in text and "--- attempt 1: stopped" in text
    assert cli_main(["launch", "--status", run_id, "--prefix", prefix]) == 0
    assert "attempt 1: stopped" in capsys.readouterr().out
    stored = "".join(
        Path(os.path.join(d, f)).read_text() for d, _, fs in os.walk(os.path.join(prefix, "launches")) for f in fs
    )
    assert secret not in stored and plain not in stored and "<redacted>.<redacted>.events" in stored
    assert plain not in text and secret not in client.get_job_logs(run_id)
