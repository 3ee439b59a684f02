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

Steps arrive as an iterable: a list or tuple is one executor run; any other iterable is consumed
lazily (`marin_lab.marin.step_batches`), one executor run per batch, so an endless generator runs in
bounded memory. Each batch gets the executor's whole-plan checks; across batches the run remembers
which step claimed each output path (two different steps at one path are refused, naming both) and
the mutable steps it built (built once per run).

An `ExecutorStep` may sit in a StepSpec's `deps` (an ArtifactStep that reads an ExecutorStep's
output), and `executor_step(spec)` gives the ExecutorStep for a StepSpec, for an ExecutorStep
config that reads an artifact (`marin_lab.marin.lazy.executor_step`).

Placement is Marin's: a plain step function runs in a thread of the driver, a `remote(...)` one on
Ray with its resources (`marin_lab.marin.thread_backend`); `backend="local"` or `"ray"` (or
`$MARIN_LAB_BACKEND`) chooses marin_lab's worker processes or Ray for every step instead. A step
that fails raises RuntimeError, as Marin's runner does, naming the failed steps and their records.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import logging
import os
import time  # noqa: F401 - Marin's tests replace step_runner.time with a fake clock
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import is_dataclass
from typing import Any

from pydantic import BaseModel

from marin_lab.execution import THIS_OUTPUT_PATH, ExecutorMainConfig, ExecutorStep, InputName, versioned
from marin_lab.execution import executor as core
from marin_lab.execution.config import SETTINGS
from marin_lab.execution.errors import ExperimentFailedError, StepDefinitionError
from marin_lab.execution.executor import RunReport
from marin_lab.execution.main import offer_steps
from marin_lab.execution.plan.planner import Plan, PlannedStep
from marin_lab.execution.record.artifacts import Reproducibility
from marin_lab.execution.review.baseline import LastRun, RecordIndex
from marin_lab.execution.review.decide import Decision
from marin_lab.execution.state.status import Status, read_status
from marin_lab.io.fs import makedirs
from marin_lab.marin.artifact import (
    FINGERPRINT_KEY,
    VERSION_KEY,
    check_drift,
    is_mutable_version,
    write_artifact,
)
from marin_lab.marin.fingerprint import flatten_json
from marin_lab.marin.remote import RemoteCallable
from marin_lab.marin.resources import step_resources
from marin_lab.marin.step_batches import batches
from marin_lab.marin.step_spec import StepSpec, _is_relative_path, marin_prefix
from marin_lab.marin.thread_backend import ThreadOrRayBackend
from marin_lab.store.layout import ARTIFACT_RECORD_FILE

__all__ = ["SpecFunction", "StepRunner", "executor_step", "executor_steps"]

logger = logging.getLogger(__name__)


_DEP_PATHS: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar("marin_lab_dep_paths", default=None)


def current_dep_paths() -> tuple[str, ...] | None:
    """Inside a running StepSpec function: its dependencies' output paths as the executor resolved
    them (in `deps` order), or None outside one. An artifact reads its deps here, so a run under
    another prefix (`marin-lab reproduce`) reads what that run planned."""
    return _DEP_PATHS.get()


@dataclasses.dataclass(frozen=True)
class SpecConfig:
    """The config of the ExecutorStep a StepSpec runs as."""

    identity: Any
    """versioned: what the step's identity is made of (see the module docstring)."""
    deps: list[Any] = dataclasses.field(default_factory=list)
    """References to the dependencies' ExecutorSteps: the executor waits for them."""
    output_path: str = THIS_OUTPUT_PATH


