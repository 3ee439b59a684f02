"""One attempt at one shard in a process of its own, so it can be timed out and killed alone.

The shard engine (`processing/shards.py`) runs a step's shards this way when the step gives a
`ShardPolicy`: each attempt is a spawned process (`LocalAttempt`) or, inside a Ray step, a Ray task
(`RayAttempt`). `poll()` says how an attempt ended, telling apart an exception, a worker that died
(by a signal, or by the out-of-memory killer: told apart by Ray's OutOfMemoryError, a MemoryError,
or the cgroup's `oom_kill` count) and a preemption (the Ray node lost).
"""

from __future__ import annotations

import contextlib
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

from marin_lab.execution.run.preemption import PREEMPTION, ray_error_kind
from marin_lab.processing.errors import ProcessingError

__all__ = ["CGROUP_EVENTS", "LocalAttempt", "RayAttempt", "check_memory_fits", "classify_ray_error"]

CGROUP_EVENTS = "/sys/fs/cgroup/memory.events"
"""Where this node's cgroup counts out-of-memory kills (`oom_kill N`)."""


def _oom_kills() -> int | None:
    try:
        with open(CGROUP_EVENTS) as f:
            return next((int(line.split()[1]) for line in f if line.startswith("oom_kill ")), None)
    except (OSError, ValueError):
        return None


def _oom_rose(before: int | None) -> bool:
    return before is not None and (_oom_kills() or 0) > before


def _child(conn: Any, fn: Callable[[Any], Any], task: Any) -> None:
    conn.send(("started",))  # the time limit counts from here: a slow process start is not the shard's
    try:
        conn.send(("ok", fn(task)))
    except BaseException as err:
        kind = "out_of_memory" if isinstance(err, MemoryError) else "exception"
        conn.send((kind, f"{type(err).__name__}: {err}", traceback.format_exc(limit=5)))


class LocalAttempt:
    """One attempt in a spawned process: killable alone, its death seen by its exit code."""

    def __init__(self, ctx: Any, fn: Callable[[Any], Any], task: Any):
        self._conn, child = ctx.Pipe(duplex=False)
        self._oom_before = _oom_kills()
        self.proc = ctx.Process(target=_child, args=(child, fn, task), daemon=True)
        self.proc.start()
        child.close()
        self.created = time.monotonic()
        self.started: float | None = None  # set when the child says it runs the shard

    def poll(self) -> tuple[str, Any] | None:
        """None while running; ("ok", result) or (kind, message) once over."""
        while self._conn.poll():
            try:
                msg = self._conn.recv()
            except EOFError:
                break
            if msg[0] == "started":
                self.started = time.monotonic()
            else:
                self.proc.join()
                return msg[0], msg[1]
        if self.proc.is_alive():
            return None
        code = self.proc.exitcode
        if _oom_rose(self._oom_before):
            return "out_of_memory", f"the worker was killed by the out-of-memory killer (exit {code})"
        name = signal.Signals(-code).name if code is not None and code < 0 else f"exit {code}"
        return "worker_died", f"the worker died ({name})"

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()


def classify_ray_error(err: BaseException, *, oom_kill_seen: bool = False) -> tuple[str, str]:
    """(kind, message) for what `ray.get` raised for a shard task (max_retries=0).

    - out_of_memory: Ray's memory monitor killed the worker (OutOfMemoryError), the shard raised
      MemoryError, or the worker died while this node's cgroup counted an `oom_kill`
      (`oom_kill_seen`: the kernel's killer, which Ray reports as a crash);
    - worker_died: the worker process died on a live node (WorkerCrashedError: a signal, a crash);
    - preempted: its node, raylet or objects were lost (the executor's preemption table);
    - exception: the shard raised.
    """
    name = type(err).__name__
    cause = getattr(err, "cause", None)
    last = (str(cause or err).strip().splitlines() or [name])[-1][:300]
    if _is_ray(err, "OutOfMemoryError"):
        return "out_of_memory", f"Ray's memory monitor killed the worker: {last}"
    if isinstance(cause, MemoryError) or isinstance(err, MemoryError):
        return "out_of_memory", f"the shard raised MemoryError: {last}"
    if _is_ray(err, "WorkerCrashedError"):  # before the table: a crash on a live node is not a preemption
        if oom_kill_seen:
            return "out_of_memory", f"the worker was killed by the out-of-memory killer ({name}: {last})"
        return "worker_died", f"{name}: {last}"
    if ray_error_kind(err) == PREEMPTION:
        return "preempted", f"{name}: {last}"
    if cause is not None:
        return "exception", f"{type(cause).__name__}: {cause}"
    return "exception", f"{name}: {last}"


def _is_ray(err: BaseException, class_name: str) -> bool:
    return any(c.__name__ == class_name and c.__module__.startswith("ray") for c in type(err).__mro__)


class RayAttempt:
    """One attempt as a Ray task (`remote`: `ray.remote(call)` with the policy's options)."""

    def __init__(self, ray: Any, remote: Any, fn: Callable[[Any], Any], task: Any):
        self.ray, self.ref = ray, remote.remote(fn, task)
        self._oom_before = _oom_kills()
        # At most `num_workers` are in flight, so submission is close to the start.
        self.created = time.monotonic()
        self.started: float | None = self.created

    def poll(self) -> tuple[str, Any] | None:
        ready, _ = self.ray.wait([self.ref], timeout=0)
        if not ready:
            return None
        try:
            return "ok", self.ray.get(self.ref)
        except Exception as err:
            return classify_ray_error(err, oom_kill_seen=_oom_rose(self._oom_before))

    def kill(self) -> None:
        with contextlib.suppress(Exception):  # already finished or its worker gone
            self.ray.cancel(self.ref, force=True)


def check_memory_fits(ray: Any, memory_bytes: int | None, desc: str) -> None:
    """A shard task asking for more memory than any node has would wait for ever: refuse it."""
    if memory_bytes is None:
        return
    try:
        largest = max((n.get("Resources", {}).get("memory", 0) for n in ray.nodes() if n.get("Alive")), default=0)
    except Exception:  # a cluster that cannot say: Ray itself reports an infeasible task
        return
    if largest and memory_bytes > largest:
        raise ProcessingError(
            f"{desc}: shard_policy.memory_bytes={memory_bytes} is more than the largest node of "
            f"this Ray cluster offers ({int(largest)} bytes of memory); no shard could ever "
            "start. Lower it, or add nodes with more memory"
        )
