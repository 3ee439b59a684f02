"""The executor: versioned steps, identity hashing, leases, provenance, local and Ray backends.

Public names (as in Marin): `ExecutorStep`, `versioned`, `ensure_versioned`, `output_path_of`,
`this_output_path`, `THIS_OUTPUT_PATH`, `InputName`, `OutputName`, `get_executor_step`,
`executor_main`, `ExecutorMainConfig`, `Executor` and the `STATUS_*` strings. See docs/executor.md
and docs/coming_from_marin.md.
"""

from marin_lab.execution.config import ExecutorMainConfig
from marin_lab.execution.errors import (
    CycleError,
    EncodingError,
    ExecutorConfigError,
    ExperimentFailedError,
    LeaseLostError,
    MarinLabError,
    MissingDependencyError,
    PreemptedError,
    RunInterruptedError,
    StepDefinitionError,
    StepFailedError,
    StorageError,
    UnschedulableError,
)
from marin_lab.execution.executor import Executor, RunReport
from marin_lab.execution.main import executor_main
from marin_lab.execution.plan.resources import HardwareRunner
from marin_lab.execution.plan.step import (
    THIS_OUTPUT_PATH,
    ExecutorStep,
    InputName,
    OutputName,
    VersionedValue,
    ensure_versioned,
    get_executor_step,
    output_path_of,
    this_output_path,
    unwrap_versioned_value,
    versioned,
)
from marin_lab.execution.state.status import Status
from marin_lab.versioning import versioned_field

STATUS_WAITING, STATUS_RUNNING, STATUS_SUCCESS, STATUS_FAILED, STATUS_DEP_FAILED = (
    s.value for s in (Status.WAITING, Status.RUNNING, Status.SUCCESS, Status.FAILED, Status.DEP_FAILED)
)
STATUS_CANCELLED = Status.CANCELLED.value

__all__ = [
    "STATUS_CANCELLED",
    "STATUS_DEP_FAILED",
    "STATUS_FAILED",
    "STATUS_RUNNING",
    "STATUS_SUCCESS",
    "STATUS_WAITING",
    "THIS_OUTPUT_PATH",
    "CycleError",
    "EncodingError",
    "Executor",
    "ExecutorConfigError",
    "ExecutorMainConfig",
    "ExecutorStep",
    "ExperimentFailedError",
    "InputName",
    "LeaseLostError",
    "MarinLabError",
    "MissingDependencyError",
    "OutputName",
    "PreemptedError",
    "RunInterruptedError",
    "RunReport",
    "Status",
    "StepDefinitionError",
    "StepFailedError",
    "HardwareRunner",
    "StorageError",
    "UnschedulableError",
    "VersionedValue",
    "ensure_versioned",
    "executor_main",
    "get_executor_step",
    "output_path_of",
    "this_output_path",
    "unwrap_versioned_value",
    "versioned",
    "versioned_field",
]
