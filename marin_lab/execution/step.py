"""Steps and the placeholders that go in their configs.

A step's config is a plain (frozen) dataclass. Three kinds of placeholder may sit anywhere in it
(inside dataclasses, lists, tuples and dicts):

- `versioned(v)`: `v` enters the step's identity hash.
- `output_path_of(step, subpath)` (or a bare `ExecutorStep`): a dependency; replaced by the
  dependency's output path (joined with `subpath`).
- `this_output_path(subpath)`: replaced by the step's own output path.

Every other field is an unversioned tuning knob (a worker count, a batch size for I/O).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
ConfigT = TypeVar("ConfigT")

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*$")


@dataclasses.dataclass(frozen=True, eq=False)
class ExecutorStep(Generic[ConfigT]):
    """One node of an experiment: `fn(config)` writes its outputs under the step's output path."""

    name: str
    """Slash-separated name, e.g. 'tokenize/docs'; the output path is `{prefix}/{name}-{hash8}`."""
    fn: Callable[[ConfigT], Any]
    """A module-level function taking the resolved config; it never sees placeholders."""
    config: ConfigT
    """A dataclass; may hold `versioned`, `output_path_of` and `this_output_path` placeholders."""
    description: str | None = None
    resources: Any = None
    """Ray options as a dict ({"num_cpus": 2, "num_gpus": 1, ...}) or a `StepRunner` object."""
    override_output_path: str | None = None
    """Pin the output path (relative paths are under the prefix); a mismatch is logged."""
    environment: Any = None
    """A `StepEnvironment`: run `fn` in an isolated, locked Python environment (docs/environments.md)."""

    def cd(self, subpath: str) -> "InputName":
        """A reference to `subpath` under this step's output path."""
        return InputName(step=self, subpath=subpath)

    def __truediv__(self, subpath: str) -> "InputName":
        return self.cd(subpath)

    def __repr__(self) -> str:
        return f"ExecutorStep(name={self.name!r})"


@dataclasses.dataclass(frozen=True)
class InputName:
    """A path inside another step's output (`step`), or, with `step=None`, a fixed path.

    A fixed relative path is taken under the prefix and enters the identity as written; an
    absolute URL enters as written. A string `step_name` refers to a step of the experiment by
    name and is checked when the DAG is planned.
    """

    step: ExecutorStep | None = None
    subpath: str | None = None
    step_name: str | None = None

    @staticmethod
    def hardcoded(path: str) -> "InputName":
        return InputName(step=None, subpath=path)

    def cd(self, subpath: str) -> "InputName":
        joined = f"{self.subpath.rstrip('/')}/{subpath.lstrip('/')}" if self.subpath else subpath
        return dataclasses.replace(self, subpath=joined)


@dataclasses.dataclass(frozen=True)
class OutputName:
    """Placeholder for the step's own output path (joined with `subpath`)."""

    subpath: str | None = None


@dataclasses.dataclass(frozen=True)
class VersionedValue(Generic[T]):
    """A config value that enters the step's identity hash."""

    value: T


def versioned(value: T) -> T:
    """Mark `value` as part of the step's identity. The type checker sees `T`."""
    if isinstance(value, VersionedValue):
        return value  # type: ignore[return-value]
    return VersionedValue(value)  # type: ignore[return-value]


def output_path_of(step: ExecutorStep | str, subpath: str | None = None) -> str:
    """The output path of `step` (joined with `subpath`), resolved when the DAG is planned.

    `step` may be a step of the experiment given by name; an unknown name is an error at plan time.
    """
    if isinstance(step, str):
        return InputName(step=None, subpath=subpath, step_name=step)  # type: ignore[return-value]
    return InputName(step=step, subpath=subpath)  # type: ignore[return-value]


def this_output_path(subpath: str | None = None) -> str:
    """The step's own output path (joined with `subpath`)."""
    return OutputName(subpath=subpath)  # type: ignore[return-value]


def unwrap_versioned_value(value: Any) -> Any:
    return value.value if isinstance(value, VersionedValue) else value


def validate_name(name: Any) -> str | None:
    """None if `name` is a valid step name, else why not."""
    if not isinstance(name, str) or not name:
        return "the name must be a non-empty string"
    if not _NAME_RE.match(name) or ".." in name.split("/"):
        return (
            "the name may hold letters, digits, '_', '.', '-' and '/' separators, and must not start "
            "with '/' or contain '..'"
        )
    return None
