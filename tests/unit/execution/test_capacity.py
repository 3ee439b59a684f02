"""Impossible requests fail fast: refused with the plan when the cluster is known, else after a
bounded wait; never pending for ever."""

from __future__ import annotations

import dataclasses

import pytest

from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, executor_main, this_output_path, versioned
from marin_lab.execution.errors import UnschedulableError
from marin_lab.execution.review.capacity import UnschedulableWatch, check, node_request, this_machine


@dataclasses.dataclass(frozen=True)
class Cfg:
    output_path: str
    text: str


def touch(cfg: Cfg) -> None:
    raise AssertionError("an impossible step must never start")


def _step(resources, name="train/gpu"):
    return ExecutorStep(name, touch, Cfg(this_output_path(), versioned("x")), resources=resources)


@pytest.fixture(autouse=True)
def no_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine has no GPU, whatever it has
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)


@pytest.mark.parametrize(
    "resources, asked",
    [
        ({"num_gpus": 1}, "1 GPU"),
        ({"memory": 2**50}, "1048576.0 GiB memory"),
        ({"resources": {"TPU": 4, "TPU-v4-8-head": 1}}, "4 TPU, 1 TPU-v4-8-head"),
    ],
)
def test_a_request_this_machine_can_never_hold_is_refused_before_anything_runs(tmp_path, resources, asked):
    with pytest.raises(UnschedulableError) as err:
        Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run([_step(resources)])
    text = str(err.value)
    assert text.startswith("step 'train/gpu-") and "no node of this machine" in text and "largest node" in text
    assert "0 GPU" in text.split("largest node:")[1]  # the largest node says what it has
    assert f"asks for {asked} on one node" in text
    assert len(text.splitlines()) == 1
    assert not list((tmp_path / "train").glob("*/.executor_status"))  # nothing started, nothing written


def test_a_local_ray_this_run_would_start_is_this_machine(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("marin_lab.execution.review.capacity.ray_nodes", lambda: None)  # no Ray joined here
    with pytest.raises(UnschedulableError, match="this machine .the local Ray"):
        Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="ray")).run([_step({"num_gpus": 1})])


def test_the_dry_run_says_so_and_executor_main_prints_one_line(tmp_path, capsys):
    executor_main([_step({"num_gpus": 2})], args=["--prefix", str(tmp_path), "--backend", "local", "--dry_run", "true"])
    assert "cannot run here: step 'train/gpu-" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        executor_main([_step({"num_gpus": 2})], args=["--prefix", str(tmp_path), "--backend", "local"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and "asks for 2 GPU" in err


def test_what_fits_runs_and_reused_steps_are_not_judged(tmp_path):
    assert check("s", {"num_cpus": 1}, [this_machine()], "here") is None
    # CPUs are not reserved by the local backend: many asked of a small machine is not refused there.
    assert check("s", {"num_cpus": 10_000}, [this_machine()], "here", local_backend=True) is None
    assert check("s", {"num_cpus": 10_000}, [this_machine()], "here") is not None


def test_a_cluster_elsewhere_is_watched_for_a_bounded_time():
    now = [0.0]
    nodes = [{"CPU": 8.0, "GPU": 0.0, "memory": 2.0**34}]
    watch = UnschedulableWatch(
        "train/gpu-1", {"num_gpus": 1}, lambda: nodes, timeout_s=30, every_s=5, clock=lambda: now[0]
    )
    assert watch.poll() is None  # the clock starts
    now[0] = 20
    assert watch.poll() is None
    nodes.append({"CPU": 8.0, "GPU": 1.0})  # the autoscaler added a node that fits: the clock stops
    now[0] = 40
    assert watch.poll() is None
    nodes.pop()  # gone again: a new clock
    now[0] = 50
    assert watch.poll() is None
    now[0] = 81
    line = watch.poll()
    assert line is not None and "train/gpu-1" in line and "1 GPU" in line and "gave up after 30 s" in line
    assert "largest node: 8 CPU, 0 GPU, 16.0 GiB memory" in line


def test_node_request_reads_dicts_and_runners():
    assert node_request({"num_gpus": 1, "accelerator_type": "A100"}) == {"GPU": 1.0, "accelerator_type:A100": 0.001}

    class Gpu:
        def ray_options(self):
            return {"num_gpus": 2, "num_cpus": 1}

    assert node_request(Gpu()) == {"GPU": 2.0, "CPU": 1.0}
    assert node_request(object()) is None