@dataclasses.dataclass(frozen=True, eq=False)
class SpecFunction:
    """`fn(output_path)` of a StepSpec, as an ExecutorStep function (see the module docstring).

    Two are the same function when their StepSpecs are the same step by Marin's identity (name,
    output path and `hash_attrs`, an artifact's fingerprint among them): a builder called twice
    makes two handle objects of one artifact, and the planner merges their steps.
    """

    spec: StepSpec

    def _key(self) -> tuple[str, str | None, str]:
        return (
            self.spec.name,
            self.spec.override_output_path,
            json.dumps(self.spec.hash_attrs, sort_keys=True, default=str),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SpecFunction) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def source_function(self) -> Any:
        """The StepSpec's own function, whose source is the step's code (code_provenance.function_fingerprint)."""
        return self.spec.fn

    @property
    def __marin_reproducibility__(self) -> Reproducibility:
        """For `marin-lab reproduce`: `.artifact.json`'s provenance (who, when, argv) is of one run."""
        return Reproducibility(volatile_fields={ARTIFACT_RECORD_FILE: ("provenance",)})

    @property
    def addressed_by_name(self) -> bool:
        """Pinned at `{name}/{version}` by design (the planner does not warn of the pin)."""
        return FINGERPRINT_KEY in self.spec.hash_attrs

    @property
    def __name__(self) -> str:
        return getattr(self.spec.fn, "__name__", self.spec.name)

    def __call__(self, config: SpecConfig) -> Any:
        fn = self.spec.fn
        if fn is None:
            return None
        makedirs(config.output_path)
        token = _DEP_PATHS.set(tuple(config.deps))
        try:
            result = fn(config.output_path)
        finally:
            _DEP_PATHS.reset(token)
        if not self.spec.writes_record and (
            isinstance(result, BaseModel) or (is_dataclass(result) and not isinstance(result, type))
        ):
            write_artifact(result, config.output_path)
        return None

    def rebuild_reason(self, output_path: str) -> str | None:
        """The executor's hook before reusing a SUCCESS (marin_lab.execution.review.decide.rebuild_reason)."""
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
    return {
        "artifact": f"{spec.name}@{attrs.get(VERSION_KEY)}",
        **{k: v for k, v in attrs.items() if k != "deps"},
        "recipe": recipe_fields(spec.fingerprint_payload),
    }


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
        return output_path[len(base) + 1 :]
    if _is_relative_path(output_path):
        return os.path.abspath(output_path)
    return output_path


class _Addresses:
    """Which step claimed each output path in one run: a second, different step at a claimed path
    is refused before its batch runs. Holds one short key per path, never the steps themselves."""

    def __init__(self) -> None:
        self._claims: dict[str, tuple[str, str, bool]] = {}

    def claim(self, spec: StepSpec) -> None:
        key, label = _address_key(spec)
        artifact = FINGERPRINT_KEY in spec.hash_attrs
        path = spec.output_path
        claimed = self._claims.setdefault(path, (key, label, artifact))
        if claimed[0] == key:
            return
        artifacts = artifact and claimed[2]
        advice = (
            "bump the version of one of them (or rename it)"
            if artifacts
            else "give one of them another name, version or override_output_path"
        )
        raise StepDefinitionError(f"two different steps at {path}: {claimed[1]} and {label}; {advice}")


def _address_key(spec: StepSpec) -> tuple[str, str]:
    """(what makes `spec` the step it is, how to name it): name, hash_attrs (an artifact's
    fingerprint among them) and its dependencies' paths."""
    deps = [d.output_path if isinstance(d, StepSpec) else f"ExecutorStep {d.name}" for d in spec.deps]
    key = json.dumps([spec.name, spec.hash_attrs, deps], sort_keys=True, default=str)
    attrs = spec.hash_attrs
    if FINGERPRINT_KEY in attrs:
        return key, f"{spec.name}@{attrs.get(VERSION_KEY)} (fingerprint {attrs[FINGERPRINT_KEY]})"
    return key, f"step {spec.name!r} (hash_attrs {json.dumps(attrs, sort_keys=True, default=str)})"


