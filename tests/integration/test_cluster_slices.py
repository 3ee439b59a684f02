"""The slice-aware runner on a fake multi-node TPU cluster: two v4-16 slices of two hosts each.

Each fake host is a Ray node carrying what Ray's TPU support puts on a real TPU VM (`TPU: 4`, a
resource named after its slice, `TPU-v4-16-head` on the slice's first host, the `ray.io/tpu-*`
labels, `TPU_NAME`), so slices are reserved by Ray's own `ray.util.tpu`, and its own instance
metadata stand-in on 127.0.0.1. The training workload is
`marin_lab.testing.simulate.toy_train` (a deterministic numpy loop that checkpoints like the real
trainer), so preemption drills finish in seconds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time

import numpy as np
import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402

from marin_lab.cluster import (  # noqa: E402
    CpuResources,
    FilePreemptionProbe,
    PreemptedError,
    SliceCapacityTimeout,
    StepCancelled,
    TpuResources,
)
from marin_lab.execution import ExecutorMainConfig
from marin_lab.testing.local_cluster import LocalTpuCluster  # noqa: E402
from marin_lab.testing.simulate import ReportHostConfig, ToyTrainConfig, report_host, toy_train  # noqa: E402

pytestmark = pytest.mark.ray
TPU = "v4-16"  # 8 chips = 2 hosts of 4 chips


@pytest.fixture(scope="module")
def tpu_cluster():
    if ray.is_initialized():
        ray.shutdown()
    cluster = LocalTpuCluster(TPU, slice_names=("slice-a", "slice-b")).start()
    try:
        yield cluster
    finally:
        cluster.shutdown()


def _live_groups() -> list[dict]:
    """Every placement group Ray has not removed (slice groups, held heads, anyone's)."""
    return [info for info in ray.util.placement_group_table().values() if info["state"] != "REMOVED"]


def _no_groups_left(timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _live_groups() and time.monotonic() < deadline:  # removal is asynchronous
        time.sleep(0.1)
    assert _live_groups() == []


def _reference_digest(tmp_path, **overrides) -> bytes:
    """Parameters of an unpreempted run, trained in-process (single writer, no Ray)."""
    out = tmp_path / "reference"
    out.mkdir()
    toy_train(ToyTrainConfig(output_path=str(out), **overrides))
    return np.load(out / "final_params.npy").tobytes()


def _named_host_actor(step_name: str, suffix: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["name"].startswith(f"marin:{step_name}") and entry["name"].endswith(suffix):
                return ray.get_actor(entry["name"], namespace=entry["namespace"])
        time.sleep(0.1)
    raise AssertionError(f"no host actor {suffix} for {step_name}")


def _checkpoint_marker(prefix, name: str, step: int):
    """The COMPLETE marker of checkpoint `step` of the executor step `name` under `prefix`, or None."""
    found = list(prefix.glob(f"{name}-*/checkpoints/step-{step:06d}/COMPLETE"))
    return found[0] if found else None


def _when_checkpoint(prefix, name: str, step: int, action) -> threading.Thread:
    """Run `action` in the background once checkpoint `step` is complete (i.e. mid-training)."""

    def watch():
        deadline = time.monotonic() + 120
        while _checkpoint_marker(prefix, name, step) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        action()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _run_step(prefix, name: str, resources, preemptions: int = 3, failures: int = 0, **config):
    """Run toy_train as the executor step `name` on `resources` under the executor's retry budgets
    (the one budget loop); returns its record and output folder."""
    from marin_lab.execution import Executor, ExecutorStep, ExperimentFailedError, this_output_path

    step = ExecutorStep(
        name=name, fn=toy_train, resources=resources, config=ToyTrainConfig(output_path=this_output_path(), **config)
    )
    with contextlib.suppress(ExperimentFailedError):  # the record says how; the tests look at it
        Executor(
            ExecutorMainConfig(
                prefix=str(prefix), backend="ray", max_preemption_retries=preemptions, max_failure_retries=failures
            )
        ).run([step])
    [info_path] = list(prefix.glob(f"{name}-*/.executor_info"))
    return json.loads(info_path.read_text()), info_path.parent


def _run_step_in_background(prefix, name: str, resources, **config):
    """`_run_step` in a thread (Ray's test cluster adds and removes nodes from the main thread only);
    returns the thread and its outcome ({"run": ...} or {"error": ...} once it ends)."""
    outcome: dict = {}

    def drive() -> None:
        try:
            outcome["run"] = _run_step(prefix, name, resources, **config)
        except BaseException as err:  # noqa: BLE001 - re-raised by the test
            outcome["error"] = err

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    return driver, outcome


def _until_checkpoint(prefix, name: str, step: int, driver, outcome, deadline: float) -> None:
    while _checkpoint_marker(prefix, name, step) is None:
        assert driver.is_alive() and time.monotonic() < deadline, f"never reached step {step}: {outcome}"
        time.sleep(0.05)


def test_multislice_step_runs_once_per_host_with_multislice_env(tpu_cluster, tmp_path):
    resources = TpuResources(tpu=TPU, slices=2, capacity_timeout_s=60)
    held: list[dict] = []
    outcome = resources.run(
        report_host,
        ReportHostConfig(output_path=str(tmp_path)),
        step_name="layout",
        on_hardware=lambda hardware: held.extend(_live_groups()),
    )
    result = outcome.result

    # Each slice was one strict placement group of one bundle per host, named after the step and
    # attempt; with the slices' held heads, nothing else; all removed once the step returned.
    slices = sorted((g for g in held if g["name"]), key=lambda g: g["name"])
    assert [g["name"] for g in slices] == sorted(outcome.hardware["placement_groups"])
    assert all(re.fullmatch(r"marin:layout:[0-9a-f]{8}:slice[01]", g["name"]) for g in slices)
    assert [(g["strategy"], g["state"], len(g["bundles"])) for g in slices] == [("STRICT_SPREAD", "CREATED", 2)] * 2
    assert len(held) == 4  # the two heads Ray's reservation holds
    _no_groups_left()

    reports = [json.loads((tmp_path / "hosts" / name).read_text()) for name in os.listdir(tmp_path / "hosts")]
    assert len(reports) == 4 and len({r["pid"] for r in reports}) == 4  # exactly once per host
    envs = [r["env"] for r in reports]
    assert {(e["MARIN_SLICE_NAME"], e["TPU_WORKER_ID"]) for e in envs} == {
        ("slice-a", "0"),
        ("slice-a", "1"),
        ("slice-b", "0"),
        ("slice-b", "1"),
    }
    assert sorted(e["MEGASCALE_SLICE_ID"] for e in envs) == ["0", "0", "1", "1"]
    assert {e["MEGASCALE_NUM_SLICES"] for e in envs} == {"2"}
    assert len({e["MEGASCALE_COORDINATOR_ADDRESS"] for e in envs}) == 1
    assert {e["MEGASCALE_PORT"] for e in envs} == {"8081"}
    # each slice id maps to one slice, and the worker-0 host of slice 0 answered
    assert len({(e["MEGASCALE_SLICE_ID"], e["MARIN_SLICE_NAME"]) for e in envs}) == 2
    assert result["env"]["MEGASCALE_SLICE_ID"] == "0" and result["env"]["TPU_WORKER_ID"] == "0"
    hardware = outcome.hardware
    assert hardware["type"] == TPU and hardware["slices"] == 2 and hardware["hosts"] == 4
    assert sorted(hardware["slice_names"]) == ["slice-a", "slice-b"]


def test_killed_host_actor_is_a_preemption_and_resumes_bit_identical(tpu_cluster, tmp_path):
    prefix = tmp_path / "prefix"
    killer = _when_checkpoint(prefix, "train/kill", 10, lambda: ray.kill(_named_host_actor("train/kill", ":s1:h1")))
    info, out = _run_step(
        prefix, "train/kill", TpuResources(tpu=TPU, slices=2, capacity_timeout_s=60), num_steps=40, step_sleep_s=0.03
    )
    killer.join()

    assert info["status"] == "SUCCESS"
    assert [a["kind"] for a in info["attempts"]] == ["preemption", None]
    assert 10 <= info["result"]["resumed_from"] < 40
    assert np.load(out / "final_params.npy").tobytes() == _reference_digest(tmp_path, num_steps=40)
    # Each attempt lists what it ran on, the preempted one included: both slices, every host.
    lost, done = (a["hardware"] for a in info["attempts"])
    assert sorted(lost["slice_names"]) == ["slice-a", "slice-b"] and lost["hosts"] == 4
    assert sorted((n["slice"], n["worker_id"]) for n in lost["nodes"]) == [
        ("slice-a", 0),
        ("slice-a", 1),
        ("slice-b", 0),
        ("slice-b", 1),
    ]
    assert len({n["node_id"] for n in lost["nodes"]}) == 4 and done == info["hardware"]
    _no_groups_left()


@pytest.mark.slow
def test_a_lost_node_is_one_preemption_for_every_host_and_the_run_resumes_bit_identical(tpu_cluster, tmp_path):
    """Slice-b's host 1 disappears mid-step (its VM reclaimed): the attempt ends for all four hosts
    as one preemption, no failure; the retry waits for slice-b to be whole and ends bit-identical."""
    prefix = tmp_path / "prefix"
    resources = TpuResources(tpu=TPU, slices=2, capacity_timeout_s=120)
    driver, outcome = _run_step_in_background(prefix, "train/node", resources, num_steps=40, step_sleep_s=0.05)
    deadline = time.monotonic() + 300
    _until_checkpoint(prefix, "train/node", 10, driver, outcome, deadline)
    tpu_cluster.remove_host("slice-b", 1, wait_until_dead=True)
    try:  # the retry waits for slice-b to be whole; a new VM comes in the lost one's place
        while len(json.loads(next(prefix.glob("train/node-*/.executor_info")).read_text()).get("attempts", [])) < 2:
            assert driver.is_alive() and time.monotonic() < deadline, f"no retry after the node was lost: {outcome}"
            time.sleep(0.1)
    finally:
        tpu_cluster.add_host("slice-b", 1)
    driver.join(timeout=300)
    if "error" in outcome:
        raise outcome["error"]
    info, out = outcome["run"]

    assert info["status"] == "SUCCESS", info.get("error")
    assert [a["kind"] for a in info["attempts"]] == ["preemption", None]
    assert 10 <= info["result"]["resumed_from"] < 40
    assert np.load(out / "final_params.npy").tobytes() == _reference_digest(tmp_path, num_steps=40)
    _no_groups_left()


def test_a_preemption_notice_checkpoints_and_ends_the_attempt_as_a_preemption(tpu_cluster, tmp_path):
    """The metadata of the checkpoint writer's VM (worker 0 of slice 0) says preempted: its toy loop
    saves the step it just did and stops; the attempt is a PreemptedError and the next resumes there."""
    resources = TpuResources(tpu=TPU, slices=2, capacity_timeout_s=60)
    config = ToyTrainConfig(output_path=str(tmp_path / "run"), num_steps=300, checkpoint_every=1000, step_sleep_s=0.02)
    barrier = tmp_path / "run" / ".barrier"
    placed: list[dict] = []

    def notice() -> None:  # once every host trains
        deadline = time.monotonic() + 120
        while not (placed and barrier.exists() and any(len(os.listdir(d)) == 4 for d in barrier.iterdir())):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        tpu_cluster.notice_preemption(placed[0]["slice_names"][0], 0)

    thread = threading.Thread(target=notice, daemon=True)
    thread.start()
    try:
        with pytest.raises(PreemptedError, match="preemption notice at step"):
            resources.run(toy_train, config, step_name="train/notice", on_hardware=placed.append)
        thread.join()
    finally:
        for stand_in in tpu_cluster.metadata.values():  # the VM came back
            stand_in.preempted.clear()

    resumed = resources.run(toy_train, config, step_name="train/notice").result
    assert 0 < resumed["resumed_from"] < 300  # the notice's checkpoint (the schedule has none before 300)
    assert np.load(tmp_path / "run" / "final_params.npy").tobytes() == _reference_digest(
        tmp_path, num_steps=300, checkpoint_every=1000
    )
    _no_groups_left()


def test_a_wait_for_slices_says_why_once_and_gives_up_leaving_nothing(tpu_cluster, tmp_path, caplog):
    """Three slices of a type the cluster has two of: the reason is said once (not every poll), the
    wait ends in one line naming the step and what to do, and no reservation is left behind."""
    heard: list[str | None] = []
    resources = TpuResources(tpu=TPU, slices=3, capacity_timeout_s=4)
    with (
        caplog.at_level(logging.INFO, logger="marin_lab.cluster.slice_reserve"),
        pytest.raises(SliceCapacityTimeout) as raised,
    ):
        resources.run(
            report_host, ReportHostConfig(output_path=str(tmp_path)), step_name="wait/three", on_pending=heard.append
        )
    why = "2 slices ready, the other not in the cluster (infeasible until nodes are added)"
    assert heard and heard[-1] is not None and heard[-1].endswith(f"for 3 x v4-16: {why}")
    assert heard[-1].startswith("waiting ")
    waiting_lines = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert len(waiting_lines) == len(heard)  # one line per change of reason, not one per poll
    message = str(raised.value)
    assert "\n" not in message and "'wait/three'" in message and why in message and "capacity_timeout_s" in message
    _no_groups_left()


@pytest.mark.slow
def test_elastic_request_runs_on_the_slices_that_exist(tpu_cluster, tmp_path):
    elastic = TpuResources(tpu=TPU, slices=[1, 2], elastic_wait_s=30, capacity_timeout_s=60)
    both = elastic.run(report_host, ReportHostConfig(output_path=str(tmp_path / "both")), step_name="elastic/2")
    assert both.hardware["slices"] == 2

    tpu_cluster.remove_host("slice-a", 1, wait_until_dead=True)  # slice-a is no longer whole
    try:
        one = elastic.run(report_host, ReportHostConfig(output_path=str(tmp_path / "one")), step_name="elastic/1")
        result = one.result
        assert one.hardware["slices"] == 1 and one.hardware["slice_names"] == ["slice-b"]
        assert len(os.listdir(tmp_path / "one" / "hosts")) == 2
        assert result["env"]["MARIN_NUM_SLICES"] == "1" and "MEGASCALE_NUM_SLICES" not in result["env"]

        # a fixed request for two slices cannot be met now: it waits, then counts as lost capacity
        fixed = TpuResources(tpu=TPU, slices=2, capacity_timeout_s=3)
        with pytest.raises(SliceCapacityTimeout, match=r"only [01] whole v4-16 slice\(s\) free"):
            fixed.run(report_host, ReportHostConfig(output_path=str(tmp_path / "none")), step_name="fixed/2")
    finally:
        tpu_cluster.add_host("slice-a", 1)


def test_step_exception_uses_failure_budget_then_fails_with_traceback(tpu_cluster, tmp_path):
    info, _ = _run_step(
        tmp_path / "prefix",
        "train/bug",
        TpuResources(tpu=TPU, slices=1, capacity_timeout_s=60),
        preemptions=5,
        failures=1,
        num_steps=10,
        raise_at_step=3,
    )
    assert info["status"] == "FAILED"
    assert [a["kind"] for a in info["attempts"]] == ["failure", "failure"]
    assert "simulated bug at step 3" in info["error"]
    assert "Traceback" in info["attempts"][-1]["error"]


def test_metadata_probe_turns_a_host_error_into_a_preemption(tpu_cluster, tmp_path):
    flag = tmp_path / "preempted"
    flag.write_text("TRUE")  # the simulated instance metadata says the VM was reclaimed
    resources = TpuResources(tpu=TPU, slices=1, capacity_timeout_s=60, preemption_probe=FilePreemptionProbe(str(flag)))
    config = ToyTrainConfig(output_path=str(tmp_path), num_steps=10, raise_at_step=2)
    # the host's error, or the notice its watcher heard first (a race either way ends as a preemption)
    with pytest.raises(PreemptedError, match=r"^step 'train/probe': .*preempt"):
        resources.run(toy_train, config, step_name="train/probe")

    flag.write_text("FALSE")
    with pytest.raises(Exception, match="simulated bug") as info:
        resources.run(toy_train, config, step_name="train/probe")
    assert not isinstance(info.value, PreemptedError)


def test_cpu_resources_run_as_a_ray_task(tpu_cluster, tmp_path):
    resources = CpuResources(cpus=1)
    outcome = resources.run(report_host, ReportHostConfig(output_path=str(tmp_path)), step_name="cpu")
    assert outcome.result["pid"] != os.getpid()
    assert outcome.hardware["kind"] == "cpu" and outcome.hardware["cpus"] == 1


def test_a_cancel_stops_every_host_of_its_own_run_only(tpu_cluster, tmp_path):
    """Regression: two steps sharing one TpuResources object (a module-level constant) used to be
    cancelled together, the innocent one charged a failure. Each run now has its own cancel event."""
    shared = TpuResources(tpu=TPU, slices=1, capacity_timeout_s=60)
    doomed = ToyTrainConfig(output_path=str(tmp_path / "doomed"), num_steps=400, step_sleep_s=0.05)
    other = ToyTrainConfig(output_path=str(tmp_path / "other"), num_steps=60, step_sleep_s=0.05)
    cancel, outcome = threading.Event(), {}

    def run_doomed() -> None:
        outcome["error"] = pytest.raises(
            StepCancelled, shared.run, toy_train, doomed, step_name="train/cancel", cancel=cancel
        )

    def run_other() -> None:
        outcome["other"] = shared.run(toy_train, other, step_name="train/other")

    threads = [threading.Thread(target=run_doomed), threading.Thread(target=run_other)]
    for t in threads:
        t.start()
    marker = tmp_path / "doomed" / "checkpoints" / "step-000005" / "COMPLETE"
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    cancel.set()
    for t in threads:
        t.join(timeout=120)
    assert "cancelled" in str(outcome["error"].value)
    assert outcome["other"].hardware["slices"] == 1 and (tmp_path / "other" / "final_params.npy").exists()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
        e["name"].startswith("marin:train/cancel:") for e in ray.util.list_named_actors(all_namespaces=True)
    ):
        time.sleep(0.1)
    assert not [
        e for e in ray.util.list_named_actors(all_namespaces=True) if e["name"].startswith("marin:train/cancel:")
    ]


@pytest.mark.slow
def test_worker_exit_under_the_executor_is_a_preemption_and_a_new_driver_reuses_the_result(tpu_cluster, tmp_path):
    """A host's worker exits mid-training (os._exit); the executor retries it from the preemption
    budget, records the preemption and the hardware, and the result is bit-identical."""
    from marin_lab.execution import Executor, ExecutorStep, this_output_path

    step = ExecutorStep(
        name="train/toy",
        fn=toy_train,
        config=ToyTrainConfig(
            output_path=this_output_path(), num_steps=20, crash_at_step=12, crash_host=(1, 1), step_sleep_s=0.02
        ),
        resources=TpuResources(tpu=TPU, slices=2, capacity_timeout_s=60),
    )
    Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="ray", max_preemption_retries=2)).run([step])

    [info_path] = list(tmp_path.glob("train/toy-*/.executor_info"))
    info = json.loads(info_path.read_text())
    assert info["status"] == "SUCCESS"
    assert [a["kind"] for a in info["attempts"]] == ["preemption", None]
    assert "ActorDiedError" in (info["attempts"][0]["error"] or "")
    # the toy's hosts are not lock-stepped per step, so the writer may have checkpointed past 10
    assert 10 <= info["result"]["resumed_from"] <= 20
    assert info["resources"]["tpu"] == TPU and info["resources"]["slices"] == 2
    assert '"hosts": 4' in json.dumps(info) and '"slice_names"' in json.dumps(info)
    assert np.load(info_path.parent / "final_params.npy").tobytes() == _reference_digest(tmp_path, num_steps=20)

    # the driver is gone; a new one (same experiment) finds the step done and runs nothing
    report = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="ray")).run([step])
    assert not report.executed


