"""train_lm as several processes (simulated hosts, jax.distributed over gloo): a hardware move with
resharded restore; a fine-tune stopped and resumed on two hosts; the real trainer on a TPU slice of
the local Ray cluster (slice runner, executor) surviving a killed driver, a host's process killed and a
host's Ray node removed; a host that never arrives.

One unbroken 2 hosts x 2 devices run is shared; every other run starts from its checkpoint at
step K or reruns it. Processes are slow to start (and compile): keep these few and tiny.
"""

import dataclasses
import json
import os
import shutil
import time

import jax
import numpy as np
import pytest

from marin_lab.execution import ExecutorMainConfig
from marin_lab.main.train_lm import train_lm
from marin_lab.models.llama import init_params
from marin_lab.peft import LoraConfig
from marin_lab.testing.training import synthetic_documents, tiny_model, tiny_train_config, write_synthetic_cache
from marin_lab.training import checkpoint as ckpt
from marin_lab.training import finetune
from marin_lab.training.checkpoint import CheckpointConfig, list_checkpoints, read_metadata
from marin_lab.training.data import DataConfig, MixtureLoader
from marin_lab.training.local_hosts import run_hosts, start_hosts, wait_hosts
from marin_lab.training.mesh import MeshConfig
from marin_lab.training.metrics import WandbConfig
from marin_lab.training.token_cache import write_token_cache

pytestmark = pytest.mark.slow
STEPS, K = 4, 2


def _config(out, cache):
    return tiny_train_config(
        out,
        {"c": cache},
        num_train_steps=STEPS,
        export_hf=False,
        checkpoint=CheckpointConfig(save_every_steps=K, save_interval_s=None, keep_last=3),
    )


def _losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if "loss" in r}