def executor_steps(
    specs: Sequence[StepSpec | ExecutorStep], prefix: str | None = None, *, addresses: _Addresses | None = None
) -> list[ExecutorStep]:
    """The ExecutorSteps for `specs` and their dependencies (one per output path), in the given order.
    StepDefinitionError when two different steps share an output path (`addresses` remembers the
    paths of earlier batches of one run)."""
    root = prefix or marin_prefix()
    book = addresses if addresses is not None else _Addresses()
    made: dict[str, ExecutorStep] = {}
    claimed: set[int] = set()  # the spec objects checked (a shared dependency is visited once per edge)

    def convert(spec: StepSpec | ExecutorStep) -> ExecutorStep:
        if isinstance(spec, ExecutorStep):
            return spec
        if id(spec) not in claimed:
            book.claim(spec)
            claimed.add(id(spec))
        key = spec.output_path
        if key in made:
            return made[key]
        deps = [InputName(step=convert(d)) for d in spec.deps]
        resources: Any = None
        if isinstance(spec.fn, RemoteCallable):
            resources = step_resources(spec.fn.resources)[0]
        step = ExecutorStep(
            name=spec.name,
            fn=SpecFunction(spec),
            config=SpecConfig(identity=versioned(_identity(spec)), deps=deps),
            override_output_path=_pin(spec.output_path, root),
            resources=resources,
            description=f"{spec.name}@{spec.hash_attrs[VERSION_KEY]}" if VERSION_KEY in spec.hash_attrs else None,
        )
        made[key] = step
        return step

    return [convert(s) for s in specs]


def _is_mutable(ps: PlannedStep) -> bool:
    """Whether `ps` is an artifact at a mutable (`dev`) version: rebuilt once per run."""
    fn = ps.step.fn
    return (
        isinstance(fn, SpecFunction)
        and FINGERPRINT_KEY in fn.spec.hash_attrs
        and is_mutable_version(str(fn.spec.hash_attrs.get(VERSION_KEY, "")))
    )


def _served_from_cache(ps: PlannedStep) -> bool:
    """Whether a run reuses the step's output: SUCCESS recorded, and not a mutable version."""
    if _is_mutable(ps):
        return False
    return (read_status(ps.output_path) or {}).get("status") == Status.SUCCESS.value


def executor_step(spec: StepSpec | ExecutorStep, prefix: str | None = None) -> ExecutorStep:
    """The ExecutorStep `spec` runs as: put it in an ExecutorStep's config (or `output_path_of` it)."""
    return executor_steps([spec], prefix)[0]


class _SpecExecutor(core.Executor):
    """marin_lab's executor, with Marin's in-thread placement as the `thread` backend."""

    def __init__(
        self,
        config: ExecutorMainConfig,
        *,
        context: contextvars.Context,
        built: AbstractSet[str] = frozenset(),
        **kwargs: Any,
    ):
        backend = config.backend
        super().__init__(dataclasses.replace(config, backend="local" if backend == "thread" else backend), **kwargs)
        self.backend_name = backend
        self._context = context
        self.built = built
        """Output paths of the mutable steps an earlier batch of this run built: reused, not rebuilt."""
        self.thread_backend: ThreadOrRayBackend | None = None

    def select(self, plan: Plan, run_only: Sequence[str] | None) -> list[PlannedStep]:
        """The roots and what they need, except below a step served from cache: Marin prunes a
        built subtree (its unbuilt ancestors are not run), where marin_lab's executor runs them."""
        if run_only:
            return super().select(plan, run_only)
        keep: set[str] = set()
        stack = list(plan.roots)
        while stack:
            ps = stack.pop()
            if ps.identity in keep:
                continue
            keep.add(ps.identity)
            if ps.output_path not in self.built and not _served_from_cache(ps):
                stack.extend(ps.dependencies)
        return [ps for ps in plan.steps if ps.identity in keep]

    def _decide_one(
        self, ps: PlannedStep, st: dict[str, Any] | None, index: RecordIndex | None, last_run: LastRun | None = None
    ) -> Decision:
        if ps.output_path in self.built and (st or {}).get("status") == Status.SUCCESS.value:
            return Decision(ps, "skip", "mutable version built earlier in this run")
        return super()._decide_one(ps, st, index, last_run)

    def _make_backend(self) -> Any:
        if self.backend_name != "thread":
            return super()._make_backend()
        self.thread_backend = ThreadOrRayBackend(self._context, ray_address=self.ray_address)
        return self.thread_backend


