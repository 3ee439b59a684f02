"""What the driver does so a person can watch a step: logs wired in, heartbeats, failure reports."""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from marin_lab.execution.plan.resources import is_runner
from marin_lab.execution.run.logs import LogSpec, call_with_logs, last_line, log_url, read_tail
from marin_lab.execution.state.status import Status, info_url, now_iso, write_status
from marin_lab.io.secrets import scrub_text
from marin_lab.io.text import strip_ansi

logger = logging.getLogger(__name__)

STATUS_HEARTBEAT_S = 10.0
TRACEBACK_LINES = 25


def with_step_logs(
    fn: Callable[[Any], Any], identity: str, output_path: str, attempt: int, resources: Any
) -> tuple[Callable[[Any], Any], str | None]:
    """`fn` wrapped to keep its output in `{output}/logs/attempt-{n}.log`, and that log's URL.

    A HardwareRunner drives several hosts itself; they would all write one file, so its steps are
    left as they are (their hosts' output reaches the driver through Ray).
    """
    if is_runner(resources):
        return fn, None
    echo = os.environ.get("MARIN_ECHO_STEP_LOGS", "1") not in ("0", "false", "False")
    spec = LogSpec(url=log_url(output_path, attempt), label=identity, echo=echo)
    return functools.partial(call_with_logs, spec, fn), spec.url


class StatusHeartbeat:
    """Rewrites a running step's RUNNING status now and then with the time and its latest line.

    Readers (the browser, `marin-lab status`, another driver) see that the step is alive and
    where it is, without opening its log. Called from the driver thread that waits for the step.
    """

    def __init__(self, output_path: str, log: str | None, *, attempt: int, driver: str, every_s: float | None = None):
        self.output_path, self.log, self.attempt, self.driver = output_path, log, attempt, driver
        self.every_s = (
            every_s if every_s is not None else float(os.environ.get("MARIN_STATUS_HEARTBEAT_S", STATUS_HEARTBEAT_S))
        )
        self.started = time.monotonic()
        self.last = self.started
        self.warned = False

    def maybe_beat(self) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            return
        self.last = now
        fields: dict[str, Any] = {
            "attempt": self.attempt,
            "driver": self.driver,
            "heartbeat": now_iso(),
            "elapsed_s": round(now - self.started, 1),
        }
        if self.log:
            fields["log"] = self.log
            try:
                line = last_line(read_tail(self.log))
            except Exception:  # the log is informative; a storage hiccup here is not the step's failure
                line = None
            if line:
                fields["progress"] = line
        try:
            write_status(self.output_path, Status.RUNNING, **fields)
        except Exception as err:
            if not self.warned:
                logger.warning("could not write a heartbeat to %s: %s", self.output_path, err)
                self.warned = True


def failure_report(identity: str, attempts: int, err: BaseException, output_path: str) -> str:
    """What a person needs when a step fails: the error, the end of its traceback, where to look."""
    first = str(err).splitlines()[0] if str(err) else repr(err)
    lines = [f"step '{identity}': FAILED after {attempts} attempt(s): {strip_ansi(scrub_text(first))}"]
    text = strip_ansi(scrub_text(getattr(err, "traceback_text", None) or ""))
    if text:
        tb = text.rstrip().splitlines()
        if len(tb) > TRACEBACK_LINES:
            lines.append(f"  ... ({len(tb) - TRACEBACK_LINES} earlier traceback lines in the log)")
        lines.extend("  | " + line for line in tb[-TRACEBACK_LINES:])
    lines.append(f"  log:    {log_url(output_path, attempts)}")
    lines.append(f"  record: {info_url(output_path)}")
    return "\n".join(lines)
