"""train_lm as several processes (simulated hosts, jax.distributed over gloo): a hardware move with
resharded restore, a preempted host, a host that never arrives.

One unbroken 2 hosts x 2 devices run is shared; every other run starts from its checkpoint at
step K or reruns it. Processes are slow to start (and compile): keep these few and tiny.
"""

import json
import os
import shutil

import numpy as np
import pytest

from marin_lab.training.checkpoint import CheckpointConfig, list_checkpoints, read_metadata
from marin_lab.training.data import MixtureLoader
from marin_lab.training.local_hosts import run_hosts, start_hosts, wait_hosts
from marin_lab.training.testing import tiny_train_config, write_synthetic_cache

pytestmark = pytest.mark.slow
STEPS, K = 4, 2


def _config(out, cache):
    return tiny_train_config(out, {"c": cache}, num_train_steps=STEPS, export_hf=False,
                             checkpoint=CheckpointConfig(save_every_steps=K, save_interval_s=None, keep_last=3))


def _losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if "loss" in r}


def _ok(result):
    assert result.ok, "\n---\n".join(result.stderr_tails)
    return result.summary


@pytest.fixture(scope="module", autouse=True)
def compilation_cache(tmp_path_factory, monkeypatch_module):
    """Compile each (program, topology) once for the module: the reruns of 2x2 and 1x2 load it from
    JAX's persistent compilation cache (process 0 writes it; compiling dominates these tiny runs)."""
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
    summary = _ok(run_hosts(_config(out, cache), hosts=2, devices_per_host=2, workdir=str(root / "w0")))
    return root, cache, out, summary


def _from_step_k(unbroken, name):
    root, cache, out, _ = unbroken
    moved = str(root / name)
    shutil.copytree(os.path.join(out, "checkpoints", f"step-{K:06d}"),
                    os.path.join(moved, "checkpoints", f"step-{K:06d}"))
    return _config(moved, cache)


def test_hardware_move_reshards_and_continues_the_data(unbroken):
    root, cache, out, whole = unbroken
    assert whole["environment"]["process_count"] == 2 and whole["final_step"] == STEPS
    runs = {}
    for name, hosts, devices in (("to_1x2", 1, 2), ("to_4x1", 4, 1), ("to_1x2_again", 1, 2)):
        cfg = _from_step_k(unbroken, name)
        runs[name] = (cfg, _ok(run_hosts(cfg, hosts=hosts, devices_per_host=devices, workdir=str(root / f"w-{name}"))))
    for name, (cfg, summary) in runs.items():
        assert summary["start"].startswith("resumed from") and summary["final_step"] == STEPS
        hardware = [(h["from_step"], h["process_count"], h["local_device_count"]) for h in summary["hardware"]]
        assert hardware[0] == (0, 2, 2) and hardware[1][0] == K
        # Same loss to float32 reduction-order noise on other hardware, for every step after the move.
        moved, base = _losses(cfg.output_path), _losses(out)
        assert sorted(moved) == list(range(K, STEPS))
        assert [moved[s] for s in range(K, STEPS)] == pytest.approx([base[s] for s in range(K, STEPS)], abs=1e-3)
        end = read_metadata(list_checkpoints(os.path.join(cfg.output_path, "checkpoints"))[-1][1])
        assert end["data_consumed"] == read_metadata(list_checkpoints(os.path.join(out, "checkpoints"))[-1][1])["data_consumed"]
    assert runs["to_1x2"][1]["hardware"][1]["process_count"] == 1
    assert runs["to_4x1"][1]["hardware"][1]["process_count"] == 4
    # The batches of steps K.. are those of the unbroken run: same token ids, from the restored position.
    meta = read_metadata(os.path.join(runs["to_1x2"][0].output_path, "checkpoints", f"step-{K:06d}"))
    resumed_loader = MixtureLoader(runs["to_1x2"][0].data, 32, 8, base_step=meta["data_base"]["step"],
                                   base_offsets=meta["data_base"]["offsets"])
    unbroken_loader = MixtureLoader(_config(out, cache).data, 32, 8)
    for step in range(K, STEPS):
        np.testing.assert_array_equal(resumed_loader.batch(step), unbroken_loader.batch(step))
    # The same move twice: the same bits.
    assert runs["to_1x2"][1]["param_checksum"] == runs["to_1x2_again"][1]["param_checksum"]


def test_a_preempted_host_resumes_bit_identical(unbroken):
    root, cache, _, whole = unbroken
    cfg = _config(str(root / "preempted"), cache)
    # Host 1 dies after computing step K + 1, before the next checkpoint: the attempt fails.
    broken = run_hosts(cfg, hosts=2, devices_per_host=2, workdir=str(root / "w-pre"),
                       extra_env={"MARIN_FAULT_KILL_AT_STEP": str(K + 1), "MARIN_FAULT_PROCESS": "1"})
    assert broken.returncodes[1] == -9 and not broken.ok
    assert [s for s, _ in list_checkpoints(os.path.join(cfg.output_path, "checkpoints"))] == [K]
    resumed = _ok(run_hosts(cfg, hosts=2, devices_per_host=2, workdir=str(root / "w-post")))
    assert resumed["start"].startswith("resumed from") and resumed["param_checksum"] == whole["param_checksum"]
    assert _losses(cfg.output_path) == _losses(unbroken[2])


def test_a_host_that_never_arrives_is_named(unbroken, tmp_path):
    cfg = _config(str(tmp_path / "lonely"), unbroken[1])
    env = {"MARIN_DISTRIBUTED_TIMEOUT_S": "3"}
    # Host 0 (the coordinator) never came: host 1 says so, naming it.
    alone = wait_hosts(start_hosts(cfg, hosts=2, devices_per_host=1, workdir=str(tmp_path / "w1"), only=[1],
                                   extra_env=env), timeout_s=300)
    assert alone.returncodes[0] != 0
    assert "process 1 of 2: the JAX coordinator at 127.0.0.1:" in alone.stderr_tails[0]
    assert "(process 0, host 0 of slice 0) did not come up within 3s" in alone.stderr_tails[0]
    # Host 1 never came: JAX ends host 0 itself after the timeout; the log said what that means.
    waiting = wait_hosts(start_hosts(cfg, hosts=2, devices_per_host=1, workdir=str(tmp_path / "w0"), only=[0],
                                     extra_env=env), timeout_s=300)
    assert waiting.returncodes[0] != 0
    assert "if this process is then terminated with DEADLINE_EXCEEDED, a host never arrived" in waiting.stderr_tails[0]
    assert not os.path.exists(os.path.join(cfg.output_path, "checkpoints"))
