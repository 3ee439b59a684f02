"""Running one function over many shards, and per-shard completion markers.

`map_shards` is the only place a data step meets parallelism. Inside a Ray task (the ray backend
runs each step as one) every shard becomes a Ray task, so a step fans out over the cluster; on the
local backend it uses a process pool (spawn, so no state leaks from the parent); with one worker
it runs inline, anywhere, which keeps tests and debugging simple. Results come back in task order, so
a step's output never depends on how many workers there were or which finished first.

A shard counts as done only when its marker `{output_file}.done` exists. The marker is written
after the shard itself was written atomically, so a crash leaves either no marker (the shard is
redone) or a complete shard with its marker (it is skipped on the rerun, and its counts are read
back from the marker).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from marin_lab.io import fs as mfs
from marin_lab.processing.errors import ShardTaskError

logger = logging.getLogger(__name__)

__all__ = ["map_shards", "shard_done", "mark_shard_done", "read_shard_done", "done_marker"]

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


def map_shards(
    fn: Callable[[T], R], tasks: Sequence[T], *, num_workers: int, desc: str
) -> list[R]:
    """`[fn(t) for t in tasks]`, in parallel; results in task order; a failure names its task."""
    tasks = list(tasks)
    if not tasks:
        return []
    ray = _ray_if_in_task() if num_workers > 1 else None
    if ray is not None:
        logger.debug("%s: %d tasks as Ray tasks (at most %d at a time)", desc, len(tasks), num_workers)
        return _map_ray(ray, fn, tasks, num_workers=num_workers, desc=desc)
    workers = min(max(1, num_workers), len(tasks))
    logger.debug("%s: %d tasks on %d local worker(s)", desc, len(tasks), workers)
    bar = _progress(len(tasks), desc)
    try:
        if workers <= 1:
            results = []
            for i, task in enumerate(tasks):
                results.append(_run_one(fn, task, i, desc))
                if bar is not None:
                    bar.update(1)
            return results
        return _map_pool(fn, tasks, workers=workers, desc=desc, bar=bar)
    finally:
        if bar is not None:
            bar.close()


def _run_one(fn: Callable[[T], R], task: T, index: int, desc: str) -> R:
    try:
        return fn(task)
    except Exception as err:
        raise ShardTaskError(
            f"{desc}: task {index} {_describe(task)} failed: {type(err).__name__}: {err}"
        ) from err


def _map_pool(fn, tasks: list, *, workers: int, desc: str, bar) -> list:
    results: list[Any] = [None] * len(tasks)
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
        try:
            for fut in cf.as_completed(futures):
                i = futures[fut]
                try:
                    results[i] = fut.result()
                except Exception as err:
                    raise ShardTaskError(
                        f"{desc}: task {i} {_describe(tasks[i])} failed: "
                        f"{type(err).__name__}: {err}"
                    ) from err
                if bar is not None:
                    bar.update(1)
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    return results


def _call(fn, task):
    return fn(task)


def _map_ray(ray, fn, tasks: list, *, num_workers: int, desc: str) -> list:
    """Each task a Ray task; at most `num_workers` in flight so a step does not flood the cluster."""
    remote = ray.remote(num_cpus=1)(_call)
    limit = max(1, num_workers)
    results: list[Any] = [None] * len(tasks)
    in_flight: dict[Any, int] = {}
    next_task = 0
    while next_task < len(tasks) or in_flight:
        while next_task < len(tasks) and len(in_flight) < limit:
            in_flight[remote.remote(fn, tasks[next_task])] = next_task
            next_task += 1
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        for ref in ready:
            i = in_flight.pop(ref)
            try:
                results[i] = ray.get(ref)
            except Exception as err:
                for other in in_flight:
                    ray.cancel(other)
                cause = getattr(err, "cause", None) or err
                raise ShardTaskError(
                    f"{desc}: task {i} {_describe(tasks[i])} failed: "
                    f"{type(cause).__name__}: {cause}"
                ) from err
    return results


def done_marker(output_file: str) -> str:
    return output_file + DONE_SUFFIX


def shard_done(output_file: str) -> bool:
    """Whether `output_file` was completely written (its completion marker exists)."""
    return mfs.exists(done_marker(output_file))


def mark_shard_done(output_file: str, info: dict) -> None:
    """Record that `output_file` is complete; `info` (JSON: counts) is kept for reruns."""
    mfs.write_json(done_marker(output_file), info, indent=None)


def read_shard_done(output_file: str) -> dict | None:
    """The `info` recorded by `mark_shard_done`, or None when the shard is not done."""
    return mfs.read_json_or_none(done_marker(output_file))
