"""Marin's executor (`marin.execution.executor` and `executor_step_status`), over marin_lab's.

`Executor` is marin_lab's executor plus what Marin's shows after `run` or `plan`: `steps`,
`output_paths[step]`, `configs[step]`, `versions[step]`, `version_strs[step]` and
`dependencies[step]`, keyed by the user's own step objects (`MarinView`). The rest is for tools
written against Marin's internals: `StatusFile` (its status, and its lock methods over our lease
file), `Lease`/`HEARTBEAT_TIMEOUT`, `collect_dependencies_and_version(obj)` and
`get_status_path`/`get_info_path`, with Marin's meaning. The other names of Marin's module
(`ExecutorStep`, `executor_main`, `versioned`, ...) are marin_lab.execution's, re-exported so that
one Marin import line ports as one line. See docs/coming_from_marin.md.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

from marin_lab.execution import (
    STATUS_DEP_FAILED,
    STATUS_FAILED,
    STATUS_RUNNING,
    STATUS_SUCCESS,
    STATUS_WAITING,
    THIS_OUTPUT_PATH,
    ExecutorMainConfig,
    InputName,
    OutputName,
    VersionedValue,
    ensure_versioned,
    executor_main,
    get_executor_step,
    output_path_of,
    this_output_path,
    unwrap_versioned_value,
    versioned,
)
from marin_lab.execution import executor as core
from marin_lab.execution.config import SETTINGS
from marin_lab.execution.errors import ExecutorConfigError, LeaseLostError
from marin_lab.execution.plan.hashing import canonical_json, scan_config
from marin_lab.execution.plan.planner import Plan
from marin_lab.execution.plan.step import ExecutorStep
from marin_lab.execution.state import lease as leases
from marin_lab.execution.state.status import Status, read_status, write_status
from marin_lab.store.layout import info_url as get_info_path
from marin_lab.store.layout import status_url as get_status_path

__all__ = [
    "HEARTBEAT_TIMEOUT",
    "STATUS_DEP_FAILED",
    "STATUS_FAILED",
    "STATUS_RUNNING",
    "STATUS_SUCCESS",
    "STATUS_WAITING",
    "THIS_OUTPUT_PATH",
    "Dependencies",
    "Executor",
    "ExecutorMainConfig",
    "ExecutorStep",
    "InputName",
    "Lease",
    "MarinView",
    "OutputName",
    "StatusFile",
    "VersionedValue",
    "collect_dependencies_and_version",
    "ensure_versioned",
    "executor_main",
    "get_executor_step",
    "get_info_path",
    "get_status_path",
    "output_path_of",
    "this_output_path",
    "unwrap_versioned_value",
    "versioned",
]


class MarinView:
    """A plan seen the way Marin's `Executor` shows it: dicts keyed by the user's step objects."""

    def __init__(self, plan: Plan):
        self._plan = plan
        first: dict[int, ExecutorStep] = {}
        for obj in plan.objects:
            first.setdefault(id(plan.planned_of(obj)), obj)
        self.steps: list[ExecutorStep] = [first[id(ps)] for ps in plan.steps]
        """One object per distinct step, dependencies first."""
        planned = {obj: plan.planned_of(obj) for obj in plan.objects}
        self.output_paths: dict[ExecutorStep, str] = {o: ps.output_path for o, ps in planned.items()}
        self.versions: dict[ExecutorStep, dict[str, Any]] = {o: ps.version for o, ps in planned.items()}
        self.version_strs: dict[ExecutorStep, str] = {o: canonical_json(ps.version) for o, ps in planned.items()}
        self.dependencies: dict[ExecutorStep, list[ExecutorStep]] = {
            o: [first[id(d)] for d in ps.dependencies] for o, ps in planned.items()
        }
        self._planned = planned

    @functools.cached_property
    def configs(self) -> dict[ExecutorStep, Any]:
        """Each step's resolved config (what its function receives)."""
        resolved = {id(ps): self._plan.resolve_config(ps) for ps in self._plan.steps}
        return {o: resolved[id(ps)] for o, ps in self._planned.items()}


