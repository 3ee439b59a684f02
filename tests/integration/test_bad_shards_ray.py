"""Bad shards inside a Ray step: each shard a Ray task declaring `memory=`, failures told apart, and
a memory request no node can meet refused."""

from __future__ import annotations

import pytest

from marin_lab.processing.attempts import classify_ray_error
from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.shards import ShardPolicy, run_shards
from tests.unit.processing.test_bad_shards import shard_fn


@pytest.mark.ray
def test_inside_a_ray_step_shards_are_ray_tasks_with_memory_and_failures_are_told_apart(ray_cluster, tmp_path):
    def step():
        tasks = [(n, str(tmp_path)) for n in ("a", "raise-1", "die-2")]
        outcome = run_shards(
            shard_fn,
            tasks,
            num_workers=2,
            desc="tokenize",
            policy=ShardPolicy(retries=0, max_bad_shards=2, memory_bytes=50 * 2**20),
        )
        return outcome.results, {b["shard"].split("'")[1]: b["attempts"][0]["kind"] for b in outcome.bad}

    results, kinds = ray_cluster.get(ray_cluster.remote(num_cpus=0)(step).remote())
    assert results[0] == "A" and kinds == {"raise-1": "exception", "die-2": "worker_died"}


def test_ray_errors_are_classified_by_what_happened_to_the_shard():
    """Ray's own exception classes (built, not raised by a cluster: its memory monitor is too slow
    to trigger on demand): out of memory vs a crashed worker vs a lost node vs an exception."""
    from ray import exceptions as rx

    def kind(err, **kw):
        return classify_ray_error(err, **kw)[0]

    assert classify_ray_error(rx.OutOfMemoryError("Task was killed due to the node running low on memory.")) == (
        "out_of_memory",
        "Ray's memory monitor killed the worker: Task was killed due to the node running low on memory.",
    )
    assert kind(rx.RayTaskError("f", "tb", MemoryError("cannot allocate")).as_instanceof_cause()) == "out_of_memory"
    assert kind(rx.WorkerCrashedError()) == "worker_died"
    assert kind(rx.WorkerCrashedError(), oom_kill_seen=True) == "out_of_memory"  # the kernel's killer
    assert kind(rx.NodeDiedError("node 10.0.0.3 died")) == "preempted"
    assert kind(rx.LocalRayletDiedError()) == "preempted"
    raised = rx.RayTaskError("f", "tb", ValueError("cannot parse shard-3")).as_instanceof_cause()
    assert classify_ray_error(raised) == ("exception", "ValueError: cannot parse shard-3")


@pytest.mark.ray
def test_a_memory_request_no_node_can_meet_is_refused_not_left_pending(ray_cluster, tmp_path):
    def step():
        try:
            run_shards(
                shard_fn, [("a", str(tmp_path))], num_workers=1, desc="tokenize", policy=ShardPolicy(memory_bytes=2**50)
            )
        except ProcessingError as err:
            return str(err)
        return "started"

    message = ray_cluster.get(ray_cluster.remote(num_cpus=0)(step).remote(), timeout=120)
    assert message.startswith("tokenize: shard_policy.memory_bytes=1125899906842624 is more than the largest node")
