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
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import logging
import multiprocessing
import multiprocessing.util
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from marin_lab.io import fs as mfs
from marin_lab.processing.errors import ShardTaskError

logger = logging.getLogger(__name__)

__all__ = [
    "close_idle_pool",
    "done_marker",
    "input_sizes",
    "map_shards",
    "mark_shard_done",
    "prefetch",
    "read_shard_done",
    "schedule_order",
    "shard_done",
]

T = TypeVar("T")
R = TypeVar("R")

DONE_SUFFIX = ".done"


def _describe(task: object) -> str:
    # Tasks may carry a short `label` (e.g. the input file); a full config repr is noise.
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


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a core dependency
        return None
    # disable=None: a bar only when a person watches a terminal.
    return tqdm(total=total, desc=desc, unit="shard", disable=None, leave=False)


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
    order; a failure names its task. `costs` (e.g. input bytes) only changes the hand-out order."""
    tasks = list(tasks)
    if not tasks:
        return []
    order = schedule_order(len(tasks), costs)
    workers = min(max(1, num_workers), len(tasks))
    bar = _progress(len(tasks), desc)
    try:
        if workers <= 1:
            results: list[Any] = [None] * len(tasks)
            for i in order:
                results[i] = _run_one(fn, tasks[i], i, desc)
                if bar is not None:
                    bar.update(1)
            return results
        ray = _ray_if_in_task()
        if ray is not None:
            logger.debug("%s: %d tasks, here and on %d Ray task slot(s)", desc, len(tasks), workers - 1)
            remote: _RayRemote | _PoolRemote = _RayRemote(ray, workers - 1)
        else:
            logger.debug("%s: %d tasks, here and in %d local process(es)", desc, len(tasks), workers - 1)
            remote = _PoolRemote(workers - 1)
        return _Run(fn, tasks, order, desc, bar).run(remote)
    finally:
        if bar is not None:
            bar.close()


def _run_one(fn: Callable[[T], R], task: T, index: int, desc: str) -> R:
    try:
        return fn(task)
    except Exception as err:
        raise _task_error(desc, index, task, err) from err


def _task_error(desc: str, index: int, task: object, err: BaseException) -> ShardTaskError:
    cause = getattr(err, "cause", None) or err  # a Ray task error wraps the original
    return ShardTaskError(f"{desc}: task {index} {_describe(task)} failed: {type(cause).__name__}: {cause}")


class _Run:
    """One `map_shards` call with helpers: a shared queue of task indices, served by this thread
    (running tasks inline) and by a dispatcher thread that keeps the remote workers busy."""

    def __init__(self, fn, tasks: list, order: list[int], desc: str, bar):
        self.fn, self.tasks, self.desc, self.bar = fn, tasks, desc, bar
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
        if self.bar is not None:
            self.bar.update(1)

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
