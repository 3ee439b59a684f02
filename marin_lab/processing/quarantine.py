"""Bad shards are quarantined, never waited on forever.

`map_shards` stops a step at the first failing shard. On a fleet that is wrong both ways: one
shard whose input crashes the parser (or runs out of memory, or never ends) holds every worker
until someone looks (Marin #4575: one shard held 3,000 workers for 12 hours), and a step whose
workers all die waits forever (Marin #3598). `map_shards_quarantined` runs each shard attempt in a
process of its own (a Ray task inside a Ray step, else a spawned process), so an attempt can be
timed out and killed alone, and gives each shard a budget:

- an exception, or the worker killed (by a signal, or by the out-of-memory killer: told apart by
  Ray's OutOfMemoryError or by the cgroup's `oom_kill` count), or over `time_limit_s`: a failure,
  retried `retries` times;
- a preemption (the Ray node lost): retried from its own larger budget, as the executor does.

A shard that spends its budget is *bad*: each attempt's error is kept, the other shards finish
(their outputs and completion markers stay), and at the end the step raises `BadShardsError`
naming every bad shard and the command that redoes only them (finished shards are skipped on a
rerun by their markers) -- or, within the step's declared `max_bad_shards`, returns with the bad
ones listed so the step's record says what was left out. Nothing waits without a bound: each
attempt has its time limit, each shard its budget, and a worker that dies is an attempt spent.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from marin_lab.execution.preemption import PREEMPTION, ray_error_kind
from marin_lab.processing.errors import ShardTaskError
from marin_lab.processing.shards import _describe, _ray_if_in_task

POLL_S = 0.05
CGROUP_EVENTS = "/sys/fs/cgroup/memory.events"


@dataclasses.dataclass(frozen=True)
class ShardPolicy:
    """How a data step treats a shard that fails."""

    retries: int = 2
    """Attempts after the first for a failing shard (an exception, a killed worker, a time-out)."""
    time_limit_s: float | None = None
    """An attempt running longer is killed and counts as failed (None: no limit)."""
    max_bad_shards: int = 0
    """Bad shards the step may leave out and still succeed (its record lists them)."""
    memory_bytes: int | None = None
    """Memory each shard task declares to Ray (`memory=`), so the scheduler never overcommits a node."""
    preemption_retries: int = 10
    """Attempts after the first lost to preemptions (a lost node), counted apart from `retries`."""


@dataclasses.dataclass
class ShardOutcome:
    """Results in task order (None for a bad shard) and the bad shards with each attempt's error."""

    results: list[Any]
    bad: list[dict[str, Any]]


class BadShardsError(ShardTaskError):
    """Shards spent their retries and the step's allowance of bad shards is exceeded."""

    def __init__(self, message: str, bad: list[dict[str, Any]]):
        super().__init__(message)
        self.bad = bad


def _oom_kills() -> int | None:
    try:
        with open(CGROUP_EVENTS) as f:
            return next((int(line.split()[1]) for line in f if line.startswith("oom_kill ")), None)
    except (OSError, ValueError):
        return None


def _child(conn: Any, fn: Callable[[Any], Any], task: Any) -> None:
    conn.send(("started",))  # the time limit counts from here: a slow process start is not the shard's
    try:
        conn.send(("ok", fn(task)))
    except BaseException as err:
        conn.send(("error", f"{type(err).__name__}: {err}", traceback.format_exc(limit=5)))


class _LocalAttempt:
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
                return ("ok", msg[1]) if msg[0] == "ok" else ("exception", msg[1])
        if self.proc.is_alive():
            return None
        code = self.proc.exitcode
        oom = self._oom_before is not None and (_oom_kills() or 0) > self._oom_before
        if oom:
            return "out_of_memory", f"the worker was killed by the out-of-memory killer (exit {code})"
        name = signal.Signals(-code).name if code is not None and code < 0 else f"exit {code}"
        return "worker_died", f"the worker died ({name})"

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()


