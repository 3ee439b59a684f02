"""Marin's `StepRunner` (its `marin.execution.step_runner`), on marin_lab's executor.

`StepRunner().run(steps)` takes a graph of `StepSpec`s (an ArtifactStep lowers to one) and runs it
through `marin_lab.execution.Executor`, not beside it: each StepSpec becomes an `ExecutorStep`
pinned at the StepSpec's output path (`{prefix}/{name}/{version}` for an artifact), so it gets the
executor's leases, status files, per-attempt logs, preemption and failure retries, backends (local
worker processes or Ray, TPU/GPU resources from `remote(fn, resources=...)`), step records and
experiment records, and shows in `marin-lab status`, `explain`, `gc` and the browser like any step.

What the executor sees of a StepSpec:
- its identity (versioned): an artifact's `name@version`, fingerprint, result type and recipe (the
  fingerprint payload, so `marin-lab explain` shows recipe drift field by field); a plain StepSpec's
  `hash_attrs` and `name_hash`. Dependencies enter as the executor's own dependency edges.
- its function (`SpecFunction`): runs `fn(output_path)`, saves a returned pydantic model as the
  `.artifact.json` (unless the artifact step writes its own), and answers the executor's
  `rebuild_reason` hook before a SUCCESS is reused: a mutable (`dev`) version rebuilds in place;
  a fixed one runs Marin's drift check (a warning, or FingerprintMismatchError under a pin).

An `ExecutorStep` may sit in a StepSpec's `deps` (an ArtifactStep that reads an ExecutorStep's
output), and `executor_step(spec)` gives the ExecutorStep for a StepSpec, for an ExecutorStep
config that reads an artifact (`marin_lab.marin.lazy.executor_step`).

A step that fails raises RuntimeError (Marin's runner does) chained to the executor's
`ExperimentFailedError`, whose message names the step, its error and its records.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time  # noqa: F401 - Marin's tests replace step_runner.time with a fake clock
from collections.abc import Callable, Sequence
from dataclasses import is_dataclass
from typing import Any

from pydantic import BaseModel

from marin_lab.execution import THIS_OUTPUT_PATH, ExecutorStep, versioned
from marin_lab.execution.errors import ExperimentFailedError
from marin_lab.io.fs import makedirs
from marin_lab.marin.artifact import (
    FINGERPRINT_KEY,
    VERSION_KEY,
    check_drift,
    write_artifact,
)
from marin_lab.marin.executor import Executor
from marin_lab.marin.fingerprint import flatten_json
from marin_lab.marin.remote import RemoteCallable
from marin_lab.marin.resources import step_resources
from marin_lab.marin.step_spec import StepSpec, _is_relative_path, marin_prefix

__all__ = ["SpecFunction", "StepRunner", "executor_step", "executor_steps"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SpecConfig:
    """The config of the ExecutorStep a StepSpec runs as."""

    identity: Any
    """versioned: what the step's identity is made of (see the module docstring)."""
    deps: list[Any] = dataclasses.field(default_factory=list)
    """The dependencies' ExecutorSteps: the executor waits for them."""
    output_path: str = THIS_OUTPUT_PATH


@dataclasses.dataclass(frozen=True)
class SpecFunction:
    """`fn(output_path)` of a StepSpec, as an ExecutorStep function (see the module docstring)."""

    spec: StepSpec

    @property
    def __name__(self) -> str:
        return getattr(self.spec.fn, "__name__", self.spec.name)

    def __call__(self, config: SpecConfig) -> Any:
        fn = self.spec.fn
        if fn is None:
            return None
        makedirs(config.output_path)
        result = fn(config.output_path)
        if not self.spec.writes_record and (isinstance(result, BaseModel)
                                            or (is_dataclass(result) and not isinstance(result, type))):
            write_artifact(result, config.output_path)
        return None

    def rebuild_reason(self, output_path: str) -> str | None:
        """The executor's hook before reusing a SUCCESS (marin_lab.execution.decide.rebuild_reason)."""
        if self.spec.hash_attrs.get(FINGERPRINT_KEY) is None:
            return None
        version = self.spec.hash_attrs.get(VERSION_KEY, "")
        if check_drift(self.spec):
            return f"mutable version {version!r}: rebuilds in place on every run"
        return None


def _identity(spec: StepSpec) -> dict[str, Any]:
    attrs = spec.hash_attrs
    if attrs.get(FINGERPRINT_KEY) is None:
        return {"step_spec": spec.name_with_hash, "hash_attrs": attrs}
    return {"artifact": f"{spec.name}@{attrs.get(VERSION_KEY)}", **{k: v for k, v in attrs.items() if k != "deps"},
            "recipe": recipe_fields(spec.fingerprint_payload)}


