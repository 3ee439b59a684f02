"""Per-step locked Python environments (docs/environments.md): a `StepEnvironment` names pip
requirements and a constraints file; the executor builds it once per lock and runs the step's
function inside it.

`locked.py` holds the lock hash, the build and the run; `marin_lab/_env_worker.py` is the process
that runs inside an environment (standard library only, so it stays outside this package, whose
modules import marin_lab's own dependencies). The executor's plan turns Marin's
`pip_dependency_groups` into one of these (`marin_lab.execution.plan.extras`).
"""

from marin_lab.environments.locked import (
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
