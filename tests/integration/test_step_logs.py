"""A step's output is kept under `{output}/logs/`, echoed with the step's name, and watched."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time

import fsspec
import pytest

from marin_lab.execution import (
    Executor,
    ExecutorMainConfig,
    ExecutorStep,
    ExperimentFailedError,
    this_output_path,
    versioned,
)
from marin_lab.execution.run.logs import log_url
from marin_lab.execution.state.status import read_status
from tests.conftest import REPO_ROOT
from tests.watch_steps import ChattyConfig, chatty


def _step(word: str, **kw) -> ExecutorStep:
    return ExecutorStep(f"talk/{word}", chatty, ChattyConfig(this_output_path(), versioned(word), **kw))


def _read(url: str) -> str:
    with fsspec.open(url, "r") as f:
        return f.read()


def _assert_full_log(text: str, word: str) -> None:
    for line in (
        f"stdout says {word}",
        f"stderr says {word}",
        f"a log record says {word}",
        f"a subprocess says {word}",
        "progress 200/200",
    ):
        assert line in text, f"{line!r} missing from the step log:\n{text}"
    # 200 redraws of one bar become a handful of lines, not 200.
    assert text.count("progress ") < 10


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.ray)])
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param


def test_step_output_is_saved_under_logs_on_both_backends(tmp_path, backend, monkeypatch):
    monkeypatch.setenv("WATCH_TEST_API_KEY", "hunter2-very-secret")
    report = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend=backend)).run(
        [_step(f"hello-{backend}")]
    )
    ps = report.plan.steps[0]
    text = _read(log_url(ps.output_path, 1))
    _assert_full_log(text, f"hello-{backend}")
    assert "sk-xxxx" not in text and "hunter2" not in text


DRIVER = """
import sys
from marin_lab.execution import ExecutorStep, executor_main, this_output_path, versioned
from tests.conftest import REPO_ROOT
from tests.watch_steps import ChattyConfig, chatty

executor_main(steps=[ExecutorStep("talk/driver", chatty, ChattyConfig(this_output_path(), versioned("driver"),
                                                                      use_jax=True))])
"""


def test_the_drivers_terminal_shows_each_line_prefixed_by_its_step(tmp_path):
    """In a driver of its own: its terminal is what the worker inherits (a test's capture is not)."""
    script = tmp_path / "talk.py"
    script.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "WATCH_TEST_API_KEY": "hunter2-very-secret"}
    done = subprocess.run(
        [sys.executable, str(script), "--backend", "local", "--prefix", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    prefix = re.search(r"\[(talk/driver-[0-9a-f]{8})\] ", done.stdout).group(1)
    assert f"[{prefix}] stdout says driver" in done.stdout
    assert f"[{prefix}] stderr says driver" in done.stderr
    assert f"[{prefix}] the key is <redacted>" in done.stdout and "hunter2" not in done.stdout + done.stderr
    assert f"[{prefix}] devices: [CpuDevice" in done.stdout
    # JAX looked for a TPU in the worker; that INFO line is neither on the terminal nor in the log.
    assert "Unable to initialize backend" not in done.stdout + done.stderr
    log = _read(str(tmp_path / "store" / prefix / "logs" / "attempt-1.log"))
    assert "devices: [CpuDevice" in log and "Unable to initialize backend" not in log


def test_step_log_on_an_object_store(gcs_bucket):
    report = Executor(ExecutorMainConfig(prefix=f"{gcs_bucket}/store", backend="local")).run([_step("in-gcs")])
    _assert_full_log(_read(log_url(report.plan.steps[0].output_path, 1)), "in-gcs")


def test_failed_step_prints_its_traceback_log_and_record(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="marin_lab.execution.executor")
    with pytest.raises(ExperimentFailedError):
        Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local")).run([_step("broken", fail=True)])
    message = "\n".join(r.getMessage() for r in caplog.records)
    assert "Traceback" in message and "RuntimeError: chatty failed on purpose (broken)" in message
    assert "/logs/attempt-1.log" in message and ".executor_info" in message
    out = [r for r in caplog.records if "FAILED after" in r.getMessage()][0].getMessage()
    log_path = out.split("log:", 1)[1].split()[0]
    assert "RuntimeError: chatty failed on purpose (broken)" in _read(log_path)


def test_running_status_carries_a_heartbeat_and_the_latest_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_STATUS_HEARTBEAT_S", "0.2")
    release = str(tmp_path / "release")
    step = _step("slow", release_path=release)
    executor = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local"))
    output_path = executor.plan([step]).steps[0].output_path
    runner = threading.Thread(target=executor.run, args=([step],), daemon=True)
    runner.start()
    deadline = time.time() + 120
    status: dict = {}
    while time.time() < deadline:
        status = read_status(output_path) or {}
        if status.get("progress") == "waiting for release":
            break
        time.sleep(0.1)
    assert status.get("status") == "RUNNING" and status.get("progress") == "waiting for release", status
    assert status["heartbeat"] and status["log"].endswith("logs/attempt-1.log")
    open(release, "w").close()
    runner.join(timeout=120)
    assert read_status(output_path)["status"] == "SUCCESS"
    assert "released" in _read(os.path.join(output_path, "logs", "attempt-1.log"))