def recipe_fields(payload: str | None) -> dict[str, str]:
    """An artifact's recipe as `{field.path: JSON of its value}`: what `marin-lab explain` diffs field
    by field. Values stay JSON text, so a literal URL in a recipe is identity, not an input the
    executor's egress guard would place (the step reads it in `build_config`, at run time)."""
    if not payload:
        return {}
    try:
        document = json.loads(payload)
    except ValueError:
        return {"<config>": payload}
    leaves: dict[str, Any] = {}
    flatten_json(document, "", leaves)
    return {key: json.dumps(value, sort_keys=True) for key, value in leaves.items()}


def _pin(output_path: str, prefix: str) -> str:
    """The ExecutorStep's override_output_path for a StepSpec's output path."""
    base = prefix.rstrip("/")
    if output_path.startswith(base + "/"):
        return output_path[len(base) + 1:]
    if _is_relative_path(output_path):
        return os.path.abspath(output_path)
    return output_path


def executor_steps(specs: Sequence[StepSpec | ExecutorStep], prefix: str | None = None) -> list[ExecutorStep]:
    """The ExecutorSteps for `specs` and their dependencies (one per output path), in the given order."""
    root = prefix or marin_prefix()
    made: dict[str, ExecutorStep] = {}

    def convert(spec: StepSpec | ExecutorStep) -> ExecutorStep:
        if isinstance(spec, ExecutorStep):
            return spec
        key = spec.output_path
        if key in made:
            return made[key]
        deps = [convert(d) for d in spec.deps]
        resources: Any = None
        if isinstance(spec.fn, RemoteCallable):
            resources = step_resources(spec.fn.resources)[0]
        step = ExecutorStep(name=spec.name, fn=SpecFunction(spec),
                            config=SpecConfig(identity=versioned(_identity(spec)), deps=deps),
                            override_output_path=_pin(spec.output_path, root), resources=resources,
                            description=f"{spec.name}@{spec.hash_attrs[VERSION_KEY]}"
                            if VERSION_KEY in spec.hash_attrs else None)
        made[key] = step
        return step

    return [convert(s) for s in specs]


def executor_step(spec: StepSpec | ExecutorStep, prefix: str | None = None) -> ExecutorStep:
    """The ExecutorStep `spec` runs as: put it in an ExecutorStep's config (or `output_path_of` it)."""
    return executor_steps([spec], prefix)[0]


class StepRunner:
    """Runs StepSpec graphs on marin_lab's executor (see the module docstring).

    `backend`: "local" (a worker process per step) or "ray"; default `$MARIN_LAB_BACKEND`, else
    "ray" when a step asks for accelerators, else "local". Other keyword arguments go to
    `marin_lab.execution.Executor` (`max_failure_retries`, `max_preemption_retries`, ...).
    """

    def __init__(self, *, backend: str | None = None, prefix: str | None = None, **executor_options: Any):
        self.backend = backend
        self.prefix = prefix
        self.executor_options = executor_options
        self.last_report: Any = None

    def _backend(self, steps: Sequence[ExecutorStep]) -> str:
        if self.backend:
            return self.backend
        if os.environ.get("MARIN_LAB_BACKEND"):
            return os.environ["MARIN_LAB_BACKEND"]
        wants_ray = any(s.resources is not None and not isinstance(s.resources, dict) for s in steps)
        return "ray" if wants_ray else "local"

    def run(self, steps: Sequence[StepSpec | ExecutorStep], *, dry_run: bool = False, force_run_failed: bool = True,
            max_concurrent: int | None = None) -> None:
        """Run `steps` and everything they depend on; steps already done are reused."""
        prefix = self.prefix or marin_prefix()
        roots = executor_steps(steps, prefix)
        every = _closure(roots)
        executor = Executor(prefix=prefix, backend=self._backend(every), max_concurrent=max_concurrent,
                            force_run_failed=force_run_failed, **self.executor_options)
        try:
            self.last_report = executor.run(roots, dry_run=dry_run)
        except ExperimentFailedError as err:
            raise RuntimeError(f"steps failed: {err}") from err


def _closure(roots: Sequence[ExecutorStep]) -> list[ExecutorStep]:
    out: list[ExecutorStep] = []
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        step = stack.pop()
        if id(step) in seen:
            continue
        seen.add(id(step))
        out.append(step)
        config = step.config
        if isinstance(config, SpecConfig):
            stack.extend(d for d in config.deps if isinstance(d, ExecutorStep))
    return out


def is_artifact_step(step: ExecutorStep) -> bool:
    """Whether an ExecutorStep runs a name@version artifact."""
    fn: Callable[..., Any] = step.fn
    return isinstance(fn, SpecFunction) and FINGERPRINT_KEY in fn.spec.hash_attrs



