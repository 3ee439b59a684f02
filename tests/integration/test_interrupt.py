"""Ctrl-C means stop: real signals to a real driver's process group, on the local backend and on
the local Ray a driver starts; a dead driver's step told as such, and taken over with its end."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.cli import main as cli_main
from marin_lab.execution.state.status import read_status
from marin_lab.store.step_record import read_step_record
from tests.conftest import REPO_ROOT

DRIVER = os.path.join(REPO_ROOT, "tests", "interrupt_steps.py")


def _start(prefix, markers, mode, *flags):
    env = {**os.environ, "PYTHONPATH": REPO_ROOT}
    err = open(os.path.join(markers, "..", f"driver-{time.monotonic_ns()}.err"), "w+")  # noqa: SIM115 (returned: the caller reads it)
    proc = subprocess.Popen(
        [sys.executable, DRIVER, str(prefix), str(markers), mode, *flags],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,
        cwd=REPO_ROOT,
    )
    return proc, err


def _wait_for(condition, what, timeout_s=180.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout_s:.0f} s")


def _started(markers):
    path = os.path.join(markers, "started")
    _wait_for(lambda: os.path.exists(path), "the step's start")
    with open(path) as f:
        return json.load(f)


def _gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _text(err):
    err.flush()
    err.seek(0)
    return err.read()


def _step_dir(prefix):
    (path,) = glob.glob(os.path.join(str(prefix), "interrupt", "long-*"))
    return path


def _backend_flags(backend):
    return ["--backend", "local"] if backend == "local" else ["--backend", "ray"]


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.ray)])
def backend(request, monkeypatch):
    if request.param == "ray":  # the driver starts its own local Ray, as a person's run does
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return request.param


@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_ctrl_c_cancels_the_step_exits_130_and_the_next_run_resumes(tmp_path, backend, sig):
    prefix, markers = tmp_path / "store", tmp_path / "markers"
    markers.mkdir()
    proc, err = _start(prefix, markers, "plain", *_backend_flags(backend))
    try:
        pids = _started(markers)
        t0 = time.monotonic()
        os.killpg(proc.pid, sig)  # what a terminal does on Ctrl-C: the driver's whole process group
        assert proc.wait(timeout=60) == 130, _text(err)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = _text(err)
    assert took < 30, f"exited {took:.1f} s after the interrupt"
    assert "Traceback" not in out, out
    assert "CANCELLED interrupt/long-" in out and "run the same command again" in out, out
    # The step's worker and the process it started are gone.
    _wait_for(lambda: _gone(pids["worker"]) and _gone(pids["child"]), "the step's processes ending", 30)
    step = _step_dir(prefix)
    st = read_status(step)
    assert st["status"] == "CANCELLED" and st["time"], st
    assert not os.path.exists(os.path.join(step, ".executor_lease")), "the lease was not released"
    record = read_step_record(step)
    assert record.status == "CANCELLED" and record.attempts[-1].status == "CANCELLED"
    assert record.attempts[-1].ended is not None

    # Not a failure: the next run runs it again, with no flag, from its checkpoint.
    rerun = subprocess.run(
        [sys.executable, DRIVER, str(prefix), str(markers), "plain", *_backend_flags(backend)],
        env={**os.environ, "PYTHONPATH": REPO_ROOT},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert read_status(step)["status"] == "SUCCESS"
    assert read_step_record(step).result == {"resumed_from": 1}


def test_sigterm_cancels_like_ctrl_c(tmp_path):
    prefix, markers = tmp_path / "store", tmp_path / "markers"
    markers.mkdir()
    proc, err = _start(prefix, markers, "chain", "--backend", "local")
    try:
        _started(markers)
        proc.send_signal(signal.SIGTERM)  # e.g. a job scheduler stopping the driver
        # 128 + SIGTERM, as a shell reports it (`marin-lab launch` restarts a driver ended so).
        assert proc.wait(timeout=60) == 143, _text(err)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert read_status(_step_dir(prefix))["status"] == "CANCELLED"
    # The step after it never started, and is not left WAITING behind a run that has stopped.
    (after,) = glob.glob(os.path.join(str(prefix), "interrupt", "after-*")) or [None]
    assert after is None or read_status(after) is None
    assert "1 step(s) not started" in _text(err)


def test_a_second_ctrl_c_exits_at_once(tmp_path):
    prefix, markers = tmp_path / "store", tmp_path / "markers"
    markers.mkdir()
    # 'stubborn' ignores SIGTERM: cancelling it waits out the grace period before SIGKILL.
    proc, err = _start(prefix, markers, "stubborn", "--backend", "local")
    try:
        pids = _started(markers)
        os.killpg(proc.pid, signal.SIGINT)
        _wait_for(lambda: "stopping" in _text(err), "the first interrupt's message", 30)
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 130, _text(err)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert took < 2.5, f"the second interrupt took {took:.1f} s"  # the grace period is 3 s
    assert "interrupted again" in _text(err)
    _wait_for(lambda: _gone(pids["worker"]) and _gone(pids["child"]), "the step's processes ending", 30)


def test_a_dead_drivers_step_is_told_everywhere_and_its_attempt_ends_on_takeover(tmp_path, capsys):
    prefix, markers = tmp_path / "store", tmp_path / "markers"
    markers.mkdir()
    proc, err = _start(prefix, markers, "plain", "--backend", "local")
    try:
        pids = _started(markers)
        # The driver marks the step RUNNING once it sees the work start (its next poll of the log).
        _wait_for(lambda: (read_status(_step_dir(prefix)) or {}).get("status") == "RUNNING", "the step RUNNING", 30)
        os.kill(proc.pid, signal.SIGKILL)  # the driver dies; nothing of it runs its handlers
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    _wait_for(lambda: _gone(pids["worker"]), "the orphaned worker stopping itself", 30)
    step = _step_dir(prefix)
    assert read_status(step)["status"] == "RUNNING"  # as the dead driver left it

    # marin-lab status
    capsys.readouterr()
    cli_main(["status", str(prefix)])
    out = capsys.readouterr().out
    assert "RUNNING, driver gone since" in out, out
    assert "running, driver gone" in out, out  # the dead driver's run, never finished
    # the browser
    browser = Browser(str(prefix), Roots.of([str(prefix)]))
    (summary,) = browser.experiments()
    (row,) = browser.experiment(summary["id"])["steps"]
    assert row["status"] == "RUNNING" and row["driver_gone_since"], row
    assert browser.experiment(summary["id"])["runs"][0]["outcome"] == "running, driver gone"
    assert browser.step(step)["driver_gone_since"] == row["driver_gone_since"]
    # the plan
    plan = subprocess.run(
        [sys.executable, DRIVER, str(prefix), str(markers), "plain", "--backend", "local", "--dry_run", "true"],
        env={**os.environ, "PYTHONPATH": REPO_ROOT},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert "driver gone since" in plan.stdout, plan.stdout + plan.stderr

    # A new run takes it over; the killed attempt ends in the record, with why.
    rerun = subprocess.run(
        [sys.executable, DRIVER, str(prefix), str(markers), "plain", "--backend", "local"],
        env={**os.environ, "PYTHONPATH": REPO_ROOT},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    record = read_step_record(step)
    first, second = record.attempts
    assert first.status == "LOST" and first.ended is not None and "driver lost" in (first.error or ""), first
    assert second.status == "SUCCESS"
    assert [e.status for e in record.status_history] == ["RUNNING", "LOST", "RUNNING", "SUCCESS"]


_GPU_SCRIPT = """
import dataclasses, sys
from marin_lab.execution import ExecutorStep, executor_main, this_output_path, versioned