_DRIVER = """
import sys
import ray
from marin_lab.cluster import TpuResources
from marin_lab.testing.simulate import ToyTrainConfig, toy_train
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path

def driver_step():
    return ExecutorStep(name="train/driver", fn=toy_train, resources=TpuResources(tpu="v4-16", slices=2),
                        config=ToyTrainConfig(output_path=this_output_path(), num_steps=60, step_sleep_s=0.05))

if __name__ == "__main__":
    ray.init(address=sys.argv[1], logging_level="warning")
    Executor(ExecutorMainConfig(prefix=sys.argv[2], backend="ray")).run([driver_step()])
"""


@pytest.mark.slow
def test_a_killed_driver_is_started_again_and_the_tpu_step_resumes(tpu_cluster, tmp_path):
    import signal
    import subprocess
    import sys

    from marin_lab.execution import Executor

    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    prefix = tmp_path / "prefix"
    driver = subprocess.Popen([sys.executable, str(script), tpu_cluster.cluster.address, str(prefix)])
    try:
        deadline = time.monotonic() + 120
        while not list(prefix.glob("train/driver-*/checkpoints/step-000010/COMPLETE")):
            assert driver.poll() is None and time.monotonic() < deadline, "the first driver never got to step 10"
            time.sleep(0.1)
        driver.send_signal(signal.SIGKILL)  # the driver dies mid-step; its host actors die with it
    finally:
        driver.kill()
        driver.wait()
    # Its slices' placement groups are detached: they outlive it, held for the next driver.
    left = sorted(g["name"] for g in _live_groups() if g["name"].startswith("marin:train/driver-"))
    assert len(left) == 2

    namespace: dict = {}
    exec(compile(_DRIVER, "driver", "exec"), namespace)  # the same experiment, started again
    report = Executor(ExecutorMainConfig(prefix=str(prefix), backend="ray")).run([namespace["driver_step"]()])
    assert report.executed
    [info_path] = list(prefix.glob("train/driver-*/.executor_info"))
    info = json.loads(info_path.read_text())
    assert info["status"] == "SUCCESS"
    assert 10 <= info["result"]["resumed_from"] < 60
    assert np.load(info_path.parent / "final_params.npy").tobytes() == _reference_digest(tmp_path, num_steps=60)
    assert sorted(info["hardware"]["placement_groups"]) == left  # the new driver reused them
    _no_groups_left()


