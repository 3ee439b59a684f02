"""TPU requests inside the executor's plan: shown by the dry run, rejected before anything runs."""

from __future__ import annotations

import pytest

from marin_lab.cluster import TpuRequestError, TpuResources
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path
from marin_lab.testing.simulate import ToyTrainConfig, toy_train


def _step(name: str, resources: TpuResources) -> ExecutorStep:
    return ExecutorStep(
        name=name, fn=toy_train, config=ToyTrainConfig(output_path=this_output_path()), resources=resources
    )


def test_dry_run_shows_the_tpu_request(tmp_path, capsys):
    Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run(
        [_step("train/toy", TpuResources(tpu="v5e-256", slices=[1, 2]))], dry_run=True
    )
    out = capsys.readouterr().out
    assert "tpu=v5e-256" in out and "slices=[1, 2]" in out and "hosts_per_slice=64" in out


@pytest.mark.parametrize(
    "resources, message",
    [
        (TpuResources(tpu="v5e-300"), "does not exist"),
        (TpuResources(tpu="v5e-4", slices=2), "cannot form a multislice job"),
        (TpuResources(tpu="v4-2048", slices=2, max_cluster_slices=1), "cluster can hold at most 1"),
    ],
)
def test_an_impossible_tpu_request_fails_the_plan_before_anything_runs(tmp_path, resources, message):
    good = _step("train/good", TpuResources(tpu="v4-8"))
    with pytest.raises(TpuRequestError, match=message):
        Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run([good, _step("train/bad", resources)])
    assert not list(tmp_path.glob("train/*"))  # not even the good step started