def _batch_checksums(out):
    """The digest of the global batch each step trained on, as the trainer recorded it."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return {r["step"]: r["batch_checksum"] for r in map(json.loads, f) if "batch_checksum" in r}


def _ok(result):
    assert result.ok, "\n---\n".join(result.stderr_tails)
    return result.summary


@pytest.fixture(scope="module", autouse=True)
def compilation_cache(tmp_path_factory, monkeypatch_module):
    """Compile each (program, topology, process) once for the module: every process writes JAX's
    persistent compilation cache and reads it back on a rerun (on CPU, JAX's cache key holds a
    topology fingerprint that differs per process, and `distributed.cache_programs_of_every_cpu_process`
    lets processes 1..N write theirs too; docs/benchmarks.md, "Test suite")."""
    monkeypatch_module.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path_factory.mktemp("jax-cache")))
    monkeypatch_module.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    monkeypatch_module.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory, compilation_cache):
    root = tmp_path_factory.mktemp("multihost")
    cache = write_synthetic_cache(str(root / "cache"))
    out = str(root / "unbroken")
    summary = _ok(run_hosts(_config(out, cache), fn=train_lm, hosts=2, devices_per_host=2, workdir=str(root / "w0")))
    return root, cache, out, summary


def _from_step_k(unbroken, name):
    root, cache, out, _ = unbroken
    moved = str(root / name)
    shutil.copytree(
        os.path.join(out, "checkpoints", f"step-{K:06d}"), os.path.join(moved, "checkpoints", f"step-{K:06d}")
    )
    return _config(moved, cache)


def test_hardware_move_reshards_and_continues_the_data(unbroken):
    root, cache, out, whole = unbroken
    assert whole["environment"]["process_count"] == 2 and whole["final_step"] == STEPS
    runs = {}
    for name, hosts, devices in (("to_1x2", 1, 2), ("to_4x1", 4, 1), ("to_1x2_again", 1, 2)):
        cfg = _from_step_k(unbroken, name)
        runs[name] = (
            cfg,
            _ok(run_hosts(cfg, fn=train_lm, hosts=hosts, devices_per_host=devices, workdir=str(root / f"w-{name}"))),
        )
    for cfg, summary in runs.values():
        assert summary["start"].startswith("resumed from") and summary["final_step"] == STEPS
        hardware = [(h["from_step"], h["process_count"], h["local_device_count"]) for h in summary["hardware"]]
        assert hardware[0] == (0, 2, 2) and hardware[1][0] == K
        # Same loss to float32 reduction-order noise on other hardware, for every step after the move.
        moved, base = _losses(cfg.output_path), _losses(out)
        assert sorted(moved) == list(range(K + 1, STEPS + 1))
        assert [moved[s] for s in range(K + 1, STEPS + 1)] == pytest.approx(
            [base[s] for s in range(K + 1, STEPS + 1)], abs=1e-3
        )
        # The batches the moved run trained on are exactly those of the unbroken run (recorded by each).
        consumed, unbroken_consumed = _batch_checksums(cfg.output_path), _batch_checksums(out)
        assert [consumed[s] for s in range(K + 1, STEPS + 1)] == [unbroken_consumed[s] for s in range(K + 1, STEPS + 1)]
        end = read_metadata(list_checkpoints(os.path.join(cfg.output_path, "checkpoints"))[-1][1])
        unbroken_end = read_metadata(list_checkpoints(os.path.join(out, "checkpoints"))[-1][1])
        assert end["data_consumed"] == unbroken_end["data_consumed"]
    assert runs["to_1x2"][1]["hardware"][1]["process_count"] == 1
    assert runs["to_4x1"][1]["hardware"][1]["process_count"] == 4
    # The batches of steps K.. are those of the unbroken run: same token ids, from the restored position.
    meta = read_metadata(os.path.join(runs["to_1x2"][0].output_path, "checkpoints", f"step-{K:06d}"))
    resumed_loader = MixtureLoader(
        runs["to_1x2"][0].data, 32, 8, base_step=meta["data_base"]["step"], base_offsets=meta["data_base"]["offsets"]
    )
    unbroken_loader = MixtureLoader(_config(out, cache).data, 32, 8)
    for step in range(K, STEPS):
        np.testing.assert_array_equal(resumed_loader.batch(step), unbroken_loader.batch(step))
    # The same move twice: the same bits.
    assert runs["to_1x2"][1]["param_checksum"] == runs["to_1x2_again"][1]["param_checksum"]


def test_every_host_reads_its_programs_back_when_the_same_hosts_resume(unbroken):
    """A 2 x 2 resume from step K compiles nothing in any process (every program was compiled by
    the unbroken run on the same hosts) and ends on the unbroken run's exact weights."""
    root, _, _, whole = unbroken
    cfg = _from_step_k(unbroken, "same_hosts")
    # JAX logs each persistent-cache hit and miss of its compiler at DEBUG.
    env = {"JAX_DEBUG_LOG_MODULES": "jax._src.compiler"}
    workdir = root / "w-same-hosts"
    summary = _ok(run_hosts(cfg, fn=train_lm, hosts=2, devices_per_host=2, workdir=str(workdir), extra_env=env))
    assert summary["start"].startswith("resumed from") and summary["final_step"] == STEPS
    assert summary["param_checksum"] == whole["param_checksum"]
    for host in range(2):
        log = (workdir / f"host-{host}.stderr").read_text()  # whole: the result keeps only a tail
        hits = log.count("Persistent compilation cache hit")
        misses = log.count("PERSISTENT COMPILATION CACHE MISS")
        assert hits >= 2 and misses == 0, f"host {host}: {hits} cache hits, {misses} misses\n{log[-3000:]}"


