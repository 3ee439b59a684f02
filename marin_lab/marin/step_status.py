"""A step's status as Marin's step layer reads it (Marin's `marin.execution.step_status`).

The statuses are marin_lab's (`.executor_status` beside the output, JSON lines); `StatusFile` reads
ours and Marin's formats and takes marin_lab's lease (`marin_lab.marin.executor.StatusFile`).
`worker_id()` names this process the way a lease holder is named.
"""

from __future__ import annotations

from marin_lab.execution import (
    STATUS_DEP_FAILED,
    STATUS_FAILED,
    STATUS_RUNNING,
    STATUS_SUCCESS,
    STATUS_WAITING,
)
from marin_lab.execution.state.lease import new_driver_id
from marin_lab.marin.executor import HEARTBEAT_TIMEOUT, Lease, StatusFile

__all__ = [
    "HEARTBEAT_TIMEOUT",
    "STATUS_DEP_FAILED",
    "STATUS_FAILED",
    "STATUS_RUNNING",
    "STATUS_SUCCESS",
    "STATUS_WAITING",
    "Lease",
    "StatusFile",
    "worker_id",
]

_WORKER_ID: str | None = None


def worker_id() -> str:
    """This process's lease-holder name (the same for the life of the process)."""
    global _WORKER_ID
    if _WORKER_ID is None:
        _WORKER_ID = new_driver_id()
    return _WORKER_ID
