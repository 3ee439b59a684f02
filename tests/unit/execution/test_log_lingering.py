"""A step that leaves a process holding its output pipe (W&B's service does) returns at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from marin_lab.execution.run.logs import LogSpec, capture


def test_capture_returns_without_waiting_for_a_leftover_process(tmp_path):
    log = tmp_path / "attempt-0.log"
    child = None
    started = time.monotonic()
    try:
        with capture(LogSpec(url=str(log), label="s", echo=False)):
            os.write(1, b"from the step\n")  # fd 1: pytest replaces sys.stdout
            child = subprocess.Popen(
                [sys.executable, "-c", "import sys, time; print('from the child', flush=True); time.sleep(60)"]
            )
            # The child's line is in the log before the step returns (waited on, not slept on).
            deadline = time.monotonic() + 30
            while b"from the child" not in log.read_bytes() and time.monotonic() < deadline:
                time.sleep(0.01)
        elapsed = time.monotonic() - started
    finally:
        if child is not None:
            child.kill()
            child.wait()
    text = log.read_text()
    assert "from the step" in text and "from the child" in text
    # The child still holds the pipe: the old behaviour waited 10 s per descriptor here.
    assert elapsed < 5, elapsed


def test_output_written_just_before_return_is_kept(tmp_path):
    log = tmp_path / "attempt-0.log"
    with capture(LogSpec(url=str(log), label="s", echo=False)):
        for i in range(2000):
            os.write(2, f"line {i}\n".encode())
    assert log.read_text().splitlines()[-1] == "line 1999"
