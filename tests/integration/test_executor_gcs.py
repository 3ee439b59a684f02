"""Leases and races on gs://, against a local GCS emulator (generation preconditions enforced)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from marin_lab.execution import Executor, ExecutorMainConfig
from marin_lab.execution import executor as executor_module
from marin_lab.execution.errors import StorageError
from marin_lab.execution.state.lease import Lease
from marin_lab.io.conditional import ConflictError, conditional_file
from marin_lab.io.fs import read_text
from tests.conftest import REPO_ROOT
from tests.executor_steps import assert_lease_loss_stops_the_loser, executions, five_step_dag, race_for_lease

pytestmark = pytest.mark.gcs

DRIVER = os.path.join(REPO_ROOT, "tests", "drive_dag.py")


class Clock:
    def __init__(self):
        self.t = 1_000_000.0

    def __call__(self):
        return self.t


def test_conditional_writes_on_gcs(gcs_bucket):
    f = conditional_file(f"{gcs_bucket}/step/.executor_lease")
    token = f.create(b"a")
    with pytest.raises(ConflictError):
        f.create(b"b")
    new = f.replace(b"c", token)
    with pytest.raises(ConflictError):
        f.replace(b"d", token)
    assert f.read() == (b"c", new)


def test_stale_gcs_lease_race_has_one_winner(gcs_bucket):
    path = f"{gcs_bucket}/race-step"
    clock = Clock()
    assert Lease(path, "dead", timeout_s=1, clock=clock).try_acquire() is None
    clock.t += 10
    racers = [Lease(path, f"d{i}", timeout_s=60, clock=clock) for i in range(6)]
    results = race_for_lease(racers)
    assert sum(r is None for r in results) == 1


def test_dag_twice_on_gcs(gcs_bucket, tmp_path):
    prefix, log = f"{gcs_bucket}/store", str(tmp_path / "exec.log")
    first = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(log_path=log))
    assert len(first.executed) == 5
    e = {s.name: s for s in first.plan.steps}["final/e"]
    assert read_text(f"{e.output_path}/data.txt") == "a\nb\na\nc\nd\ne"
    info = json.loads(read_text(f"{e.output_path}/.executor_info"))
    assert info["manifest"]["files"][0]["path"] == "data.txt"
    second = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(log_path=log))
    assert second.executed == [] and len(executions(log)) == 5


@pytest.mark.slow
def test_three_drivers_at_once_on_gcs(gcs_bucket, tmp_path):
    prefix, log = f"{gcs_bucket}/store3", str(tmp_path / "exec.log")
    env = dict(os.environ)
    procs = [
        subprocess.Popen(
            [sys.executable, DRIVER, prefix, log, "0.4", "--backend", "local"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[-2000:] for o in outs]
    runs = executions(log)
    assert len(runs) == 5 and len(set(runs)) == 5


def test_lease_loss_on_gcs_stops_the_loser(gcs_bucket):
    assert_lease_loss_stops_the_loser(f"{gcs_bucket}/store-loss", heartbeat_s=0.2)


def test_a_bucket_that_cannot_be_written_fails_before_anything_runs(gcs_bucket, tmp_path, monkeypatch):
    # The write probe of an object-store prefix runs beside the reads of the statuses; its error
    # is the one raised, and no step starts. Writes of the probe are refused as a read-only
    # credential would refuse them; everything else reaches the emulator.
    real_write = executor_module.atomic_write_bytes

    def refuse_probe(url, data):
        if ".marin_lab_write_probe-" in url:
            raise PermissionError(f"403 POST {url}: the caller does not have storage.objects.create access")
        return real_write(url, data)

    monkeypatch.setattr(executor_module, "atomic_write_bytes", refuse_probe)
    log = str(tmp_path / "exec.log")
    with pytest.raises(StorageError, match=f"cannot write to the prefix {gcs_bucket}/store: PermissionError: 403"):
        Executor(ExecutorMainConfig(prefix=f"{gcs_bucket}/store", backend="local")).run(five_step_dag(log_path=log))
    assert executions(log) == []