def test_a_host_that_never_arrives_is_named(unbroken, tmp_path):
    cfg = _config(str(tmp_path / "lonely"), unbroken[1])
    env = {"MARIN_DISTRIBUTED_TIMEOUT_S": "3"}
    # Two separate clusters at once (each its own coordinator port): one lacks host 0, one host 1.
    lacks_0 = start_hosts(
        cfg, fn=train_lm, hosts=2, devices_per_host=1, workdir=str(tmp_path / "w1"), only=[1], extra_env=env
    )
    lacks_1 = start_hosts(
        cfg, fn=train_lm, hosts=2, devices_per_host=1, workdir=str(tmp_path / "w0"), only=[0], extra_env=env
    )
    alone, waiting = wait_hosts(lacks_0, timeout_s=300), wait_hosts(lacks_1, timeout_s=300)
    # Host 0 (the coordinator) never came: host 1 says so, naming it.
    assert alone.returncodes[0] != 0
    assert "process 1 of 2: the JAX coordinator at 127.0.0.1:" in alone.stderr_tails[0]
    assert "(process 0, host 0 of slice 0) did not come up within 3s" in alone.stderr_tails[0]
    # Host 1 never came: JAX ends host 0 itself after the timeout; the log said what that means.
    assert waiting.returncodes[0] != 0
    assert "if this process is then terminated with DEADLINE_EXCEEDED, a host never arrived" in waiting.stderr_tails[0]
    assert not os.path.exists(os.path.join(cfg.output_path, "checkpoints"))


def test_data_parallel_gradients_reduced_across_hosts_train_like_one_host(unbroken, tmp_path):
    """Replicated parameters: each device's gradients all-reduced as one flat buffer (train_step.py),
    here across 2 processes through gloo, give the losses of one process with the same 4 devices."""
    dp = MeshConfig(data=-1, fsdp=1, param_sharding="replicated")
    losses = {}
    for name, hosts, devices in (("2x2", 2, 2), ("1x4", 1, 4)):
        cfg = dataclasses.replace(_config(str(tmp_path / name), unbroken[1]), mesh=dp)
        summary = _ok(
            run_hosts(cfg, fn=train_lm, hosts=hosts, devices_per_host=devices, workdir=str(tmp_path / f"w-{name}"))
        )
        assert summary["final_step"] == STEPS and summary["environment"]["process_count"] == hosts
        losses[name] = _losses(cfg.output_path)
    assert sorted(losses["2x2"]) == sorted(losses["1x4"]) == list(range(1, STEPS + 1))
    assert [losses["2x2"][s] for s in range(1, STEPS + 1)] == pytest.approx(
        [losses["1x4"][s] for s in range(1, STEPS + 1)], rel=1e-5
    )
    assert losses["2x2"][STEPS] < losses["2x2"][1]


def _assert_trains_like_one_slice(multi, out, hardware):
    """A 2-slice run of 2 hosts x 1 device per slice against the one-slice unbroken run."""
    [hw] = hardware
    assert (hw["process_count"], hw["local_device_count"]) == (4, 1)
    assert hw["mesh"] == {"replica": 2, "data": 1, "fsdp": 2, "model": 1}
    assert read_metadata(list_checkpoints(os.path.join(out, "checkpoints"))[-1][1])["hardware"][0]["mesh"] == {
        "replica": 1,
        "data": 1,
        "fsdp": 4,
        "model": 1,
    }
    # The same batches as the one-slice run (each slice read its half); the same losses to float32
    # reduction order: each slice reduces its gradients over its 2 devices, then the 2 slices
    # average theirs, where one slice summed over 4 devices (differences seen: <= 1e-7 relative).
    assert _batch_checksums(multi) == _batch_checksums(out)
    assert sorted(_losses(multi)) == list(range(1, STEPS + 1))
    assert [_losses(multi)[s] for s in range(1, STEPS + 1)] == pytest.approx(
        [_losses(out)[s] for s in range(1, STEPS + 1)], rel=1e-6
    )