def test_alternatives_run_on_the_first_shape_ray_places_and_the_record_names_it(tpu_cluster, tmp_path):
    """Three slices of a type the cluster has two of, then two: the first is waited for `wait_s`
    (saying why, as alternative 1 of 2), released whole, and the second runs; nothing stays held."""
    from marin_lab.cluster import TpuAlternatives

    heard: list[str | None] = []
    placed: list[dict] = []
    resources = TpuAlternatives([f"3 x {TPU}", f"2 x {TPU}"], wait_s=3, capacity_timeout_s=60)
    outcome = resources.run(
        report_host,
        ReportHostConfig(output_path=str(tmp_path)),
        step_name="alternatives/first",
        on_hardware=placed.append,
        on_pending=heard.append,
    )
    assert outcome.hardware["alternative"] == f"2 x {TPU}" and outcome.hardware["slices"] == 2
    assert outcome.hardware["alternatives"] == [f"3 x {TPU}", f"2 x {TPU}"]
    assert placed and placed[0]["alternative"] == f"2 x {TPU}"  # the record hears it once placed
    assert heard[0] is not None and heard[0].startswith("alternative 1 of 2: waiting ")
    assert heard[0].endswith("the other not in the cluster (infeasible until nodes are added)")
    assert outcome.result["env"]["MARIN_MESH_FOLLOWS_HARDWARE"] == "1"
    assert outcome.result["env"]["MARIN_NUM_SLICES"] == "2"
    _no_groups_left()

    nothing = TpuAlternatives([f"3 x {TPU}", f"4 x {TPU}"], wait_s=1, capacity_timeout_s=4)
    with pytest.raises(SliceCapacityTimeout) as raised:
        nothing.run(report_host, ReportHostConfig(output_path=str(tmp_path / "none")), step_name="alternatives/none")
    message = str(raised.value)
    assert "\n" not in message and "'alternatives/none'" in message
    assert f"3 x {TPU}, 4 x {TPU}" in message and "capacity_timeout_s" in message
    _no_groups_left()


