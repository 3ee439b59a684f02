"""The executor contract, end to end, on the local backend and on local Ray."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from marin_lab.cli import main as cli_main
from marin_lab.execution import (
    Executor,
    ExecutorMainConfig,
    ExecutorStep,
    ExperimentFailedError,
    StorageError,
    this_output_path,
    versioned,
)
from marin_lab.execution.state.status import read_status
from marin_lab.io.conditional import conditional_file
from tests.conftest import REPO_ROOT
from tests.executor_steps import (
    FlakyConfig,
    WriteConfig,
    assert_all_exit,
    assert_lease_loss_stops_the_loser,
    executions,
    fail,
    five_step_dag,
    flaky,
    local_step_workers,
    write_text,
)
from tests.waiting import wait_for_status

DRIVER = os.path.join(REPO_ROOT, "tests", "drive_dag.py")


def _ids(report):
    return {s.name: s for s in report.plan.steps}


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.ray)])
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param


def test_dag_twice_second_run_executes_nothing(tmp_path, backend):
    log = str(tmp_path / "exec.log")
    prefix = str(tmp_path / "store")
    first = Executor(ExecutorMainConfig(prefix=prefix, backend=backend)).run(five_step_dag(log_path=log))
    assert len(first.executed) == 5
    assert len(executions(log)) == 5
    e = _ids(first)["final/e"]
    assert Path(f"{e.output_path}/data.txt").read_text() == "a\nb\na\nc\nd\ne"
    second = Executor(ExecutorMainConfig(prefix=prefix, backend=backend)).run(five_step_dag(log_path=log))
    assert second.executed == []
    assert len(executions(log)) == 5
    assert all(o.status == "SUCCESS" for o in second.outcomes.values())


def test_failure_records_traceback_marks_dependents_and_force_reruns(tmp_path):
    prefix = str(tmp_path / "store")
    log = str(tmp_path / "exec.log")

    def dag(fn):
        a = ExecutorStep("a", fn, WriteConfig(this_output_path(), versioned("a"), log_path=log))
        b = ExecutorStep("b", write_text, WriteConfig(this_output_path(), versioned("b"), (a,), log_path=log))
        return a, b

    a, b = dag(fail)
    with pytest.raises(ExperimentFailedError, match="DEP_FAILED"):
        Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run([b])
    report = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run([b], raise_on_failure=False)
    plan = _ids(report)
    assert read_status(plan["a"].output_path)["status"] == "FAILED"
    assert read_status(plan["b"].output_path)["status"] == "DEP_FAILED"
    info = json.loads(Path(f"{plan['a'].output_path}/.executor_info").read_text())
    assert "ValueError: boom in a" in info["error"]
    assert "Traceback" in info["attempts"][-1]["error"]
    assert not os.path.exists(f"{plan['b'].output_path}/data.txt")
    # Not rerun without --force_run_failed: the second run above executed nothing.
    assert len(executions(log)) == 1
    # With it, the step runs again (and, still failing, is FAILED again, never SUCCESS).
    with pytest.raises(ExperimentFailedError):
        Executor(ExecutorMainConfig(prefix=prefix, backend="local", force_run_failed=True)).run([b])
    assert len(executions(log)) == 2
    assert read_status(plan["a"].output_path)["status"] == "FAILED"
    info = json.loads(Path(f"{plan['a'].output_path}/.executor_info").read_text())
    assert [x["status"] for x in info["attempts"]] == ["FAILED", "FAILED"]


def test_preemptions_and_failures_have_separate_budgets(tmp_path):
    prefix = str(tmp_path / "store")
    kill = ExecutorStep(
        "killed-twice",
        flaky,
        FlakyConfig(this_output_path(), str(tmp_path / "k.count"), mode=versioned("kill"), bad_attempts=2),
    )
    report = Executor(
        ExecutorMainConfig(prefix=prefix, backend="local", max_preemption_retries=2, max_failure_retries=0)
    ).run([kill])
    info = json.loads(Path(f"{report.plan.steps[0].output_path}/.executor_info").read_text())
    assert [a["kind"] for a in info["attempts"]] == ["preemption", "preemption", None]
    assert info["result"] == 3
    assert [h["status"] for h in info["status_history"]].count("FAILED") == 2

    raising = ExecutorStep(
        "raises-once",
        flaky,
        FlakyConfig(this_output_path(), str(tmp_path / "r.count"), mode=versioned("raise"), bad_attempts=1),
    )
    with pytest.raises(ExperimentFailedError):  # preemption budget does not cover failures
        Executor(
            ExecutorMainConfig(prefix=prefix, backend="local", max_preemption_retries=5, max_failure_retries=0)
        ).run([raising])
    ok = Executor(ExecutorMainConfig(prefix=prefix, backend="local", force_run_failed=True, max_failure_retries=1)).run(
        [raising]
    )
    assert ok.failed == []

    over = ExecutorStep(
        "killed-too-often",
        flaky,
        FlakyConfig(this_output_path(), str(tmp_path / "o.count"), mode=versioned("kill"), bad_attempts=3),
    )
    with pytest.raises(ExperimentFailedError, match="killed-too-often"):
        Executor(ExecutorMainConfig(prefix=prefix, backend="local", max_preemption_retries=1)).run([over])


def test_record_has_provenance_and_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_TEST_API_KEY", "sk-secret-value-123")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_456")
    monkeypatch.setenv("MARIN_TEST_VISIBLE", "visible")
    prefix = str(tmp_path / "store")
    report = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag())
    d = _ids(report)["join/d"]
    raw = Path(f"{d.output_path}/.executor_info").read_text()
    info = json.loads(raw)
    for key in (
        "fn",
        "config",
        "version",
        "dependencies",
        "status_history",
        "attempts",
        "timings",
        "result",
        "git",
        "environment",
        "manifest",
        "identity",
        "output_path",
        "unversioned",
    ):
        assert key in info, key
    assert info["fn"] == "tests.executor_steps:write_text"
    assert info["status"] == "SUCCESS"
    assert [dep["name"] for dep in info["dependencies"]] == ["proc/b", "proc/c"]
    env = info["environment"]
    assert env["python"] and env["host"] and "numpy" in env["packages"] and "cpu_count" in env["accelerators"]
    assert env["env"]["MARIN_TEST_VISIBLE"] == "visible"
    assert info["result"]["api_key"] == "<redacted>"
    for secret in ("sk-secret-value-123", "hf_secret_value_456", "sk-should-not-appear"):
        assert secret not in raw
    files = {f["path"]: f for f in info["manifest"]["files"]}
    import hashlib

    data = Path(f"{d.output_path}/data.txt").read_bytes()
    assert files["data.txt"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert files["data.txt"]["size"] == len(data)
    assert not any(p.startswith(".executor") for p in files)
    exp = json.loads(Path(report.experiment_path).read_text())
    assert {s["identity"] for s in exp["steps"]} == {s.identity for s in report.plan.steps}
    assert exp["description"] is None and exp["prefix"] == prefix
    assert os.path.basename(report.experiment_path).startswith(exp["name"] + "-")


def test_dry_run_says_run_skip_wait_fail_with_reasons(tmp_path, capsys):
    prefix = str(tmp_path / "store")
    Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(), run_only=["^proc/b$"])
    # Pretend another live driver is running proc/c, and join/d failed earlier.
    plan = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).plan(five_step_dag())
    by = {s.name: s for s in plan.steps}
    conditional_file(f"{by['proc/c'].output_path}/.executor_lease").create(
        json.dumps(
            {
                "holder": "other-driver",
                "host": "elsewhere",
                "pid": 1,
                "pid_start": 1.0,
                "heartbeat": time.time(),
                "timeout_s": 600,
            }
        ).encode()
    )
    from marin_lab.execution.state.status import Status, write_status

    write_status(by["proc/c"].output_path, Status.RUNNING, driver="other-driver")
    write_status(by["join/d"].output_path, Status.FAILED, driver="x")
    capsys.readouterr()
    Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(
        five_step_dag(log_path="/tmp/changed-knob"), dry_run=True
    )
    out = capsys.readouterr().out
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("  ") and "(" in line}
    assert lines[by["raw/a"].identity].split()[0] == "skip"
    assert "SUCCESS" in lines[by["raw/a"].identity]
    assert lines[by["proc/c"].identity].split()[0] == "wait" and "other-driver" in lines[by["proc/c"].identity]
    assert lines[by["join/d"].identity].split()[0] == "fail" and "--force_run_failed" in lines[by["join/d"].identity]
    assert lines[by["final/e"].identity].split()[0] == "run" and "no output yet" in lines[by["final/e"].identity]
    assert "reused although unversioned field log_path: null -> '/tmp/changed-knob'" in out
    assert not os.path.exists(f"{by['final/e'].output_path}/data.txt")


def test_dry_run_explains_a_new_version(tmp_path, capsys):
    prefix = str(tmp_path / "store")
    Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(text="a"))
    capsys.readouterr()
    Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(text="A"), dry_run=True)
    out = capsys.readouterr().out
    assert "text: 'a' -> 'A'" in out
    assert "dependency raw/a changed: raw/a-" in out


def test_prefix_that_cannot_be_written_fails_before_anything_runs(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    log = str(tmp_path / "exec.log")
    with pytest.raises(StorageError, match="cannot write to the prefix"):
        Executor(ExecutorMainConfig(prefix=str(blocker / "store"), backend="local")).run(five_step_dag(log_path=log))
    assert executions(log) == []


def test_lease_loss_stops_the_loser_and_it_writes_nothing(tmp_path):
    assert_lease_loss_stops_the_loser(str(tmp_path / "store"), heartbeat_s=0.1)


def _driver_flags(driver_backend, request):
    """Ray drivers join the session's cluster, as drivers on a real cluster would."""
    if driver_backend == "local":
        return ["--backend", "local"]
    ray = request.getfixturevalue("ray_cluster")
    return ["--backend", "ray", "--ray_address", ray.get_runtime_context().gcs_address]