def test_two_slices_train_like_one_slice_and_resume_on_one(unbroken, tmp_path):
    """train_lm as 2 slices x 2 hosts (4 processes numbered as the slice runner numbers them, one
    CPU device each, gloo): `mesh.slices=2` puts the processes of each slice (0-1 and 2-3) on their
    own `replica` row, each slice holding the whole state sharded over its 2 devices. With the
    global batch of the one-slice unbroken run (2 hosts x 2 devices) the losses are that run's; the
    checkpoint at step K then resumes on one slice of 2 hosts and continues like the unbroken run."""
    root, cache, out, _ = unbroken
    multi = str(tmp_path / "two-slices")
    cfg = dataclasses.replace(_config(multi, cache), mesh=MeshConfig(slices=2))
    summary = _ok(run_hosts(cfg, fn=train_lm, hosts=4, devices_per_host=1, workdir=str(tmp_path / "w-two-slices")))
    assert summary["final_step"] == STEPS
    _assert_trains_like_one_slice(multi, out, summary["hardware"])

    # The 2-slice checkpoint at step K restored onto one slice (2 hosts x 2 devices, replica=1).
    one = tmp_path / "one-slice"
    shutil.copytree(os.path.join(multi, "checkpoints", f"step-{K:06d}"), one / "checkpoints" / f"step-{K:06d}")
    summary = _ok(
        run_hosts(_config(str(one), cache), fn=train_lm, hosts=2, devices_per_host=2, workdir=str(tmp_path / "w-one"))
    )
    assert summary["start"].startswith("resumed from") and summary["final_step"] == STEPS
    assert [h["mesh"]["replica"] for h in summary["hardware"]] == [2, 1]
    expected = [_batch_checksums(str(one))[s] for s in range(K + 1, STEPS + 1)]
    assert expected == [_batch_checksums(out)[s] for s in range(K + 1, STEPS + 1)]
    assert [_losses(str(one))[s] for s in range(K + 1, STEPS + 1)] == pytest.approx(
        [_losses(out)[s] for s in range(K + 1, STEPS + 1)], rel=1e-6
    )


def test_a_two_host_finetune_stopped_and_resumed_trains_like_one_that_never_stopped(tmp_path):
    """finetune_lm on two processes (one CPU device each): a run resumed from the step-2 checkpoint
    of an unbroken run restores it on both hosts (the Trainer's agreed checkpoint) and takes the
    unbroken run's steps, bit for bit."""

    model = tiny_model()
    docs = synthetic_documents(24, 0)
    masks = [np.concatenate([np.zeros(8, np.uint8), np.ones(len(d) - 8, np.uint8)]) for d in docs]
    write_token_cache(
        str(tmp_path / "cache"),
        {"train": docs, "validation": docs[:4]},
        vocab_size=256,
        eos_id=255,
        loss_masks={"train": masks, "validation": masks[:4]},
    )
    ckpt.save_checkpoint(
        str(tmp_path / "base/checkpoints/step-000000"),
        {"params": init_params(model, jax.random.key(0))},
        {"model": dataclasses.asdict(model), "step": 0},
    )
    config = finetune.FinetuneConfig(
        output_path=str(tmp_path / "whole"),
        data=DataConfig(caches={"c": str(tmp_path / "cache")}),
        base=str(tmp_path / "base"),
        mode="lora",
        lora=LoraConfig(rank=2, alpha=4.0),
        num_train_steps=4,
        batch_size=2,
        seq_len=16,
        eval_max_sequences=0,
        save_merged=False,
        export_hf=False,
        checkpoint=CheckpointConfig(save_every_steps=2, save_interval_s=None, keep_last=3),
        wandb=WandbConfig(enabled=False),
    )

    def run(cfg, name):
        result = run_hosts(
            cfg, hosts=2, devices_per_host=1, workdir=str(tmp_path / name), fn=finetune.finetune_lm, timeout_s=600
        )
        assert result.ok, "\n---\n".join(result.stderr_tails)
        return result.summary

    whole = run(config, "w-whole")
    moved = tmp_path / "resumed"
    shutil.copytree(tmp_path / "whole/checkpoints/step-000002", moved / "checkpoints/step-000002")
    resumed = run(dataclasses.replace(config, output_path=str(moved)), "w-resumed")

    assert whole["start"] == "fresh" and whole["final_step"] == 4
    assert resumed["start"] == f"resumed from {ckpt.step_dir(str(moved / 'checkpoints'), 2)}"
    assert resumed["final_step"] == 4 and resumed["final_loss"] == whole["final_loss"]

    def losses(out):
        return {
            r["step"]: r["loss"]
            for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if "loss" in r
        }

    assert losses(moved) == {s: v for s, v in losses(tmp_path / "whole").items() if s > 2}  # rows: steps completed

    def trainable(out):
        return {k: v for k, v in ckpt.iter_arrays(ckpt.step_dir(str(out / "checkpoints"), 4), "trainable")}

    a, b = trainable(tmp_path / "whole"), trainable(moved)
    assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)


