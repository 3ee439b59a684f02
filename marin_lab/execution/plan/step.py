"""Steps and the placeholders that go in their configs (Marin's names and meanings).

A step's config is a plain (frozen) dataclass, or None. Placeholders may sit anywhere in it
(inside dataclasses, lists, tuples, NamedTuples and dicts):

- `versioned(v)`: `v` enters the step's identity hash.
- `output_path_of(step, name)` / `step / name` / `step.cd(name)` (or a bare `ExecutorStep`): a
  dependency, replaced by the dependency's output path (joined with `name`). `.nonblocking()`
  makes it a pseudo-dependency: it enters the hash, but the step neither waits for it nor runs it
  (evaluate the checkpoints of a training run that is still going).
- `this_output_path(name)` / `THIS_OUTPUT_PATH`: replaced by the step's own output path.

Every other field is an unversioned tuning knob (a worker count, a batch size for I/O).
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from marin_lab.versioning import field_hints

T = TypeVar("T")
ConfigT = TypeVar("ConfigT")

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*$")


@field_hints
@dataclasses.dataclass(frozen=True, eq=False)
class ExecutorStep(Generic[ConfigT]):
    """One node of an experiment: `fn(config)` writes its outputs under the step's output path.

    Equality and hashing are by object identity (as in Marin): two equal-looking steps are still
    two objects; the planner merges them when their versions are equal.
    """

    name: str
    """Slash-separated name, e.g. 'tokenize/docs'; the output path is `{prefix}/{name}-{hash8}`."""
    fn: Callable[[ConfigT], Any]
    """Takes the resolved config: a function, a closure or lambda, or a `@ray.remote` function."""
    config: ConfigT
    """A dataclass (or None); may hold `versioned`, `output_path_of` and `this_output_path` placeholders."""
    description: str | None = None
    override_output_path: str | None = None
    """Pin the output path (relative paths are under the prefix); a mismatch is logged."""
    pip_dependency_groups: list[str] | None = None
    """Marin's per-step pip packages: extras of this project's pyproject.toml or pip specs; the
    step runs in a locked environment built from them (docs/environments.md)."""
    resources: Any = None
    """Ray options as a dict ({"num_cpus": 2, "num_gpus": 1, ...}) or a `HardwareRunner` object."""
    environment: Any = None
    """A `StepEnvironment`: run `fn` in an isolated, locked Python environment (docs/environments.md)."""

    def cd(self, name: str) -> InputName:
        """A reference to `name` under this step's output path."""
        return InputName(step=self, name=name)

    def __truediv__(self, name: str) -> InputName:
        return self.cd(name)

    def with_output_path(self, output_path: str) -> ExecutorStep[ConfigT]:
        """This step with its output path pinned to `output_path`."""
        return dataclasses.replace(self, override_output_path=output_path)

    def as_input_name(self) -> InputName:
        """A reference to this step's output path."""
        return InputName(step=self, name=None)

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
    name: str | None = None
    """The path under the step's output path (None: the output path itself)."""
    block_on_step: bool = True
    """False: a pseudo-dependency; it enters the hash but is neither waited for nor run."""
    step_name: str | None = None

    @staticmethod
    def hardcoded(path: str) -> InputName:
        """A fixed path (relative ones are under the prefix): not part of the pipeline."""
        return InputName(step=None, name=path)

    def cd(self, name: str) -> InputName:
        joined = posixpath.join(self.name, name) if self.name else name
        return dataclasses.replace(self, name=joined)

    def __truediv__(self, name: str) -> InputName:
        return self.cd(name)

    def nonblocking(self) -> InputName:
        """Depend on the step without waiting for it or running it (its identity still counts)."""
        return dataclasses.replace(self, block_on_step=False)


@dataclasses.dataclass(frozen=True)
class OutputName:
    """Placeholder for the step's own output path (joined with `name`)."""

    name: str | None = None


THIS_OUTPUT_PATH: Any = OutputName(None)
"""The step's own output path, usable as a dataclass field default."""


@dataclasses.dataclass(frozen=True)
class VersionedValue(Generic[T]):
    """A config value that enters the step's identity hash."""

    value: T


def versioned(value: T) -> T:
    """Mark `value` as part of the step's identity. The type checker sees `T`."""
    if isinstance(value, VersionedValue):
        return value
    return VersionedValue(value)  # type: ignore[return-value]


ensure_versioned = versioned
"""Marin's spelling: `value` wrapped in `versioned` unless it already is."""


def output_path_of(step: ExecutorStep | str, name: str | None = None) -> Any:
    """The output path of `step` (joined with `name`), resolved when the DAG is planned.

    `step` may be a step of the experiment given by name; an unknown name is an error at plan time.
    The result is an `InputName` (so `/ "sub"` and `.nonblocking()` work); type checkers see a str.
    """
    if isinstance(step, str):
        return InputName(step=None, name=name, step_name=step)
    return InputName(step=step, name=name)


def this_output_path(name: str | None = None) -> Any:
    """The step's own output path (joined with `name`)."""
    return OutputName(name=name)


def get_executor_step(run: ExecutorStep | InputName) -> ExecutorStep:
    """The step behind `run` (a step, or a reference to one)."""
    if isinstance(run, ExecutorStep):
        return run
    if isinstance(run, InputName) and run.step is not None:
        return run.step
    if isinstance(run, InputName):
        raise ValueError(f"{run!r} is a fixed path or a reference by name, not a step of the pipeline")
    raise TypeError(f"expected an ExecutorStep or an InputName, got {type(run).__name__}: {run!r}")


def unwrap_versioned_value(value: Any) -> Any:
    return value.value if isinstance(value, VersionedValue) else value


def validate_name(name: Any) -> str | None:
    """None if `name` is a valid step name, else why not."""
    if not isinstance(name, str) or not name:
        return "the name must be a non-empty string"
    if not _NAME_RE.match(name) or (".." in name and ".." in name.split("/")):
        return (
            "the name may hold letters, digits, '_', '.', '-' and '/' separators, and must not start "
            "with '/' or contain '..'"
        )
    return None