class Executor(core.Executor):
    """marin_lab's `Executor` with Marin's signature and attributes for the last plan it made (see the
    module docstring). Keyword arguments beyond Marin's are `ExecutorMainConfig` fields (`backend`,
    `max_failure_retries`, ...) or the core executor's own (`script`, `regions`, `prices`)."""

    _view: tuple[Plan, MarinView] | None = None

    def __init__(
        self,
        prefix: str | None = None,
        executor_info_base_path: str | None = None,
        description: str | None = None,
        **options: Any,
    ):
        settings = {k: v for k, v in options.items() if k in SETTINGS}
        config = ExecutorMainConfig(prefix=prefix, executor_info_base_path=executor_info_base_path, **settings)
        super().__init__(config, description=description, **{k: v for k, v in options.items() if k not in SETTINGS})

    def marin_view(self) -> MarinView:
        """The last plan as Marin shows it (made once per plan)."""
        plan = self.last_plan
        if plan is None:
            # Not an AttributeError: from inside a property, that would be taken for a missing attribute.
            raise ExecutorConfigError(
                "this executor has not planned anything yet; call run(steps) or plan(steps) first"
            )
        if self._view is None or self._view[0] is not plan:
            self._view = (plan, MarinView(plan))
        return self._view[1]

    steps = property(lambda self: self.marin_view().steps)
    output_paths = property(lambda self: self.marin_view().output_paths)
    configs = property(lambda self: self.marin_view().configs)
    versions = property(lambda self: self.marin_view().versions)
    version_strs = property(lambda self: self.marin_view().version_strs)
    dependencies = property(lambda self: self.marin_view().dependencies)


HEARTBEAT_TIMEOUT = leases.DEFAULT_TIMEOUT_S
"""Seconds after its last heartbeat that a lease is stale (Marin's name)."""


@dataclasses.dataclass(frozen=True)
class Lease:
    """Marin's view of a lease record: its holder and the time of its last heartbeat."""

    worker_id: str
    timestamp: float

    def is_stale(self) -> bool:
        return time.time() - self.timestamp > HEARTBEAT_TIMEOUT


class StatusFile:
    """The step at `output_path` as Marin's `StatusFile` sees it.

    `status` reads ours, Marin's JSON lines or its one-word file. The lock methods act on our lease
    file (`.executor_lease`, `marin_lab.execution.state.lease`, with its conditional writes), not on
    Marin's `.executor_status.lock`. `write_status` writes ours (`.executor_status`), as a driver
    that holds the step would.
    """

    def __init__(self, output_path: str, worker_id: str | None = None):
        self.output_path = str(output_path)
        self.path = get_status_path(self.output_path)
        self.worker_id = worker_id or leases.new_driver_id()
        self._lease = leases.Lease(self.output_path, self.worker_id)

    @property
    def status(self) -> str | None:
        record = read_status(self.output_path)
        return None if record is None else record.get("status")

    def write_status(self, status: str) -> None:
        """Record `status` (one of the STATUS_* names) as this worker."""
        write_status(self.output_path, Status(status), driver=self.worker_id)

    def try_acquire_lock(self) -> bool:
        """Take the lease if it is free, stale or already ours."""
        return self._lease.try_acquire() is None

    def refresh_lock(self) -> None:
        """Heartbeat; raises LeaseLostError if another worker holds the lease now."""
        if not self._lease.renew():
            raise LeaseLostError(f"{self.output_path}: the lease is held by another worker now")

    def release_lock(self) -> None:
        self._lease.release()

    def _read_lock_with_generation(self) -> tuple[Any, Lease | None]:
        got = self._lease.file.read()
        if got is None:
            return None, None
        data, generation = got
        holder = leases.LeaseHolder.parse(data)
        return generation, None if holder is None else Lease(holder.holder, holder.heartbeat)

    def _write_lock(self, lease: Lease, if_generation_match: Any = None) -> Any:
        """Write `lease` as the lease record (compare-and-swap against `if_generation_match`)."""
        record = leases.Lease(self.output_path, lease.worker_id, clock=lambda: lease.timestamp)._content()
        if if_generation_match is None:
            return self._lease.file.create(record)
        return self._lease.file.replace(record, if_generation_match)


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
