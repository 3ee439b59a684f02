"""Running one function over many shards, and per-shard completion markers.

`map_shards` is the only place a data step meets parallelism. Inside a Ray task (the ray backend
runs each step as one) shards become Ray tasks, so a step fans out over the cluster; on the local
backend they go to a process pool (spawn, so no state leaks from the parent; kept for the next
call of the same process while its environment is unchanged); with one worker
everything runs inline, anywhere, which keeps tests and debugging simple. Results come back in
task order, so a step's output never depends on how many workers there were or which finished
first.

Why `num_workers=N` means the calling process plus N - 1 others: the caller has already imported
the step's modules and loaded its models (a tokenizer, a classifier), and would otherwise sit
idle waiting. It takes tasks from the same queue as the others, so the second worker costs one
process start instead of two, and that start overlaps useful work. Tasks are handed out largest
first when the step gives their `costs` (input sizes): the last task to finish is then a small
one, so workers finish together instead of one waiting on a big shard picked up late.

A shard counts as done only when its marker `{output_file}.done` exists. The marker is written
after the shard itself was written atomically, so a crash leaves either no marker (the shard is
redone) or a complete shard with its marker (it is skipped on the rerun, and its counts are read
back from the marker).

Under a `ShardPolicy` (`run_shards(policy=...)`) the same engine runs each shard attempt in a
process of its own (processing/attempts.py), so one bad shard cannot hold the step: an attempt
that raises, dies, runs out of memory or passes its time limit is retried within the policy's
budget, a shard that spends it is *bad*, the other shards finish, and the step either raises
`BadShardsError` naming every bad shard or, within `max_bad_shards`, gets them listed in its
`ShardOutcome` (processing/quarantine.py keeps the step's report of them).

Every call shows its progress, shards done of all, with a rate and an ETA (`ShardProgress`): on a
terminal one line redrawn in place; in a step's log or a pipe a plain log line at most every
`PROGRESS_EVERY_S`, the first only once the call has run that long (a short phase adds no line),
and a last one when it ends if any was shown.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import dataclasses
import logging
import multiprocessing
import multiprocessing.util
import os
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, Generic, TypeVar, cast

from marin_lab.humanize import format_duration
from marin_lab.io import fs as mfs
from marin_lab.processing.attempts import LocalAttempt, RayAttempt, check_memory_fits
from marin_lab.processing.errors import ProcessingError, ShardTaskError

logger = logging.getLogger(__name__)

__all__ = [
    "BadShardsError",
    "ShardOutcome",
    "ShardPolicy",
    "ShardProgress",
    "bad_shards_message",
    "check_policy",
    "close_idle_pool",
    "describe_task",
    "done_marker",
    "input_sizes",
    "map_shards",
    "mark_shard_done",
    "prefetch",
    "read_shard_done",
    "run_shards",
    "schedule_order",
    "shard_done",
]

T = TypeVar("T")
R = TypeVar("R")

DONE_SUFFIX = ".done"


POLL_S = 0.05
"""How often attempts under a `ShardPolicy` are looked at."""
PROGRESS_EVERY_S = 10.0
"""In a log or a pipe, a progress line at most this often (training's lines keep the same pace)."""
REDRAW_EVERY_S = 0.2
"""On a terminal, the progress line is redrawn at most this often."""


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


def check_policy(policy: ShardPolicy, step: str) -> None:
    """One line naming the step and field for a policy that cannot work."""
    if not isinstance(policy, ShardPolicy):
        raise ProcessingError(
            f"{step}: shard_policy is a {type(policy).__name__}; give a "
            "marin_lab.processing.quarantine.ShardPolicy or None"
        )
    for name in ("retries", "max_bad_shards", "preemption_retries"):
        value = getattr(policy, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ProcessingError(f"{step}: shard_policy.{name}={value!r}: expected a whole number >= 0")
    for name in ("time_limit_s", "memory_bytes"):
        value = getattr(policy, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise ProcessingError(f"{step}: shard_policy.{name}={value!r}: expected a number > 0, or None")


@dataclasses.dataclass
class ShardOutcome(Generic[R]):
    """Results in task order (None for a bad shard) and the bad shards with each attempt's error."""

    results: list[R | None]
    bad: list[dict[str, Any]]


class BadShardsError(ShardTaskError):
    """Shards spent their retries and the step's allowance of bad shards is exceeded."""

    def __init__(self, message: str, bad: list[dict[str, Any]], total: int = 0):
        super().__init__(message)
        self.bad = bad
        self.total = total


def describe_task(task: object) -> str:
    """How a task is named in errors and reports: its short `label` (e.g. the input file) when it
    has one, else its repr (a full config's repr is noise), at most 200 characters."""
    label = getattr(task, "label", None)
    text = str(label) if label is not None else repr(task)
    return text if len(text) <= 200 else text[:197] + "..."


def _ray_if_in_task():
    """The ray module when this code runs inside a Ray task, else None (never imports ray).

    Only a step running as a Ray task (the ray backend) fans out over Ray. A driver that merely
    has Ray initialised (a test session, a notebook) keeps its shards local: its environment
    and in-memory filesystems are not those of the cluster's workers.
    """
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        if not ray.is_initialized():
            return None
        return ray if ray.get_runtime_context().get_task_id() is not None else None
    except Exception:  # a half-imported or stubbed ray module
        return None


class ShardProgress:
    """Shards done of all for one engine call: `tokenize: 120/4000 shards done, 2.1 shards/s, ETA
    30 min 5 s`. On a terminal (`stream` is one) the line is redrawn in place; otherwise it is a log
    record (`logger.info`, which a step's log and its console echo carry) at most every `every_s`,
    the first once the call has run that long, and a last one at the end if any was shown.
    Thread-safe: the engine's threads report shards as they finish."""

    def __init__(
        self,
        desc: str,
        total: int,
        *,
        every_s: float | None = None,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.desc, self.total, self.clock = desc, total, clock
        self.stream = sys.stderr if stream is None else stream
        try:
            self.terminal = bool(self.stream.isatty())
        except (AttributeError, ValueError):  # a closed or stand-in stream
            self.terminal = False
        self.every_s = (REDRAW_EVERY_S if self.terminal else PROGRESS_EVERY_S) if every_s is None else every_s
        self.done = self.bad = 0
        self.started = self.last = clock()
        self.shown = False
        self._width = 0
        self._lock = threading.Lock()

    def line(self, now: float) -> str:
        """The progress as one line (ETA from the mean pace so far, once a shard is done)."""
        text = f"{self.desc}: {self.done}/{self.total} shards done"
        if self.bad:
            text += f" ({self.bad} bad)"
        elapsed = now - self.started
        if 0 < self.done < self.total and elapsed > 0:
            rate = self.done / elapsed
            pace = f"{rate:.2f} shards/s" if rate >= 0.1 else f"{rate * 60:.2f} shards/min"
            text += f", {pace}, ETA {format_duration((self.total - self.done) / rate)}"
        elif self.done == self.total:
            text += f" in {format_duration(elapsed)}"
        return text

    def update(self, done: int = 1, *, bad: bool = False) -> None:
        """`done` more shards finished (a bad one counts as finished: it is not tried again)."""
        with self._lock:
            self.done += done
            self.bad += bad
            now = self.clock()
            if now - self.last >= self.every_s and self.done < self.total:
                self.last = now
                self._show(self.line(now))

    def close(self, *, finished: bool = True) -> None:
        """The last state, when a line was shown (the end of a long phase is on record). A call
        that failed adds none (its error follows); on a terminal its line is ended."""
        with self._lock:
            if self.shown and finished:
                self._show(self.line(self.clock()), end=True)
            elif self.shown and self.terminal:
                self._write("\n")

    def _show(self, text: str, *, end: bool = False) -> None:
        self.shown = True
        if not self.terminal:
            logger.info("%s", text)
            return
        pad = " " * max(0, self._width - len(text))
        self._width = len(text)
        self._write("\r" + text + pad + ("\n" if end else ""))

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a terminal that went away must not fail the step
            pass


def schedule_order(n: int, costs: Sequence[float] | None) -> list[int]:
    """Task indices in the order they are handed out: largest cost first, ties in task order."""
    if costs is None:
        return list(range(n))
    if len(costs) != n:
        raise ValueError(f"map_shards: {len(costs)} costs for {n} tasks")
    return sorted(range(n), key=lambda i: (-costs[i], i))


def input_sizes(urls: Sequence[str]) -> list[int] | None:
    """Sizes in bytes of `urls` (for `map_shards(costs=...)`), or None when a store cannot say."""
    try:
        return [int(fs.size(path)) for fs, path in map(mfs.fs_and_path, urls)]
    except Exception:  # a store without sizes only loses the largest-first order
        return None


def map_shards(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    *,
    num_workers: int,
    desc: str,
    costs: Sequence[float] | None = None,
) -> list[R]:
    """`[fn(t) for t in tasks]` on `num_workers` workers (this process included); results in task
    order; the first failure stops the call and names its task. `costs` (e.g. input bytes) only
    changes the hand-out order. This is `run_shards` without a policy."""
    # Without a policy no result is left out, so none is the None of a bad shard.
    return cast(list[R], run_shards(fn, tasks, num_workers=num_workers, desc=desc, costs=costs).results)


def run_shards(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    *,
    num_workers: int,
    desc: str,
    costs: Sequence[float] | None = None,
    policy: ShardPolicy | None = None,
    labels: Sequence[str] | None = None,
    rerun: str | None = None,
    note: str = "",
) -> ShardOutcome[R]:
    """The shard engine: `fn` over `tasks` on `num_workers` workers, results in task order.

    Without a `policy` the first failing task fails the call (`ShardTaskError`), and tasks run in
    this process and in reused pool processes (or Ray tasks inside a Ray step). With one, each
    attempt runs in a process of its own under the policy's budgets (module docstring): then
    `rerun` is the command named in the error that redoes the step (its finished shards kept),
    `labels` how the report names each task (default `describe_task`), and `note` is added to
    the allowance in the error. `costs` only changes the hand-out order (largest first)."""
    tasks = list(tasks)
    if not tasks:
        return ShardOutcome([], [])
    order = schedule_order(len(tasks), costs)
    progress = ShardProgress(desc, len(tasks))
    try:
        outcome = _run(
            fn,
            tasks,
            order,
            num_workers=num_workers,
            desc=desc,
            policy=policy,
            labels=labels,
            rerun=rerun,
            note=note,
            progress=progress,
        )
    except BaseException:
        progress.close(finished=False)
        raise
    progress.close()
    return outcome


def _run(
    fn: Callable[[T], R],
    tasks: list[T],
    order: list[int],
    *,
    num_workers: int,
    desc: str,
    policy: ShardPolicy | None,
    labels: Sequence[str] | None,
    rerun: str | None,
    note: str,
    progress: ShardProgress,
) -> ShardOutcome[R]:
    """`run_shards` past its checks: inline, pool or Ray tasks, or isolated attempts under a policy."""
    if policy is not None:
        return _run_isolated(
            fn,
            tasks,
            order,
            num_workers=num_workers,
            desc=desc,
            policy=policy,
            labels=labels,
            rerun=rerun,
            note=note,
            progress=progress,
        )
    workers = min(max(1, num_workers), len(tasks))
    if workers <= 1:
        results: list[Any] = [None] * len(tasks)
        for i in order:
            results[i] = _run_one(fn, tasks[i], i, desc)
            progress.update()
        return ShardOutcome(results, [])
    ray = _ray_if_in_task()
    if ray is not None:
        logger.debug("%s: %d tasks, here and on %d Ray task slot(s)", desc, len(tasks), workers - 1)
        remote: _RayRemote | _PoolRemote = _RayRemote(ray, workers - 1)
    else:
        logger.debug("%s: %d tasks, here and in %d local process(es)", desc, len(tasks), workers - 1)
        remote = _PoolRemote(workers - 1)
    return ShardOutcome(_Run(fn, tasks, order, desc, progress).run(remote), [])


def _run_one(fn: Callable[[T], R], task: T, index: int, desc: str) -> R:
    try:
        return fn(task)
    except Exception as err:
        raise _task_error(desc, index, task, err) from err


def _task_error(desc: str, index: int, task: object, err: BaseException) -> ShardTaskError:
    cause = getattr(err, "cause", None) or err  # a Ray task error wraps the original
    return ShardTaskError(f"{desc}: task {index} {describe_task(task)} failed: {type(cause).__name__}: {cause}")


class _Run:
    """One `map_shards` call with helpers: a shared queue of task indices, served by this thread
    (running tasks inline) and by a dispatcher thread that keeps the remote workers busy."""

    def __init__(self, fn, tasks: list, order: list[int], desc: str, progress: ShardProgress):
        self.fn, self.tasks, self.desc, self.progress = fn, tasks, desc, progress
        self.results: list[Any] = [None] * len(tasks)
        self._queue = deque(order)
        self._lock = threading.Lock()
        self.error: ShardTaskError | None = None

    def take(self) -> int | None:
        with self._lock:
            if self.error is not None or not self._queue:
                return None
            return self._queue.popleft()

    def done(self, index: int, result: Any) -> None:
        self.results[index] = result
        self.progress.update()

    def fail(self, index: int, err: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = _task_error(self.desc, index, self.tasks[index], err)
                self.error.__cause__ = err

    def abort(self) -> None:
        with self._lock:
            self._queue.clear()

    def run(self, remote) -> list:
        # This process takes the first (largest) task; the others get the next ones before it
        # starts, so every worker has work from the beginning whatever the thread timing.
        mine = self.take()
        try:
            remote.fill(self)
        except BaseException:
            remote.close()
            raise
        dispatcher = threading.Thread(target=remote.serve, args=(self,), name="map_shards", daemon=True)
        dispatcher.start()
        try:
            while mine is not None:
                try:
                    result = self.fn(self.tasks[mine])
                except Exception as err:
                    self.fail(mine, err)
                    break
                self.done(mine, result)
                mine = self.take()
        except BaseException:  # KeyboardInterrupt: stop handing out work, then re-raise
            self.abort()
            raise
        finally:
            remote.drain(self)
            dispatcher.join()
            remote.close()
        if self.error is not None:
            raise self.error
        if remote.error is not None:  # the dispatcher itself broke (e.g. the pool died)
            raise remote.error
        return self.results


# One idle pool is kept for the next `map_shards` call of this process (a dedup step calls it three
# times): starting a spawned worker costs ~0.5 s of imports and model loading. It is reused only
# under the same environment variables, sys.path and working directory, so a worker never runs
# with settings its caller has since changed.
_IDLE_POOL: tuple[tuple, cf.ProcessPoolExecutor] | None = None
_IDLE_LOCK = threading.Lock()


def _pool_key(slots: int) -> tuple:
    return slots, tuple(sorted(os.environ.items())), tuple(sys.path), os.getcwd()


def _take_pool(slots: int) -> tuple[tuple, cf.ProcessPoolExecutor]:
    global _IDLE_POOL
    key = _pool_key(slots)
    with _IDLE_LOCK:
        idle, _IDLE_POOL = _IDLE_POOL, None
    if idle is not None:
        if idle[0] == key:
            return idle
        idle[1].shutdown(wait=False, cancel_futures=True)
    return key, cf.ProcessPoolExecutor(max_workers=slots, mp_context=multiprocessing.get_context("spawn"))


def _give_back_pool(key: tuple, pool: cf.ProcessPoolExecutor) -> None:
    global _IDLE_POOL
    with _IDLE_LOCK:
        if _IDLE_POOL is None:
            _IDLE_POOL = (key, pool)
            return
    pool.shutdown(wait=True)


def close_idle_pool() -> None:
    """Stop the worker processes kept for the next `map_shards` call (also done at exit)."""
    global _IDLE_POOL
    with _IDLE_LOCK:
        idle, _IDLE_POOL = _IDLE_POOL, None
    if idle is not None:
        idle[1].shutdown(wait=True, cancel_futures=True)


# Every exit must stop the idle workers, or they outlive their parent holding its stdout and
# stderr (a `subprocess.run` of an experiment then never returns). An interpreter's normal exit runs
# atexit handlers; a multiprocessing child (the local backend's step worker) ends with os._exit
# after running only multiprocessing's finalizers, and a forked child starts with the finalizers it
# inherited cleared, so the hook is registered again after each fork. Its priority puts it before
# the finalizers of the pool's own queues (priority 10), which would stop its messages' feeder.
class _ExitHook:
    def register(self) -> None:
        multiprocessing.util.Finalize(None, close_idle_pool, exitpriority=100)


def _forget_inherited_pool() -> None:
    # A forked child holds a copy of the parent's idle pool without its threads: unusable, and
    # not the child's to stop.
    global _IDLE_POOL, _IDLE_LOCK
    _IDLE_POOL, _IDLE_LOCK = None, threading.Lock()


_EXIT_HOOK = _ExitHook()
_EXIT_HOOK.register()
atexit.register(close_idle_pool)
multiprocessing.util.register_after_fork(_EXIT_HOOK, _ExitHook.register)
os.register_at_fork(after_in_child=_forget_inherited_pool)


class _PoolRemote:
    """`slots` spawned processes, each given one task at a time from the shared queue."""

    def __init__(self, slots: int):
        self.slots = slots
        self.error: BaseException | None = None
        self._key, self._pool = _take_pool(slots)
        self._in_flight: dict[cf.Future, int] = {}

    def fill(self, run: _Run) -> None:
        while len(self._in_flight) < self.slots and (i := run.take()) is not None:
            self._in_flight[self._pool.submit(run.fn, run.tasks[i])] = i

    def serve(self, run: _Run) -> None:
        in_flight = self._in_flight
        try:
            while True:
                self.fill(run)
                if not in_flight:
                    return
                finished, _ = cf.wait(in_flight, return_when=cf.FIRST_COMPLETED)
                for fut in finished:
                    i = in_flight.pop(fut)
                    err = fut.exception()
                    if err is None:
                        run.done(i, fut.result())
                    else:
                        run.fail(i, err)
                if run.error is not None:
                    return  # close() cancels what has not started
        except BaseException as err:  # pragma: no cover - a broken pool or interpreter shutdown
            self.error = err
            run.abort()

    def drain(self, run: _Run) -> None:
        """Nothing to do: the pool's processes do not wait for this one's CPU."""

    def close(self) -> None:
        for fut in self._in_flight:
            fut.cancel()  # not started yet: never will be
        cf.wait(self._in_flight)  # running ones finish: a pool is handed on idle or not at all
        if self.error is None and not getattr(self._pool, "_broken", False):
            _give_back_pool(self._key, self._pool)
        else:
            self._pool.shutdown(wait=True, cancel_futures=True)


class _RayRemote:
    """At most `slots` Ray tasks in flight, so a step does not flood the cluster."""

    def __init__(self, ray, slots: int):
        self.ray, self.slots = ray, slots
        self.error: BaseException | None = None
        self._remote = ray.remote(num_cpus=1)(_call)
        self._in_flight: dict[Any, int] = {}

    def fill(self, run: _Run) -> None:
        while len(self._in_flight) < self.slots and (i := run.take()) is not None:
            self._in_flight[self._remote.remote(run.fn, run.tasks[i])] = i

    def serve(self, run: _Run) -> None:
        ray, in_flight = self.ray, self._in_flight
        try:
            while True:
                self.fill(run)
                if not in_flight:
                    return
                ready, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in ready:
                    i = in_flight.pop(ref)
                    try:
                        run.done(i, ray.get(ref))
                    except Exception as err:
                        run.fail(i, err)
                if run.error is not None:
                    return  # close() cancels the others
        except BaseException as err:  # pragma: no cover - Ray itself failed
            self.error = err
            run.abort()

    def drain(self, run: _Run) -> None:
        """Wait, in the step task's main thread, for what is still in flight (called once nothing
        is left to hand out). Ray lends a task's CPU to other tasks only while its *main thread*
        blocks in ray.get/ray.wait: on a full cluster (two data steps on 2 CPUs) the helpers
        could otherwise never start, and the step waited for them forever. After a failure they
        are cancelled instead (a task not started yet then never starts)."""
        refs = list(self._in_flight)
        if refs and run.error is not None:
            for ref in refs:
                self.ray.cancel(ref)
        elif refs:
            self.ray.wait(refs, num_returns=len(refs))

    def close(self) -> None:
        for ref in self._in_flight:
            self.ray.cancel(ref)


_END = object()


def prefetch(items: Iterable[T], *, depth: int = 2) -> Iterator[T]:
    """Iterate `items` in a background thread, at most `depth` items ahead of the consumer.

    For reading while computing: the producer's decompression and I/O run while the consumer is
    in code that releases the GIL (a tokenizer, numpy). Errors of the producer are raised here;
    stopping early stops the producer."""
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((_END, None))
        except BaseException as err:  # handed to the consumer, raised there
            put((_END, err))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, err = slots.get()
            if err is not None:
                raise err
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        thread.join()


def _call(fn, task):
    return fn(task)


# ---------------------------------------------------------------- under a ShardPolicy


def _run_isolated(
    fn: Callable[[Any], Any],
    tasks: list[Any],
    order: list[int],
    *,
    num_workers: int,
    desc: str,
    policy: ShardPolicy,
    labels: Sequence[str] | None,
    rerun: str | None,
    note: str,
    progress: ShardProgress,
) -> ShardOutcome:
    """Each attempt in a process of its own (a Ray task inside a Ray step, else a spawned process),
    at most `num_workers` at a time, retried within `policy`'s budgets."""
    names = list(labels) if labels is not None else [describe_task(t) for t in tasks]
    ray = _ray_if_in_task()
    if ray is not None:
        check_memory_fits(ray, policy.memory_bytes, desc)
        remote = ray.remote(_call).options(num_cpus=1, max_retries=0, memory=policy.memory_bytes)

        def start(i: int) -> RayAttempt | LocalAttempt:
            return RayAttempt(ray, remote, fn, tasks[i])
    else:
        ctx = multiprocessing.get_context("spawn")

        def start(i: int) -> RayAttempt | LocalAttempt:
            return LocalAttempt(ctx, fn, tasks[i])

    results: list[Any] = [None] * len(tasks)
    attempts: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(tasks))}
    waiting = deque(order)
    running: dict[int, RayAttempt | LocalAttempt] = {}
    bad: list[int] = []
    workers = max(1, num_workers)
    while waiting or running:
        while waiting and len(running) < workers:
            i = waiting.popleft()
            running[i] = start(i)
        time.sleep(POLL_S)
        for i, attempt in list(running.items()):
            outcome = attempt.poll()
            if (
                outcome is None
                and policy.time_limit_s is not None
                and attempt.started is not None
                and time.monotonic() - attempt.started > policy.time_limit_s
            ):
                attempt.kill()
                outcome = "time_limit", f"over the time limit of {policy.time_limit_s:g} s; killed"
            if outcome is None:
                continue
            del running[i]
            kind, value = outcome
            if kind == "ok":
                results[i] = value
                progress.update()
                continue
            attempts[i].append(
                {
                    "attempt": len(attempts[i]) + 1,
                    "kind": kind,
                    "error": value,
                    "seconds": round(time.monotonic() - (attempt.started or attempt.created), 3),
                }
            )
            failures = sum(a["kind"] != "preempted" for a in attempts[i])
            preemptions = len(attempts[i]) - failures
            if failures > policy.retries or preemptions > policy.preemption_retries:
                bad.append(i)
                progress.update(bad=True)
            else:
                waiting.append(i)
    report = [{"task": i, "shard": names[i], "attempts": attempts[i]} for i in sorted(bad)]
    if len(bad) > policy.max_bad_shards:
        raise BadShardsError(bad_shards_message(desc, report, len(tasks), policy, rerun, note), report, len(tasks))
    return ShardOutcome(results, report)


def bad_shards_message(
    desc: str, report: list[dict[str, Any]], total: int, policy: ShardPolicy, rerun: str | None, note: str = ""
) -> str:
    """The error of a call whose bad shards exceed the allowance: each bad shard with its last
    attempt's error, and the command that redoes only them."""
    kinds = {a["kind"] for r in report for a in r["attempts"]}
    everyone = len(report) == total and kinds <= {"worker_died", "out_of_memory", "preempted"}
    shards = "shard" if total == 1 else "shards"
    head = (
        (
            f"{desc}: the one shard lost its worker on every attempt"
            if total == 1
            else f"{desc}: every one of {total} shards lost its worker on every attempt"
        )
        + f" ({', '.join(sorted(kinds))})"
        if everyone
        else f"{desc}: {len(report)} of {total} {shards} {'is' if len(report) == total == 1 else 'are'} bad (allowed: "
        f"{policy.max_bad_shards}{note}); the other {total - len(report)} finished and are kept"
    )
    lines = [head]
    for r in report:
        last = r["attempts"][-1]
        lines.append(f"  {r['shard']}: {len(r['attempts'])} attempt(s), last {last['kind']}: {last['error']}")
    how = rerun or "run the experiment again with --force_run_failed true (add --run_only STEP for this step alone)"
    lines.append(f"  to redo only these shards (finished ones keep their completion markers): {how}")
    return "\n".join(lines)


def done_marker(output_file: str) -> str:
    return output_file + DONE_SUFFIX


def shard_done(output_file: str) -> bool:
    """Whether `output_file` was completely written (its completion marker exists)."""
    return mfs.exists(done_marker(output_file))


def mark_shard_done(output_file: str, info: dict) -> None:
    """Record that `output_file` is complete; `info` (JSON: counts) is kept for reruns."""
    mfs.write_json(done_marker(output_file), info, indent=None)


def read_shard_done(output_file: str) -> dict | None:
    """The `info` recorded by `mark_shard_done`, or None when the shard is not done.

    A damaged marker (not a JSON object) counts as not done, so the shard is redone rather than
    failing every rerun of the step.
    """
    try:
        info = mfs.read_json_or_none(done_marker(output_file))
    except (ValueError, UnicodeDecodeError, RecursionError):
        info = "damaged"
    if info is not None and not isinstance(info, dict):
        logger.warning("%s is damaged (not a JSON object); redoing that shard", done_marker(output_file))
        return None
    return info
