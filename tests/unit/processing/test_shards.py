"""map_shards (inline and process pool), its progress lines, and per-shard completion markers."""

from __future__ import annotations

import io
import logging
import multiprocessing
import pathlib
import sys
import time

import pytest

from marin_lab.processing import shards
from marin_lab.processing.errors import ProcessingError, ShardTaskError
from marin_lab.processing.shards import (
    ShardProgress,
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
    assert map_shards(_square, list(range(7)), num_workers=workers, desc="sq") == [x * x for x in range(7)]


def test_empty_tasks():
    assert map_shards(_square, [], num_workers=4, desc="sq") == []


@pytest.mark.slow
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


@pytest.mark.slow
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
        ctx.set_forkserver_preload(["marin_lab.processing.shards", "tests.unit.processing.test_shards"])
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


# ---------------------------------------------------------------- progress: shards done


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _progress_lines(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "marin_lab.processing.shards" and "shards done" in r.getMessage()
    ]


def test_in_a_log_progress_is_a_plain_line_at_most_every_ten_seconds(caplog):
    """Thousands of shards over 31 s give three lines on the way and one at the end, not one a shard."""
    caplog.set_level(logging.INFO, logger="marin_lab.processing.shards")
    clock = _Clock()
    progress = ShardProgress("tokenize", 4000, stream=io.StringIO(), clock=clock)
    for _ in range(4000):
        clock.now += 1 / 128  # exact in binary: the lines fall on whole multiples of 10 s
        progress.update()
    progress.close()
    lines = _progress_lines(caplog)
    assert lines == [
        "tokenize: 1280/4000 shards done, 128.00 shards/s, ETA 21 s",
        "tokenize: 2560/4000 shards done, 128.00 shards/s, ETA 11 s",
        "tokenize: 3840/4000 shards done, 128.00 shards/s, ETA 1 s",
        "tokenize: 4000/4000 shards done in 31 s",
    ]


def test_a_short_call_adds_no_progress_line(caplog):
    caplog.set_level(logging.INFO, logger="marin_lab.processing.shards")
    assert map_shards(_square, list(range(5)), num_workers=1, desc="sq") == [x * x for x in range(5)]
    assert _progress_lines(caplog) == []


@pytest.mark.parametrize("workers", [1, 2])
def test_every_shard_done_is_counted_whoever_ran_it(workers, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="marin_lab.processing.shards")
    monkeypatch.setattr(shards, "PROGRESS_EVERY_S", 0.0)
    map_shards(_square, list(range(4)), num_workers=workers, desc="sq")
    lines = _progress_lines(caplog)
    assert [line.split(" shards")[0] for line in lines] == ["sq: 1/4", "sq: 2/4", "sq: 3/4", "sq: 4/4"]
    assert lines[-1].startswith("sq: 4/4 shards done in ")


def test_a_slow_shard_shows_its_pace_in_minutes(caplog):
    caplog.set_level(logging.INFO, logger="marin_lab.processing.shards")
    clock = _Clock()
    progress = ShardProgress("dedup", 3, stream=io.StringIO(), clock=clock)
    clock.now = 600.0
    progress.update(bad=True)
    assert _progress_lines(caplog) == ["dedup: 1/3 shards done (1 bad), 0.10 shards/min, ETA 20 min 0 s"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_redrawn_in_place(caplog):
    caplog.set_level(logging.INFO, logger="marin_lab.processing.shards")
    clock, term = _Clock(), _Terminal()
    progress = ShardProgress("extract", 12, stream=term, clock=clock)
    for _ in range(12):
        clock.now += 1.0
        progress.update()
    progress.close()
    text = term.getvalue()
    assert text.count("\r") == 12 and text.endswith("\n")
    # The last state, padded with blanks over the end of the longer line it replaces.
    previous = "extract: 11/12 shards done, 1.00 shards/s, ETA 1 s"
    assert text.rsplit("\r", 1)[1] == "extract: 12/12 shards done in 12 s".ljust(len(previous)) + "\n"
    assert text.count("\n") == 1  # one line on the screen, redrawn
    assert "\rextract: 11/12 shards done, 1.00 shards/s, ETA 1 s" in text
    assert _progress_lines(caplog) == []  # not also logged


def _fail_at_end(x: int) -> int:
    if x == 2:
        raise RuntimeError("the last shard is bad")
    return x


def test_a_failed_call_adds_no_last_line_and_ends_the_terminal_line(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="marin_lab.processing.shards")
    monkeypatch.setattr(shards, "PROGRESS_EVERY_S", 0.0)
    with pytest.raises(ShardTaskError, match="the last shard is bad"):
        map_shards(_fail_at_end, [0, 1, 2], num_workers=1, desc="extract")
    assert [line.split(" shards")[0] for line in _progress_lines(caplog)] == ["extract: 1/3", "extract: 2/3"]
    clock, term = _Clock(), _Terminal()
    progress = ShardProgress("extract", 3, stream=term, clock=clock)
    clock.now = 1.0
    progress.update()
    progress.close(finished=False)
    assert term.getvalue() == "\rextract: 1/3 shards done, 1.00 shards/s, ETA 2 s\n"


def test_a_steps_log_carries_its_progress_lines(tmp_path, monkeypatch):
    """Inside a step (output captured into its log, as the executor runs it) the lines are plain
    log lines: in the log file and its console echo."""
    from marin_lab.execution.run.logs import LogSpec, capture

    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # as in a step's worker process
    stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115 - fd 2 (which the capture takes) for the test's length
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(shards, "PROGRESS_EVERY_S", 0.0)
    url = str(tmp_path / "attempt-0.log")
    with capture(LogSpec(url=url, label="s/x-1234", echo=False)):
        map_shards(_square, list(range(3)), num_workers=1, desc="filter")
    log = pathlib.Path(url).read_text(encoding="utf-8")
    assert "filter: 2/3 shards done" in log and "filter: 3/3 shards done in 0 s" in log
    assert "\r" not in log
