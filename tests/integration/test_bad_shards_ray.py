"""Bad shards inside a Ray step: each shard a Ray task declaring `memory=`, failures told apart."""

from __future__ import annotations

import pytest

from marin_lab.processing.quarantine import ShardPolicy, map_shards_quarantined
from tests.unit.test_bad_shards import shard_fn


@pytest.mark.ray
def test_inside_a_ray_step_shards_are_ray_tasks_with_memory_and_failures_are_told_apart(ray_cluster, tmp_path):
    def step():
        tasks = [(n, str(tmp_path)) for n in ("a", "raise-1", "die-2")]
        outcome = map_shards_quarantined(shard_fn, tasks, num_workers=2, desc="tokenize",
                                         policy=ShardPolicy(retries=0, max_bad_shards=2, memory_bytes=50 * 2**20))
        return outcome.results, {b["shard"].split("'")[1]: b["attempts"][0]["kind"] for b in outcome.bad}

    results, kinds = ray_cluster.get(ray_cluster.remote(num_cpus=0)(step).remote())
    assert results[0] == "A" and kinds == {"raise-1": "exception", "die-2": "worker_died"}