# The experiment a driver runs: the unbroken run's config as one executor step on a 2-host TPU slice
# of the local Ray cluster (each host a Ray node whose process has 2 CPU devices).
_DRIVER = """
import json
import sys

import ray

from marin_lab.cluster import TpuResources
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path
from marin_lab.main.train_lm import train_lm
from marin_lab.training import CheckpointConfig, MeshConfig
from marin_lab.testing.training import tiny_train_config


def train_step(cache, env, slices=1):
    config = tiny_train_config(this_output_path(), {"c": cache}, num_train_steps=%d, export_hf=False,
                               checkpoint=CheckpointConfig(save_every_steps=%d, save_interval_s=None, keep_last=3),
                               mesh=MeshConfig(slices=slices))
    return ExecutorStep(name="train/multihost", fn=train_lm, config=config,
                        resources=TpuResources(tpu="v4-16", slices=slices, env=env, capacity_timeout_s=600))


if __name__ == "__main__":
    ray.init(address=sys.argv[1], logging_level="warning")
    step = train_step(sys.argv[3], json.loads(sys.argv[4]))
    Executor(ExecutorMainConfig(prefix=sys.argv[2], backend="ray")).run([step])
""" % (STEPS, K)  # noqa: UP031 (the source above is code: braces would need doubling)


@pytest.fixture(scope="module")
def one_slice_cluster():
    """A local Ray cluster of one v4-16 slice (2 hosts), started once for the module's Ray tests
    (the last tests of the module: nothing else runs while it is up)."""
    import ray

    from marin_lab.testing.local_cluster import LocalTpuCluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = LocalTpuCluster("v4-16").start()
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture()
def tpu_slice(request, one_slice_cluster):
    """The module's v4-16 slice of 2 hosts (or `request.param` such slices: the others are added
    for the test and taken away after it, so each test sees exactly the slices it asked for)."""
    cluster = one_slice_cluster
    added = [(f"slice-{i}", w) for i in range(1, getattr(request, "param", 1)) for w in range(cluster.tpu.hosts)]
    for name, worker in added:
        cluster.add_host(name, worker)
    try:
        yield cluster
    finally:
        for name, worker in added:
            cluster.remove_host(name, worker, wait_until_dead=True)


