"""Waiting on a condition in tests (never on a fixed sleep: CI machines are busy)."""

from __future__ import annotations

import time

from marin_lab.execution.state.status import read_status


def wait_for_status(output_path: str, status: str, timeout_s: float = 120) -> None:
    """Return once the step at `output_path` has `status`; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (read_status(output_path) or {}).get("status") == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"{output_path} never reached {status} within {timeout_s:.0f} s")
