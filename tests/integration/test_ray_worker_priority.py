"""Steps on the ray backend run at the driver's priority, not at Ray's default nice 15 for workers
(where two busy processes beside them left a 46-second step running for over 10 minutes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path
from tests.executor_steps import WriteConfig, record_priority


@pytest.mark.ray
def test_ray_backend_steps_run_at_the_drivers_priority(ray_cluster, tmp_path: Path) -> None:
    step = ExecutorStep(
        name="probe/priority", fn=record_priority, config=WriteConfig(output_path=this_output_path(), text="")
    )
    Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="ray")).run([step])
    [out] = (tmp_path / "probe").glob("priority-*/priority.json")
    probe = json.loads(out.read_text())
    assert probe["pid"] != os.getpid()  # it ran in a Ray worker, not in this process
    assert probe["nice"] == os.getpriority(os.PRIO_PROCESS, 0)
