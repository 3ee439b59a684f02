"""Marin's lower-level executor spellings, for code (and tests) written against its internals.

Experiment files never need these: they use the names exported by `marin_lab.execution`. Tools
and tests that reached into Marin's executor find here `StatusFile(...).status`,
`collect_dependencies_and_version(obj)` and `get_status_path`/`get_info_path`, with Marin's meaning.
See docs/coming_from_marin.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from marin_lab.execution.hashing import scan_config
from marin_lab.execution.status import info_path as get_info_path
from marin_lab.execution.status import read_status
from marin_lab.execution.status import status_path as get_status_path
from marin_lab.execution.step import ExecutorStep

__all__ = ["Dependencies", "StatusFile", "collect_dependencies_and_version", "get_info_path", "get_status_path"]


class StatusFile:
    """The status of the step at `output_path` (ours, or Marin's JSON lines or one-word file).

    Read-only: leases live in their own file (`.executor_lease`, see `marin_lab.execution.lease`).
    """

    def __init__(self, output_path: str, worker_id: str | None = None):
        self.output_path = str(output_path)
        self.path = get_status_path(self.output_path)
        self.worker_id = worker_id

    @property
    def status(self) -> str | None:
        record = read_status(self.output_path)
        return None if record is None else record.get("status")


@dataclasses.dataclass(frozen=True)
class Dependencies:
    dependencies: list[ExecutorStep]
    """Steps waited for."""
    pseudo_dependencies: list[ExecutorStep]
    """`.nonblocking()` steps: in the version, never waited for."""
    version: dict[str, Any]
    """Versioned values and inputs by field path; an input is `DEP[i]` or `DEP[i]/name`."""


def collect_dependencies_and_version(obj: Any) -> Dependencies:
    """Marin's view of one config: what it depends on, and its versioned fields and inputs."""
    scan = scan_config(obj, step_label="collect_dependencies_and_version")
    version: dict[str, Any] = dict(scan.versioned)
    blocking: list[ExecutorStep] = []
    pseudo: list[ExecutorStep] = []
    for path, inp in scan.inputs:
        if inp.step is None:
            version[path] = inp.name if inp.step_name is None else f"STEP:{inp.step_name}"
            continue
        index = len(blocking) + len(pseudo)
        (blocking if inp.block_on_step else pseudo).append(inp.step)
        version[path] = f"DEP[{index}]/{inp.name}" if inp.name else f"DEP[{index}]"
    return Dependencies(blocking, pseudo, version)
