"""Marin's default placement, as an executor backend: a step runs in a thread of the driver unless
its function asks for resources (`remote(fn, resources=...)`): CPUs only in a worker process of
its own, accelerators on Ray.

Marin's `StepRunner` runs a plain step function in-thread, so a step sees the driver's memory and
context variables; marin_lab's `local` backend would run it in a worker process instead. This
backend keeps Marin's behaviour while the executor keeps everything else (lease, statuses, record,
retries). In a thread the step's log file (`{output}/logs/attempt-N.log`) receives the step's
`logging` records (a file-descriptor capture would catch every thread's output), and a lost lease
cannot kill the step: the executor stops writing its records, and the thread's result is dropped.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import threading
import traceback
from typing import Any

from marin_lab.execution.errors import StepFailedError
from marin_lab.execution.run.backends import StepHandle, make_backend
from marin_lab.execution.run.logs import call_with_logs
from marin_lab.io.fs import is_local

__all__ = ["ThreadOrRayBackend"]


class _ThreadLogHandler(logging.Handler):
    """The records one thread logs, appended to a local log file."""

    def __init__(self, path: str, thread_id: int):
        super().__init__()
        self.thread_id = thread_id
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread_id:
            self.file.write(self.format(record) + "\n")
            self.file.flush()

    def close(self) -> None:
        self.file.close()
        super().close()


def _unwrap_logs(fn: Any) -> tuple[Any, str | None]:
    """(the step function, its local log path) from the executor's `with_step_logs` wrapper."""
    if isinstance(fn, functools.partial) and fn.func is call_with_logs:
        spec, inner = fn.args
        url = spec.url
        return inner, (url.removeprefix("file://") if is_local(url) else None)
    return fn, None


class _ThreadHandle(StepHandle):
    def __init__(
        self, fn: Any, config: Any, step_name: str, context: contextvars.Context, errors: dict[str, BaseException]
    ):
        self.step_name = step_name
        self.errors = errors
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._trace = ""
        fn, log_path = _unwrap_logs(fn)

        def go() -> None:
            handler = None
            if log_path is not None:
                os.makedirs(os.path.dirname(log_path), exist_ok=True)
                handler = _ThreadLogHandler(log_path, threading.get_ident())
                logging.getLogger().addHandler(handler)
            try:
                self._result = context.run(fn, config)
            except BaseException as err:  # noqa: BLE001 - the step's failure, reported by result()
                self._error = err
                self._trace = traceback.format_exc()
                logging.getLogger(__name__).error("step '%s' raised\n%s", step_name, self._trace)
            finally:
                if handler is not None:
                    logging.getLogger().removeHandler(handler)
                    handler.close()
                self._done.set()

        self._thread = threading.Thread(target=go, name=f"step:{step_name}", daemon=True)
        self._thread.start()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    def result(self) -> tuple[Any, dict[str, Any]]:
        if self._error is not None:
            self.errors[self.step_name] = self._error
            raise StepFailedError(
                f"step '{self.step_name}' raised {type(self._error).__name__}: {self._error}",
                traceback_text=self._trace,
            ) from self._error
        return self._result, {}

    def cancel(self) -> None:
        pass  # a thread cannot be stopped; its result is dropped (see the module docstring)


class ThreadOrRayBackend:
    """In-thread for a step without resources; a worker process for one that asks for CPUs only (a
    `remote(fn)` job of its own, as Fray would start); Ray (started on first use) for one that asks
    for accelerators."""

    name = "thread"

    def __init__(self, context: contextvars.Context, ray_address: str | None = None):
        self.context = context
        self.ray_address = ray_address
        self.errors: dict[str, BaseException] = {}
        """The exception each failed in-thread step raised, by step identity."""
        self._ray: Any = None
        self._local: Any = None

    def submit(self, fn: Any, config: Any, *, step_name: str, resources: Any, guard: Any) -> StepHandle:
        if resources is None:
            return _ThreadHandle(fn, config, step_name, self.context.copy(), self.errors)
        if isinstance(resources, dict) and set(resources) <= {"num_cpus"}:
            if self._local is None:
                self._local = make_backend("local")
            return self._local.submit(fn, config, step_name=step_name, resources=resources, guard=guard)
        if self._ray is None:
            self._ray = make_backend("ray", ray_address=self.ray_address)
        return self._ray.submit(fn, config, step_name=step_name, resources=resources, guard=guard)

    def shutdown(self) -> None:
        for backend in (self._local, self._ray):
            if backend is not None:
                backend.shutdown()