@pytest.mark.slow
@pytest.mark.parametrize("driver_backend", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_kill_9_driver_mid_step_then_rerun(tmp_path, driver_backend, request):
    prefix, log = str(tmp_path / "store"), str(tmp_path / "exec.log")
    plan = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).plan(five_step_dag())
    by = {s.name: s for s in plan.steps}
    assert (
        Executor(ExecutorMainConfig(prefix=prefix, backend="local"))
        .run(five_step_dag(log_path=log), dry_run=True)
        .outcomes
        == {}
    )
    flags = _driver_flags(driver_backend, request)
    proc = subprocess.Popen([sys.executable, DRIVER, prefix, log, "1.5", *flags], cwd=REPO_ROOT)
    wait_for_status(by["join/d"].output_path, "RUNNING")
    deadline = time.time() + 60
    while len(executions(log)) < 4 and time.time() < deadline:  # d's worker has started its step
        time.sleep(0.05)
    workers = local_step_workers(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if driver_backend == "local":
        # The orphaned worker must be gone, not finishing its step: wait for it to exit.
        assert workers and assert_all_exit(workers) is None
    else:  # a Ray task's guard notices its driver gone within a second; its step sleeps 1.5 s
        time.sleep(2.5)
    assert not os.path.exists(f"{by['join/d'].output_path}/data.txt")
    done_before = [line for line in executions(log)]
    assert len(done_before) == 4  # a, b, c finished; d started
    rerun = subprocess.run(
        [sys.executable, DRIVER, prefix, log, "0", *flags], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    runs = executions(log)
    assert sorted(runs[4:]) == sorted([by["join/d"].output_path, by["final/e"].output_path])
    # Same bytes as an uninterrupted run.
    clean = str(tmp_path / "clean")
    Executor(ExecutorMainConfig(prefix=clean, backend="local")).run(five_step_dag())
    for s in plan.steps:
        rel = s.identity
        assert Path(f"{prefix}/{rel}/data.txt").read_text() == Path(f"{clean}/{rel}/data.txt").read_text()
        a = json.loads(Path(f"{prefix}/{rel}/.executor_info").read_text())["manifest"]
        b = json.loads(Path(f"{clean}/{rel}/.executor_info").read_text())["manifest"]
        assert a == b


@pytest.mark.slow
@pytest.mark.parametrize("driver_backend", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_three_drivers_at_once_execute_every_step_exactly_once(tmp_path, driver_backend, request):
    prefix, log = str(tmp_path / "store"), str(tmp_path / "exec.log")
    flags = _driver_flags(driver_backend, request)
    procs = [
        subprocess.Popen(
            [sys.executable, DRIVER, prefix, log, "0.4", *flags],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    runs = executions(log)
    assert len(runs) == 5 and len(set(runs)) == 5


def test_cli_status_verify_explain(tmp_path, capsys):
    prefix = str(tmp_path / "store")
    report = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag())
    capsys.readouterr()
    assert cli_main(["status", prefix]) == 0
    out = capsys.readouterr().out
    assert "5 SUCCESS" in out
    assert len([line for line in out.splitlines() if line.strip().startswith("SUCCESS")]) == 5
    d = _ids(report)["join/d"].output_path
    assert cli_main(["verify", d]) == 0
    assert "OK (1 files" in capsys.readouterr().out
    with open(f"{d}/data.txt", "a") as f:
        f.write("tampered")
    assert cli_main(["verify", d]) == 1
    assert "data.txt" in capsys.readouterr().out
    script = tmp_path / "exp.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {REPO_ROOT!r})\n"
        + "from tests.executor_steps import five_step_dag\nfrom marin_lab.execution import executor_main\n"
        "if __name__ == '__main__':\n    executor_main(five_step_dag(text='changed'))\n"
    )
    assert cli_main(["explain", str(script), "--prefix", prefix, "--step", "raw/a"]) == 0
    out = capsys.readouterr().out
    assert "text: 'a' -> 'changed'" in out
    assert cli_main(["explain", str(script), "--prefix", prefix, "--step", "final"]) == 0
    out = capsys.readouterr().out
    assert "dependency join/d changed" in out and "text: 'a' -> 'changed'" in out  # recursive


def test_queued_steps_are_recorded_waiting(tmp_path):
    prefix = str(tmp_path / "store")
    step = ExecutorStep("slow", write_text, WriteConfig(this_output_path(), versioned("s"), sleep_s=1.5))
    after = ExecutorStep("after", write_text, WriteConfig(this_output_path(), versioned("t"), (step,)))
    ex = Executor(ExecutorMainConfig(prefix=prefix, backend="local"))
    plan = ex.plan([after])
    t = threading.Thread(target=ex.run, args=([after],))
    t.start()
    wait_for_status(plan.steps[0].output_path, "RUNNING")
    assert read_status(plan.steps[1].output_path)["status"] == "WAITING"
    t.join(timeout=60)
    assert read_status(plan.steps[1].output_path)["status"] == "SUCCESS"