@pytest.mark.slow
def test_a_preempted_run_resumes_on_the_next_alternative_bit_identical(tpu_cluster, tmp_path):
    """Two slices are preferred, one is acceptable: slice-b loses a host mid-run, the retry cannot
    have two whole slices within the wait, so it resumes on slice-a alone and ends bit-identical;
    each attempt's record names its shape."""
    from marin_lab.cluster import TpuAlternatives

    prefix = tmp_path / "prefix"
    resources = TpuAlternatives([f"2 x {TPU}", TPU], wait_s=4, capacity_timeout_s=120)
    driver, outcome = _run_step_in_background(prefix, "train/alt", resources, num_steps=40, step_sleep_s=0.05)
    _until_checkpoint(prefix, "train/alt", 10, driver, outcome, time.monotonic() + 300)
    tpu_cluster.remove_host("slice-b", 1, wait_until_dead=True)
    try:
        driver.join(timeout=300)
    finally:
        tpu_cluster.add_host("slice-b", 1)
    if "error" in outcome:
        raise outcome["error"]
    info, out = outcome["run"]

    assert info["status"] == "SUCCESS", info.get("error")
    assert [a["kind"] for a in info["attempts"]] == ["preemption", None]
    first, second = (a["hardware"] for a in info["attempts"])
    assert first["alternative"] == f"2 x {TPU}" and first["slices"] == 2
    assert second["alternative"] == TPU and second["slice_names"] == ["slice-a"]
    assert 10 <= info["result"]["resumed_from"] < 40
    assert np.load(out / "final_params.npy").tobytes() == _reference_digest(tmp_path, num_steps=40)
    _no_groups_left()
