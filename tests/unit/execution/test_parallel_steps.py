"""Independent steps run at the same time, on both backends (Marin's test_parallelism asserts this
with wall-clock times and is skipped there; here the steps wait for each other, so no timing)."""

from __future__ import annotations

import pytest

from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path
from tests.executor_steps import RendezvousConfig, rendezvous


def _steps(meeting_dir: str, n: int) -> list[ExecutorStep]:
    return [
        ExecutorStep(
            name=f"meet{i}",
            fn=rendezvous,
            config=RendezvousConfig(output_path=this_output_path(), meeting_dir=meeting_dir, expected=n),
        )
        for i in range(n)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_independent_steps_run_concurrently(tmp_path, backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_cluster")
    n = 2  # CI has 2 cores: a Ray another test started may have only 2 CPUs
    report = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend=backend, max_concurrent=n)).run(
        _steps(str(tmp_path / "met"), n)
    )
    assert len(report.executed) == n and not report.failed
    assert len(list((tmp_path / "met").iterdir())) == n


@pytest.mark.slow
def test_one_at_a_time_cannot_meet(tmp_path):
    """The check above can fail: with max_concurrent=1 the first step waits alone and times out."""
    steps = [
        ExecutorStep(
            name=f"meet{i}",
            fn=rendezvous,
            config=RendezvousConfig(
                output_path=this_output_path(), meeting_dir=str(tmp_path / "met"), expected=2, timeout_s=1.0
            ),
        )
        for i in range(2)
    ]
    report = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local", max_concurrent=1)).run(
        steps, raise_on_failure=False
    )
    assert report.failed
