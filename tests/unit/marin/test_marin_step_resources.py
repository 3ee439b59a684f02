"""Marin's resource classes as an ExecutorStep's resources: mapped to ours at plan time."""

from __future__ import annotations

import pytest

from marin_lab.cluster.resources import GpuResources, TpuResources
from marin_lab.execution import ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.errors import StepDefinitionError
from marin_lab.execution.executor import Executor
from marin_lab.marin.resources import FrayGpuConfig, ResourceConfig, TpuConfig
from marin_lab.resources import CpuOnlyConfig, GpuConfig, TpuPodConfig
from marin_lab.store.step_record import read_step_record
from tests.executor_steps import WriteConfig, write_text


def _step(resources, name="res/a"):
    return ExecutorStep(
        name=name, fn=write_text, config=WriteConfig(this_output_path(), versioned("x")), resources=resources
    )


@pytest.mark.parametrize(
    ("given", "planned"),
    [
        (CpuOnlyConfig(num_cpus=2), {"num_cpus": 2}),
        (GpuConfig(gpu_count=2, accelerator_type="H100"), GpuResources(gpus=2, accelerator_type="H100")),
        (TpuPodConfig(tpu_type="v4-8", slice_count=2), TpuResources(tpu="v4-8", slices=2)),
        (ResourceConfig.with_gpu("A100", count=4), GpuResources(gpus=4, cpus=1, accelerator_type="A100")),
        (ResourceConfig.with_cpu(cpu=3), {"num_cpus": 3}),
        (TpuConfig(variant="v5p-8"), TpuResources(tpu="v5p-8", slices=1)),
        (FrayGpuConfig(count=1), GpuResources(gpus=1, cpus=1)),
    ],
)
def test_marin_resources_are_planned_as_ours(tmp_path, given, planned):
    ex = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local"))
    (ps,) = ex.plan([_step(given)]).steps
    assert ps.step.resources == planned
    # Resources are not identity: the step is the same one it is without them.
    assert (
        ps.identity
        == Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).plan([_step(None)]).steps[0].identity
    )


def test_a_gpu_config_step_plans_with_its_gpu(tmp_path, capsys):
    Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run(
        [_step(GpuConfig(gpu_count=1))], dry_run=True
    )
    out = capsys.readouterr().out
    assert "resources: kind=gpu, gpus=1" in out
    assert "resources is a GpuConfig" not in out  # planned (a CPU-only machine says it cannot hold it)


def test_a_cpu_only_config_step_runs_and_records_its_resources(tmp_path):
    report = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run([_step(CpuOnlyConfig(num_cpus=1))])
    (ps,) = report.plan.steps
    assert report.outcomes[ps.identity].status == "SUCCESS"
    assert read_step_record(ps.output_path).resources == {"num_cpus": 1}


def test_other_objects_are_still_refused_naming_what_is_accepted(tmp_path):
    with pytest.raises(StepDefinitionError, match=r"step 'res/a': resources is a str; .*CpuOnlyConfig, GpuConfig"):
        Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).plan([_step("gpu")])
