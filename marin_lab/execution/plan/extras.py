"""Marin's `pip_dependency_groups=`, as a locked step environment.

Marin installed a step's groups with Ray's runtime_env on top of the worker's packages, unpinned.
Here a group is an extra of this project's pyproject.toml (`[project.optional-dependencies]`) or,
failing that, a pip requirement itself, as in Marin. The step gets a `StepEnvironment` holding
the project's own dependencies plus those requirements, locked by requirements/constraints.txt,
so the environment is the base one plus the groups, and rebuilding it months later gives the same
packages (docs/environments.md).
"""

from __future__ import annotations

import functools
import os
import pathlib
import tomllib
from collections.abc import Sequence
from typing import Any

from marin_lab.environments import StepEnvironment
from marin_lab.execution.errors import StepDefinitionError

PROJECT_ROOT = str(pathlib.Path(__file__).resolve().parents[3])
CONSTRAINTS = os.path.join("requirements", "constraints.txt")


@functools.lru_cache(maxsize=4)
def _project(root: str) -> dict[str, Any]:
    try:
        with open(os.path.join(root, "pyproject.toml"), "rb") as f:
            return tomllib.load(f).get("project", {})
    except FileNotFoundError:
        return {}


def requirements_for_groups(groups: Sequence[str], *, root: str = PROJECT_ROOT) -> list[str]:
    """The project's dependencies plus each group's requirements (an extra's, or the group as a spec)."""
    project = _project(root)
    extras: dict[str, list[str]] = project.get("optional-dependencies", {})
    requirements = list(project.get("dependencies", []))
    for group in groups:
        requirements += extras.get(group, [group])
    return requirements


def environment_for_groups(groups: Sequence[str], *, step_label: str, root: str = PROJECT_ROOT) -> StepEnvironment:
    """A `StepEnvironment` for Marin's `pip_dependency_groups` (see the module docstring)."""
    if isinstance(groups, str) or not all(isinstance(g, str) and g.strip() for g in groups):
        raise StepDefinitionError(
            f"{step_label}: pip_dependency_groups={groups!r} must be a list of extras or pip specs, e.g. ['tokenize']"
        )
    constraints = os.path.join(root, CONSTRAINTS)
    return StepEnvironment(
        requirements=tuple(requirements_for_groups(groups, root=root)),
        constraints=constraints if os.path.exists(constraints) else None,
    )