class _RayAttempt:
    def __init__(self, ray: Any, remote: Any, fn: Callable[[Any], Any], task: Any):
        self.ray, self.ref = ray, remote.remote(fn, task)
        # At most `num_workers` are in flight, so submission is close to the start.
        self.created = self.started = time.monotonic()

    def poll(self) -> tuple[str, Any] | None:
        ready, _ = self.ray.wait([self.ref], timeout=0)
        if not ready:
            return None
        try:
            return "ok", self.ray.get(self.ref)
        except Exception as err:
            name = type(err).__name__
            first = (str(getattr(err, "cause", None) or err).strip().splitlines() or [name])[-1][:300]
            if name == "OutOfMemoryError":
                return "out_of_memory", f"Ray's memory monitor killed the worker: {first}"
            if name == "WorkerCrashedError":  # the process died on a live node (a signal, a crash)
                return "worker_died", f"{name}: {first}"
            if ray_error_kind(err) == PREEMPTION:
                return "preempted", f"{name}: {first}"
            cause = getattr(err, "cause", None)
            return "exception", f"{type(cause).__name__}: {cause}" if cause is not None else f"{name}: {first}"

    def kill(self) -> None:
        try:
            self.ray.cancel(self.ref, force=True)
        except Exception:  # already finished or its worker gone
            pass


def _call(fn: Callable[[Any], Any], task: Any) -> Any:
    return fn(task)


def map_shards_quarantined(fn: Callable[[Any], Any], tasks: Sequence[Any], *, num_workers: int, desc: str,
                           policy: ShardPolicy, rerun: str | None = None) -> ShardOutcome:
    """`[fn(t) for t in tasks]`, each in its own process, with `policy`'s budgets (module docstring).

    `rerun`: the command that redoes the step (named in the error); its finished shards are kept."""
    tasks = list(tasks)
    ray = _ray_if_in_task()
    if ray is not None:
        remote = ray.remote(_call).options(num_cpus=1, max_retries=0, memory=policy.memory_bytes)
        start = lambda i: _RayAttempt(ray, remote, fn, tasks[i])  # noqa: E731
    else:
        ctx = multiprocessing.get_context("spawn")
        start = lambda i: _LocalAttempt(ctx, fn, tasks[i])  # noqa: E731
    results: list[Any] = [None] * len(tasks)
    attempts: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(tasks))}
    waiting = deque(range(len(tasks)))
    running: dict[int, Any] = {}
    bad: list[int] = []
    workers = max(1, num_workers)
    while waiting or running:
        while waiting and len(running) < workers:
            i = waiting.popleft()
            running[i] = start(i)
        time.sleep(POLL_S)
        for i, attempt in list(running.items()):
            outcome = attempt.poll()
            if outcome is None and policy.time_limit_s is not None and attempt.started is not None and \
                    time.monotonic() - attempt.started > policy.time_limit_s:
                attempt.kill()
                outcome = "time_limit", f"over the time limit of {policy.time_limit_s:g} s; killed"
            if outcome is None:
                continue
            del running[i]
            kind, value = outcome
            if kind == "ok":
                results[i] = value
                continue
            attempts[i].append({"attempt": len(attempts[i]) + 1, "kind": kind, "error": value,
                                "seconds": round(time.monotonic() - (attempt.started or attempt.created), 3)})
            failures = sum(a["kind"] != "preempted" for a in attempts[i])
            preemptions = len(attempts[i]) - failures
            if failures > policy.retries or preemptions > policy.preemption_retries:
                bad.append(i)
            else:
                waiting.append(i)
    report = [{"task": i, "shard": _describe(tasks[i]), "attempts": attempts[i]} for i in sorted(bad)]
    if len(bad) > policy.max_bad_shards:
        raise BadShardsError(_message(desc, report, len(tasks), policy, rerun), report)
    return ShardOutcome(results, report)


def _message(desc: str, report: list[dict[str, Any]], total: int, policy: ShardPolicy, rerun: str | None) -> str:
    kinds = {a["kind"] for r in report for a in r["attempts"]}
    everyone = len(report) == total and kinds <= {"worker_died", "out_of_memory", "preempted"}
    head = (f"{desc}: every one of {total} shards lost its worker on every attempt ({', '.join(sorted(kinds))})"
            if everyone else
            f"{desc}: {len(report)} of {total} shards are bad (allowed: {policy.max_bad_shards}); the other "
            f"{total - len(report)} finished and are kept")
    lines = [head]
    for r in report:
        last = r["attempts"][-1]
        lines.append(f"  {r['shard']}: {len(r['attempts'])} attempt(s), last {last['kind']}: {last['error']}")
    how = rerun or "run the experiment again with --force_run_failed true (add --run_only STEP for this step alone)"
    lines.append(f"  to redo only these shards (finished ones keep their completion markers): {how}")
    return "\n".join(lines)