@dataclasses.dataclass(frozen=True)
class Cfg:
    output_path: str
    text: str

def never(cfg):
    raise AssertionError("an impossible step must never start")

if __name__ == "__main__":
    executor_main([ExecutorStep("train/gpu", never, Cfg(this_output_path(), versioned("x")),
                                resources={"num_gpus": 1})], args=["--prefix", sys.argv[1]])
"""


@pytest.mark.ray
def test_an_impossible_request_on_a_cluster_elsewhere_fails_after_the_bounded_wait(tmp_path, ray_cluster):
    """A cluster named by RAY_ADDRESS is not known at plan time (an autoscaler could add a GPU node):
    the step is submitted, and fails once no node could hold it for the configured wait."""
    script = tmp_path / "gpu.py"
    script.write_text(_GPU_SCRIPT)
    env = {
        **os.environ,
        "PYTHONPATH": REPO_ROOT,
        "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address,
        "MARIN_UNSCHEDULABLE_TIMEOUT_S": "2",
        "CUDA_VISIBLE_DEVICES": "",
    }
    t0 = time.monotonic()
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert run.returncode == 1, run.stderr[-3000:]
    assert time.monotonic() - t0 < 240
    assert "asks for 1 GPU on one node" in run.stderr and "gave up after 2 s" in run.stderr, run.stderr[-3000:]
    assert "largest node: 4 CPU, 0 GPU" in run.stderr
    (step,) = glob.glob(str(tmp_path / "store" / "train" / "gpu-*"))
    assert read_status(step)["status"] == "FAILED"
