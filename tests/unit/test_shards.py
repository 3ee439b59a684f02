"""map_shards (inline and process pool) and per-shard completion markers."""

from __future__ import annotations

import pytest

from marin_lab.processing.errors import ProcessingError, ShardTaskError
from marin_lab.processing.shards import map_shards, mark_shard_done, read_shard_done, shard_done


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
