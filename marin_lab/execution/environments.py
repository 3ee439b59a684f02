"""The older path of `marin_lab.environments` (per-step locked environments), which experiment files
written from an earlier docs/environments.md import: `from marin_lab.execution.environments import
StepEnvironment` keeps working. New code imports `marin_lab.environments`."""

from marin_lab.environments import (
    EnvironmentBuildError,
    EnvironmentStepError,
    StepEnvironment,
    cache_root,
    ensure_environment,
    environment_python,
    normalized_requirements,
    read_environment_record,
    run_in_environment,
    run_in_step_environment,
)

__all__ = [
    "EnvironmentBuildError",
    "EnvironmentStepError",
    "StepEnvironment",
    "cache_root",
    "ensure_environment",
    "environment_python",
    "normalized_requirements",
    "read_environment_record",
    "run_in_environment",
    "run_in_step_environment",
]
