"""Run a step on chosen hardware (Marin's `marin.execution.remote`).

`remote(fn, resources=ResourceConfig.with_tpu("v5p-8"))` marks a step function with the hardware it
needs. In Marin, calling the wrapper submits a Fray job. Here the whole step already runs where
marin_lab's executor places it: `marin_lab.marin.step_runner` reads `resources` off the step's
function and schedules the step with them (a Ray task on a TPU slice, a GPU, or CPUs), so calling
a `RemoteCallable` on that worker just calls `fn`. Resources never enter an artifact's identity.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from typing import Any

from marin_lab.marin.resources import ResourceConfig

__all__ = ["DEFAULT_JOB_NAME", "RemoteCallable", "remote"]

DEFAULT_JOB_NAME = "remote_job"


def _sanitize_job_name(name: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or DEFAULT_JOB_NAME


@dataclasses.dataclass(frozen=True)
class RemoteCallable:
    """A step function with the resources, environment variables and pip extras it runs with."""

    fn: Callable[..., Any]
    resources: ResourceConfig
    env_vars: dict[str, str] = dataclasses.field(default_factory=dict)
    pip_dependency_groups: list[str] = dataclasses.field(default_factory=list)
    name: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The executor already placed this step on `resources`: run here, with the step's env vars.
        saved = {k: os.environ.get(k) for k in self.env_vars}
        os.environ.update(self.env_vars)
        try:
            return self.fn(*args, **kwargs)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    @property
    def __name__(self) -> str:  # what logs and records name the step function by
        return getattr(self.fn, "__name__", DEFAULT_JOB_NAME)


def remote(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    resources: ResourceConfig | None = None,
    env_vars: dict[str, str] | None = None,
    pip_dependency_groups: list[str] | None = None,
) -> Any:
    """`@remote` (CPU defaults) or `remote(fn, resources=...)`: a `RemoteCallable`."""
    chosen = resources if resources is not None else ResourceConfig.with_cpu()

    def decorator(f: Callable[..., Any]) -> RemoteCallable:
        return RemoteCallable(
            fn=f,
            resources=chosen,
            env_vars=dict(env_vars or {}),
            pip_dependency_groups=list(pip_dependency_groups or []),
            name=name,
        )

    return decorator(fn) if fn is not None else decorator
