"""Ctrl-C means stop: the driver's handling of SIGINT and SIGTERM while a run executes.

The first signal sets `Interrupt.event`; the executor stops starting steps, every step runner
cancels its step (a local worker's process group is ended, a Ray task is cancelled with force),
records it CANCELLED with the time and releases its lease; the run then ends with
`RunInterruptedError` (exit 128 + the signal, as a shell reports it: 130 for Ctrl-C, 143 for
SIGTERM; `marin-lab launch` restarts a driver ended by SIGTERM, e.g. on a preempted node). A
second signal exits at once (the same code), after a last, non-blocking kill of the local workers'
process groups.

Step workers run in their own sessions (backends.py), so the terminal's Ctrl-C reaches the driver
only: the driver decides what stopping means, and a step never mistakes it for its own failure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

EXIT_CODE = 130
"""What a shell reports for a program ended by Ctrl-C (128 + SIGINT); SIGTERM's is 143."""

# Process groups of local step workers that are running: a second Ctrl-C kills them on its way out.
_WORKER_GROUPS: set[int] = set()
_GROUPS_LOCK = threading.Lock()


def register_worker_group(pgid: int) -> None:
    with _GROUPS_LOCK:
        _WORKER_GROUPS.add(pgid)


def unregister_worker_group(pgid: int) -> None:
    with _GROUPS_LOCK:
        _WORKER_GROUPS.discard(pgid)


def kill_worker_groups() -> None:
    """SIGKILL every registered worker process group; never blocks, never raises."""
    with _GROUPS_LOCK:
        groups = list(_WORKER_GROUPS)
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


class Interrupt:
    """SIGINT/SIGTERM handlers for the duration of a run (installed only from the main thread;
    elsewhere, e.g. a run inside a thread, `event` can still be set by the caller)."""

    def __init__(self, event: threading.Event | None = None, *, exit: Callable[[int], Any] = os._exit):
        self.event = event or threading.Event()
        self.signal_name: str | None = None
        self.signum: int | None = None
        self._exit = exit
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Interrupt:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(ValueError, OSError):  # not allowed here (an embedded interpreter)
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.event.is_set():
            # The second interrupt: out now, leaving records as they are (the next run sees the
            # steps' leases go stale and runs them again).
            with contextlib.suppress(OSError):
                os.write(2, b"\ninterrupted again: exiting now\n")
            kill_worker_groups()
            self._exit(128 + signum)
            return
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        self.event.set()
        # a closed stderr, or a print re-entered by the signal
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            print(
                f"\n{self.signal_name}: stopping: cancelling the running steps (interrupt again to exit at once)",
                file=sys.stderr,
                flush=True,
            )
