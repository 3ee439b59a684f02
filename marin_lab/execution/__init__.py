"""The executor: versioned steps, identity hashing, leases, provenance, local and Ray backends.

Public names (as in Marin): `ExecutorStep`, `versioned`, `output_path_of`, `this_output_path`,
`InputName`, `executor_main`, plus `Executor` for programmatic use. See docs/executor.md.
"""

from marin_lab.execution.errors import (
    CycleError,
    EncodingError,
    ExecutorConfigError,
    ExperimentFailedError,
    LeaseLostError,
    MarinLabError,
    MissingDependencyError,
    PreemptedError,
    StepDefinitionError,
    StepFailedError,
    StorageError,
)
from marin_lab.execution.executor import Executor, RunReport
from marin_lab.execution.main import ExecutorMainConfig, executor_main
from marin_lab.execution.resources import StepRunner
from marin_lab.execution.status import Status
from marin_lab.execution.step import (
    ExecutorStep,
    InputName,
    OutputName,
    VersionedValue,
    output_path_of,
    this_output_path,
    unwrap_versioned_value,
    versioned,
)

__all__ = [
    "CycleError", "EncodingError", "Executor", "ExecutorConfigError", "ExecutorMainConfig", "ExecutorStep",
    "ExperimentFailedError", "InputName", "LeaseLostError", "MarinLabError", "MissingDependencyError",
    "OutputName", "PreemptedError", "RunReport", "Status", "StepDefinitionError", "StepFailedError",
    "StepRunner", "StorageError", "VersionedValue", "executor_main", "output_path_of", "this_output_path",
    "unwrap_versioned_value", "versioned",
]