class StepRunner:
    """Runs StepSpec graphs on marin_lab's executor (see the module docstring).

    `backend`: "thread" (Marin's placement: a plain step in a driver thread, a `remote(...)` one on
    Ray with its resources), "local" (a worker process per step) or "ray"; default
    `$MARIN_LAB_BACKEND`, else "thread". `batch_size`: how many steps of a lazy iterable (anything
    but a list or tuple) one executor run takes at most (`marin_lab.marin.step_batches`). Other
    keyword arguments go to `marin_lab.execution.Executor` (`max_failure_retries`, ...).
    """

    def __init__(
        self,
        *,
        backend: str | None = None,
        prefix: str | None = None,
        batch_size: int = 64,
        **executor_options: Any,
    ):
        self.backend = backend
        self.prefix = prefix
        self.batch_size = batch_size
        self.executor_options = executor_options
        self.last_report: Any = None

    def run(
        self,
        steps: Iterable[StepSpec | ExecutorStep],
        *,
        dry_run: bool = False,
        force_run_failed: bool = True,
        max_concurrent: int | None = None,
    ) -> None:
        """Run `steps` and everything they depend on; steps already done are reused.

        A list or tuple is planned whole; any other iterable is consumed lazily, batch by batch, each
        batch planned (identities, egress) and run before the next is taken, so a generator that
        never ends on its own is served in bounded memory. Across batches the run remembers each
        output path's step (a different step at a path seen before is refused) and the mutable
        steps it built (built once per run). The first batch with a failed step stops the run.

        A failure raises RuntimeError('N step(s) failed: ...') whose cause is, for a step that ran
        in-thread, RuntimeError('Step failed: NAME') caused by the step's own exception.
        """
        prefix = self.prefix or marin_prefix()
        addresses = _Addresses()
        built: set[str] = set()
        for batch in batches(steps, self.batch_size):
            roots = executor_steps(batch, prefix, addresses=addresses)
            if not dry_run:
                offer_steps(roots)  # `marin-lab explain` runs the experiment file up to here
            self.last_report = self._run_batch(roots, prefix, built, dry_run, force_run_failed, max_concurrent)

    def _run_batch(
        self,
        roots: list[ExecutorStep],
        prefix: str,
        built: set[str],
        dry_run: bool,
        force_run_failed: bool,
        max_concurrent: int | None,
    ) -> RunReport:
        settings = {k: v for k, v in self.executor_options.items() if k in SETTINGS}
        others = {k: v for k, v in self.executor_options.items() if k not in SETTINGS}
        config = ExecutorMainConfig(
            prefix=prefix,
            backend=self.backend or os.environ.get("MARIN_LAB_BACKEND") or "thread",
            max_concurrent=max_concurrent or 8,
            force_run_failed=force_run_failed,
            **settings,
        )
        executor = _SpecExecutor(config, context=contextvars.copy_context(), built=built, **others)
        try:
            report = executor.run(roots, dry_run=dry_run)
        except ExperimentFailedError as err:
            errors = executor.thread_backend.errors if executor.thread_backend is not None else {}
            if errors:
                identity, original = next(iter(errors.items()))
                step_failure = RuntimeError(f"Step failed: {identity.rsplit('-', 1)[0]}")
                step_failure.__cause__ = original
                raise RuntimeError(str(err)) from step_failure
            raise RuntimeError(str(err)) from err
        if not dry_run:
            built.update(
                report.plan.by_identity[identity].output_path
                for identity in report.executed
                if _is_mutable(report.plan.by_identity[identity])
            )
        return report


def is_artifact_step(step: ExecutorStep) -> bool:
    """Whether an ExecutorStep runs a name@version artifact."""
    fn: Callable[..., Any] = step.fn
    return isinstance(fn, SpecFunction) and FINGERPRINT_KEY in fn.spec.hash_attrs