def _host_env(devices: int = 2) -> dict:
    """What each Ray host's process gets: CPU devices and the module's compilation cache."""
    return {
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": os.environ["JAX_COMPILATION_CACHE_DIR"],
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


def _driver_namespace() -> dict:
    """The driver's step definitions, to run its experiment from this process."""
    namespace: dict = {}
    exec(compile(_DRIVER, "driver", "exec"), namespace)
    return namespace


def _record(prefix) -> dict:
    """The step's record as it is now ({} before the first one, or while it is being replaced)."""
    found = list(prefix.glob("train/multihost-*/.executor_info"))
    try:
        return json.loads(found[0].read_text()) if found else {}
    except (OSError, ValueError):
        return {}


@pytest.mark.ray
def test_killed_driver_preempted_host_and_removed_node_resume_the_real_trainer_bit_identical(
    unbroken, tpu_slice, tmp_path
):
    """The slice runner launches train_lm once per host. The driver is killed mid-run and started
    again; then host 1's process dies mid-training, and on the retry host 1's Ray node is removed
    mid-training (the next retry waits until the slice is whole again). The executor retries each
    from the preemption budget, the run resumes from the last checkpoint, the parameters equal the
    unbroken run's, and the record lists the hosts of every attempt."""
    import signal
    import subprocess
    import sys
    import threading

    from marin_lab.execution import Executor

    _, cache, out, whole = unbroken
    env = _host_env()
    script, prefix = tmp_path / "driver.py", tmp_path / "prefix"
    script.write_text(_DRIVER)
    # First driver: its host 0 holds after computing step K + 1 (checkpoint K written), so the
    # driver is known to be mid-run when it is killed; its host actors die with it.
    held = {**env, "MARIN_FAULT_HOLD_AT_STEP": str(K + 1)}
    driver = subprocess.Popen(
        [sys.executable, str(script), tpu_slice.cluster.address, str(prefix), cache, json.dumps(held)]
    )
    try:
        deadline = time.monotonic() + 600
        while not list(prefix.glob(f"train/multihost-*/.preemption-drill-hold-step-{K + 1}-process-0")):
            assert driver.poll() is None, "the first driver ended before its hosts reached the hold"
            assert time.monotonic() < deadline, "the first driver's hosts never reached the hold"
            time.sleep(0.2)
        driver.send_signal(signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()
    # The killed driver could not finish its record, but it had written its attempt's hosts into
    # the RUNNING record as soon as they were placed.
    [first] = _record(prefix)["attempts"]
    assert first["status"] == "RUNNING" and [n["worker_id"] for n in first["hardware"]["nodes"]] == [0, 1]

    # The same experiment started again, in a thread of this process: host 1 kills itself after
    # step K + 1; on the retry it holds there instead, and its node is taken away from here (Ray's
    # test cluster adds and removes nodes from the main thread only).
    namespace = _driver_namespace()
    drills = {
        **env,
        "MARIN_FAULT_KILL_AT_STEP": str(K + 1),
        "MARIN_FAULT_HOLD_AT_STEP": str(K + 1),
        "MARIN_FAULT_PROCESS": "1",
    }
    outcome: dict = {}

    def second_driver() -> None:
        try:
            outcome["report"] = Executor(
                ExecutorMainConfig(prefix=str(prefix), backend="ray", max_preemption_retries=3)
            ).run([namespace["train_step"](cache, drills)])
        except BaseException as err:  # noqa: BLE001 - re-raised in the test below
            outcome["error"] = err

    driver_thread = threading.Thread(target=second_driver, daemon=True)
    driver_thread.start()
    deadline = time.monotonic() + 600
    while not list(prefix.glob(f"train/multihost-*/.preemption-drill-hold-step-{K + 1}-process-1")):
        assert driver_thread.is_alive(), f"the second driver ended before host 1 held: {outcome}"
        assert time.monotonic() < deadline, "host 1 never reached the hold on its retry"
        time.sleep(0.2)
    removed = tpu_slice.nodes[("slice-0", 1)].node_id
    tpu_slice.remove_host("slice-0", 1)
    # The attempt that lost the node ends as a preemption; the next one cannot place host 1 until
    # the slice is whole again: it waits, RUNNING, and the node comes back only once it does.
    while len(_record(prefix).get("attempts", [])) < 4:
        assert driver_thread.is_alive(), f"the second driver ended before retrying the lost node: {outcome}"
        assert time.monotonic() < deadline, "no retry after the node was removed"
        time.sleep(0.2)
    tpu_slice.add_host("slice-0", 1)
    driver_thread.join(timeout=600)
    if "error" in outcome:
        raise outcome["error"]

    assert outcome["report"].executed
    [info_path] = list(prefix.glob("train/multihost-*/.executor_info"))
    info = json.loads(info_path.read_text())
    assert info["status"] == "SUCCESS"
    assert [a["kind"] for a in info["attempts"]][-3:] == ["preemption", "preemption", None]
    result = info["result"]
    assert result["start"].endswith(f"step-{K:06d}") and result["final_step"] == STEPS
    assert result["param_checksum"] == whole["param_checksum"]
    assert _losses(str(info_path.parent)) == _losses(out)
    # train_lm's own account: 2 processes x 2 devices from step 0 (first driver) and from step K.
    assert [(h["from_step"], h["process_count"], h["local_device_count"]) for h in result["hardware"]] == [
        (0, 2, 2),
        (K, 2, 2),
    ]
    # The record's, per attempt: the slice and each host's Ray node. Host 1's process died on its
    # node; then that node was removed, and host 1 came back as another node.
    killed, lost, done = (a["hardware"] for a in info["attempts"][-3:])
    nodes = [{n["worker_id"]: n["node_id"] for n in hw["nodes"]} for hw in (killed, lost, done)]
    assert nodes[0] == nodes[1] and nodes[1][1] == removed
    assert nodes[2][0] == nodes[1][0] and nodes[2][1] != removed
    assert lost["type"] == "v4-16" and lost["slice_names"] == ["slice-0"] and lost["hosts"] == 2
    assert done == info["hardware"]
    assert info["attempts"][0]["hardware"]["nodes"] and info["attempts"][0]["driver"] != info["driver"]


@pytest.mark.ray
@pytest.mark.parametrize("tpu_slice", [2], indirect=True)
def test_two_slice_step_on_the_ray_cluster_trains_like_one_slice(unbroken, tpu_slice, tmp_path):
    """The same 2-slice run as one executor step on 2 slices x 2 hosts of the local Ray cluster:
    the slice runner places a process on each host, numbers them slice by slice and tells train_lm
    the slice count (MARIN_NUM_SLICES, checked against mesh.slices)."""
    from marin_lab.execution import Executor

    _, cache, out, _ = unbroken
    prefix = tmp_path / "prefix"
    report = Executor(ExecutorMainConfig(prefix=str(prefix), backend="ray")).run(
        [_driver_namespace()["train_step"](cache, _host_env(devices=1), slices=2)]
    )
    assert report.executed
    [info_path] = list(prefix.glob("train/multihost-*/.executor_info"))
    info = json.loads(info_path.read_text())
    assert info["status"] == "SUCCESS", info.get("error")
    assert sorted(info["hardware"]["slice_names"]) == ["slice-0", "slice-1"] and info["hardware"]["hosts"] == 4
    _assert_trains_like_one_slice(str(info_path.parent), out, info["result"]["hardware"])


def test_a_preemption_notice_on_one_host_stops_every_host_at_one_checkpoint(unbroken, tmp_path):
    """Host 1's VM alone gets a preemption notice after step 1 (its metadata; the drill sets the
    flag its watcher would): both processes agree on one later step, save it, and end the attempt as
    a preemption; the next attempt resumes there and ends on a run's exact weights that never
    stopped."""
    from marin_lab.training.distributed import ENV_FAULT_PROCESS, ENV_NOTICE_STEP, NOTICE_MARGIN_STEPS

    _, cache, _, _ = unbroken
    steps, noticed = 6, 1
    stop = noticed + NOTICE_MARGIN_STEPS
    assert stop < steps  # the agreed step is inside the run

    def config(out):
        return dataclasses.replace(_config(str(out), cache), num_train_steps=steps)

    whole = _ok(
        run_hosts(
            config(tmp_path / "whole"), fn=train_lm, hosts=2, devices_per_host=2, workdir=str(tmp_path / "w-whole")
        )
    )
    env = {ENV_NOTICE_STEP: str(noticed), ENV_FAULT_PROCESS: "1"}
    out = tmp_path / "noticed"
    first = run_hosts(
        config(out), fn=train_lm, hosts=2, devices_per_host=2, workdir=str(tmp_path / "w-notice"), extra_env=env
    )
    assert not first.ok  # the attempt ended, on both hosts, as the executor's PreemptedError
    line = f"preemption notice: checkpoint saved at step {stop}"
    for tail in first.stderr_tails:
        assert "PreemptedError" in tail and line in tail, tail[-3000:]
    assert ckpt.latest_checkpoint(str(out / "checkpoints")) == ckpt.step_dir(str(out / "checkpoints"), stop)

    resumed = _ok(run_hosts(config(out), fn=train_lm, hosts=2, devices_per_host=2, workdir=str(tmp_path / "w-resumed")))
    assert resumed["start"].startswith("resumed from") and resumed["final_step"] == steps
    assert resumed["param_checksum"] == whole["param_checksum"]
