"""map_shards (inline and process pool) and per-shard completion markers."""

from __future__ import annotations

import multiprocessing
import sys
import time

import pytest

from marin_lab.processing.errors import ProcessingError, ShardTaskError
from marin_lab.processing.shards import (
    close_idle_pool,
    map_shards,
    mark_shard_done,
    prefetch,
    read_shard_done,
    schedule_order,
    shard_done,
)


def _square(x: int) -> int:
    return x * x


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise RuntimeError("three is bad")
    return x


@pytest.mark.parametrize("workers", [1, 2])
def test_results_in_task_order(workers):
    assert map_shards(_square, list(range(7)), num_workers=workers, desc="sq") == [
        x * x for x in range(7)
    ]


def test_empty_tasks():
    assert map_shards(_square, [], num_workers=4, desc="sq") == []


@pytest.mark.parametrize("workers", [1, 2])
def test_error_names_task(workers):
    with pytest.raises(ShardTaskError, match=r"step-x: task 3 3 failed: RuntimeError: three is bad") as info:
        map_shards(_fail_on_three, [0, 1, 2, 3, 4], num_workers=workers, desc="step-x")
    assert isinstance(info.value, ProcessingError)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_done_marker_round_trip(tmp_path):
    out = str(tmp_path / "shard-00000.jsonl.zst")
    assert not shard_done(out)
    assert read_shard_done(out) is None
    mark_shard_done(out, {"documents": 3})
    assert shard_done(out)
    assert read_shard_done(out) == {"documents": 3}
    assert (tmp_path / "shard-00000.jsonl.zst.done").exists()


def test_done_marker_on_memory_fs():
    out = "memory://shards-test/out/shard-00001.jsonl.gz"
    mark_shard_done(out, {"documents": 1})
    assert shard_done(out)


def _pid(_: int) -> int:
    import os

    return os.getpid()


def test_calling_process_is_one_of_the_workers():
    import os

    pids = map_shards(_pid, list(range(3)), num_workers=2, desc="pid")
    # The caller runs the first task itself; the second went to the pool before it started.
    assert pids[0] == os.getpid() and pids[1] != os.getpid()


def test_largest_cost_is_handed_out_first():
    assert schedule_order(4, [5, 40, 5, 10]) == [1, 3, 0, 2]
    assert schedule_order(3, None) == [0, 1, 2]
    order: list[int] = []
    map_shards(order.append, [0, 1, 2, 3], num_workers=1, desc="o", costs=[1, 4, 2, 3])
    assert order == [1, 3, 2, 0]


def test_prefetch_yields_in_order_and_raises_producer_errors():
    assert list(prefetch(iter(range(50)), depth=2)) == list(range(50))

    def broken():
        yield 1
        raise ValueError("bad shard")

    with pytest.raises(ValueError, match="bad shard"):
        list(prefetch(broken()))


def test_prefetch_stops_its_producer_when_the_consumer_stops():
    closed = []

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.append(True)

    for i in prefetch(endless(), depth=1):
        if i == 3:
            break
    assert closed == [True]


def test_worker_processes_are_reused_only_under_the_same_environment(monkeypatch):
    import os

    first = map_shards(_pid, [0, 1], num_workers=2, desc="pid")[1]
    again = map_shards(_pid, [0, 1], num_workers=2, desc="pid")[1]
    assert first == again != os.getpid()  # no second start-up for the second call
    monkeypatch.setenv("MARIN_LAB_TEST_POOL", "changed")
    changed = map_shards(_pid, [0, 1], num_workers=2, desc="pid")[1]
    assert changed not in (first, os.getpid())
    close_idle_pool()


def _map_pids_then_exit(out) -> None:
    out.put(sorted(set(map_shards(_pid, [0, 1, 2, 3], num_workers=2, desc="pid"))))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("start", ["spawn", "forkserver", "fork"])
def test_idle_workers_end_with_a_multiprocessing_child_that_used_them(start):
    # Regression: the local backend's step worker is a multiprocessing child, which exits with
    # os._exit and skips atexit; the kept-idle pool then outlived it, holding the experiment's
    # stdout open, and `subprocess.run(experiment)` never returned. A forked child also starts
    # with its inherited exit hooks cleared.
    ctx = multiprocessing.get_context(start)
    if start == "forkserver":  # as the local backend does: the step's modules loaded before the fork
        ctx.set_forkserver_preload(["marin_lab.processing.shards", "tests.unit.test_shards"])
    out = ctx.Queue()
    child = ctx.Process(target=_map_pids_then_exit, args=(out,))
    child.start()
    pids = out.get(timeout=120)
    child.join(timeout=120)
    assert child.exitcode == 0 and len(pids) == 2
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], "map_shards' idle workers outlived the process that started them"


@pytest.mark.ray
def test_map_shards_in_a_step_holding_every_cpu_does_not_hang(ray_cluster):
    """Regression: two data steps on a 2-CPU machine hold both CPUs; their helper tasks could
    never start (Ray lends a task's CPU only while its main thread blocks in ray.get/wait), so
    the quickstart's two downloads waited for each other forever."""
    import ray

    from tests import data_fixtures as fx  # importable by Ray workers

    every_cpu = int(ray.cluster_resources()["CPU"])
    ref = ray.remote(fx.map_pids_on_a_full_cluster).options(num_cpus=every_cpu).remote(8)
    ready, _ = ray.wait([ref], timeout=240)
    assert ready, "map_shards inside a task holding every CPU did not finish"
    assert len(ray.get(ref)) == 8
