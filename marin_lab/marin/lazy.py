"""Artifacts addressed by `name@version` (Marin's `marin.execution.lazy`).

- `ArtifactStep[T](name, version, artifact_type, run, build_config, deps, ...)` is an inert, typed
  handle: constructing one runs nothing. Its output is `{prefix}/{name}/{version}`; `version` is a
  calendar version `YYYY.MM.DD[.N]` or a mutable `dev` / `<label>-dev` (the label one path segment).
- `build_config(ctx)` receives a `StepContext`. Literals in the config bear identity; what it pulls
  from the context (`output_path`, `artifact_path(dep)`, `resolved(dep)`, `runtime_arg(key)`,
  `prefix`, `region`) never does. The fingerprint (md5/8 of the config's canonical JSON built with
  placeholders and dep `name@version`s) is recorded in `.artifact.json` and checked for drift; it
  is never part of the path.
- `run(*handles)` / `resolve(handle)` build and load; `lower(handle)` gives the `StepSpec` graph;
  `apply(name, fn, **inputs)` wraps a keyword function (`OUT` is its output path);
  `ArtifactStep.adopt(...)` / `adopt(...)` registers existing data as `name@version`.

Building goes through `marin_lab.marin.step_runner.StepRunner`, that is through marin_lab's
executor (leases, statuses, logs, retries, Ray, records). A dependency may also be an
`ExecutorStep` (its output path; `name@name-hash8` in the fingerprint), and `executor_step(handle)`
gives the ExecutorStep an artifact runs as, for an ExecutorStep config that reads it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Generic, TypeVar, cast

from marin_lab.execution import ExecutorStep
from marin_lab.execution.plan.planner import build_plan
from marin_lab.io.fs import exists
from marin_lab.marin.artifact import (
    EXPECTED_FINGERPRINT_KEY,
    FINGERPRINT_KEY,
    RESULT_TYPE_KEY,
    VERSION_KEY,
    Artifact,
    ArtifactRecord,
    ArtifactTypeMismatchError,
    FingerprintMismatchError,
    is_mutable_version,
    read_record,
    result_type_name,
    validate_segment,
    validate_version,
    write_record,
)
from marin_lab.marin.build_context import resolve_version
from marin_lab.marin.fingerprint import canonical_json, fingerprint_hash
from marin_lab.marin.provenance import Provenance
from marin_lab.marin.remote import RemoteCallable
from marin_lab.marin.step_runner import StepRunner, current_dep_paths
from marin_lab.marin.step_runner import executor_step as _spec_executor_step
from marin_lab.marin.step_spec import StepSpec, _is_relative_path, marin_prefix, marin_region, prefix_join

__all__ = [
    "OUT",
    "ArtifactStep",
    "StepContext",
    "adopt",
    "apply",
    "executor_step",
    "lower",
    "materialized_config",
    "resolve",
    "run",
]

T = TypeVar("T", bound=Artifact)


def _executor_identity(step: ExecutorStep, prefix: str | None = None) -> tuple[str, str]:
    """(`name@name-hash8`, its output path under `prefix`) for an ExecutorStep dependency."""
    plan = build_plan([step], prefix or marin_prefix())
    planned = plan.planned_of(step)
    return f"{step.name}@{planned.identity}", planned.output_path


def _dep_label(dep: Any) -> str:
    if isinstance(dep, ExecutorStep):
        return _executor_identity(dep)[0]
    return f"{dep.name}@{dep.version}"


def _dep_path(dep: Any, prefix: str) -> str:
    if isinstance(dep, ExecutorStep):
        return _executor_identity(dep, prefix)[1]
    return dep.path(prefix)


@dataclasses.dataclass(frozen=True)
class StepContext:
    """What `build_config` resolves against, and the line between identity and execution.

    `for_run` binds the live values; `for_fingerprint` binds placeholders (`<output_path>`,
    `<prefix>`, `<region>`, `<key>` for runtime args, `name@version` for deps), which is how pulled
    values stay out of the fingerprint. `artifact_path` and `resolved` accept declared deps only.
    """

    output_path: str
    prefix: str
    region: str | None
    is_fingerprint: bool
    _dep_ref: Callable[[Any], str]
    _runtime_args: Mapping[str, Any]
    _deps: tuple[Any, ...] = ()
    _loaded: dict[int, Artifact] = dataclasses.field(default_factory=dict)

    def artifact_path(self, dep: Any) -> str:
        """The output path of a declared dependency."""
        self._require_declared(dep)
        return self._dep_ref(dep)

    def resolved(self, dep: ArtifactStep[T]) -> T:
        """The loaded, typed artifact of a declared dependency (read once, then cached)."""
        if self.is_fingerprint:
            raise ValueError("ctx.resolved is unavailable at fingerprint time; branch on ctx.is_fingerprint")
        self._require_declared(dep)
        cached = self._loaded.get(id(dep))
        if cached is None:
            kind = dep.artifact_type if isinstance(dep, ArtifactStep) else Artifact
            cached = kind.raw_load(self._dep_ref(dep))
            self._loaded[id(dep)] = cached
        return cast(T, cached)

    def _require_declared(self, dep: Any) -> None:
        if not any(dep is d for d in self._deps):
            raise ValueError(
                f"{_dep_label(dep) if isinstance(dep, ExecutorStep) else f'{dep.name}@{dep.version}'} is not a "
                "declared dependency of this step; add it to deps=(...) so the runner materializes it before "
                "this step runs"
            )

    def runtime_arg(self, key: str) -> Any:
        """A declared runtime arg: its value at run time, `<key>` at fingerprint time."""
        try:
            return self._runtime_args[key]
        except KeyError:
            raise KeyError(
                f"runtime arg {key!r} is not declared in the step's runtime_args {sorted(self._runtime_args)}"
            ) from None

    @staticmethod
    def for_run(
        output_path: str,
        prefix: str,
        *,
        region: str | None = None,
        runtime_args: Mapping[str, Any] | None = None,
        deps: Iterable[Any] = (),
    ) -> StepContext:
        return StepContext(
            output_path=output_path,
            prefix=prefix,
            region=region,
            is_fingerprint=False,
            _dep_ref=lambda d: _dep_path(d, prefix),
            _runtime_args=runtime_args or {},
            _deps=tuple(deps),
        )

    @staticmethod
    def for_fingerprint(runtime_arg_keys: Iterable[str] = (), deps: Iterable[Any] = ()) -> StepContext:
        return StepContext(
            output_path="<output_path>",
            prefix="<prefix>",
            region="<region>",
            is_fingerprint=True,
            _dep_ref=_dep_label,
            _runtime_args={k: f"<{k}>" for k in runtime_arg_keys},
            _deps=tuple(deps),
        )


@dataclasses.dataclass(frozen=True, eq=False)
class ArtifactStep(Generic[T]):
    """A lazy handle to the artifact `name@version` and how to build it (see the module docstring).

    Equality is identity (handles key dicts); value-equality is `name@version` plus the fingerprint.
    """

    name: str
    version: str
    artifact_type: type[T]
    run: Callable[[Any], Any]
    build_config: Callable[[StepContext], Any]
    deps: tuple[Any, ...] = ()
    runtime_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Execution choices pulled with `ctx.runtime_arg(key)`; never in the fingerprint."""
    override_path: str | None = None
    """Pin to existing data (relative: under the prefix) instead of `{name}/{version}`; no record."""
    adopt_source: str | None = None
    """Existing data registered as this `name@version` (see `adopt`)."""
    adopt_config: dict | None = None
    """For an adopted artifact, the config to record."""
    expected_fingerprint: str | None = None
    """A hard pin: lowering fails when the config fingerprints otherwise; drift fails instead of warning."""

    def __post_init__(self) -> None:
        validate_segment("name", self.name)
        try:
            validate_version(self.version)
        except ValueError as err:
            raise ValueError(f"ArtifactStep {self.name!r}: {err}") from err
        if self.adopt_source is not None and self.override_path is not None:
            raise ValueError(f"{self.name}@{self.version}: an artifact cannot be both adopted and pinned")

    def fingerprint_payload(self) -> str:
        """The canonical bytes the fingerprint hashes."""
        if self.adopt_source is not None:
            return json.dumps({"adopt_source": self.adopt_source, "config": self.adopt_config}, sort_keys=True)
        return canonical_json(self.build_config(StepContext.for_fingerprint(self.runtime_args.keys(), self.deps)))

    def fingerprint(self) -> str:
        """How this artifact is built, in 8 hex digits; independent of prefix, region and resources."""
        return fingerprint_hash(self.fingerprint_payload())

    def path(self, prefix: str | None = None) -> str:
        resolved = prefix or marin_prefix()
        location = self.adopt_source if self.adopt_source is not None else self.override_path
        if location is not None:
            return prefix_join(resolved, location) if _is_relative_path(location) else location
        return prefix_join(resolved, f"{self.name}/{self.version}")

    def lower(self) -> StepSpec:
        """This handle's graph as StepSpecs (nothing runs)."""
        return _lower(self, Provenance.capture(), {})

    def resolve(self, *, max_concurrent: int = 8) -> T:
        """Build this handle (a cache hit builds nothing) and load its typed artifact."""
        return resolve(self, max_concurrent=max_concurrent)

    @classmethod
    def adopt(
        cls, name: str, version: str, source: str, *, kind: type[Artifact] = Artifact, config: dict | None = None
    ) -> ArtifactStep[Any]:
        """Register existing data at `source` as `name@version`: consumers read `source`; running it
        writes a record at `{prefix}/{name}/{version}` naming the source. Nothing is copied."""
        return cls(
            name=name,
            version=version,
            artifact_type=cast(Any, kind),
            run=_adopt_noop,
            build_config=_no_config,
            adopt_source=source,
            adopt_config=config,
        )


def _no_config(_ctx: StepContext) -> None:
    return None


def _adopt_noop(_config: Any) -> None:
    raise AssertionError("adopted artifacts are registered, not computed")


def adopt(
    name: str, version: str, source: str, *, kind: type[Artifact] = Artifact, config: dict | None = None
) -> ArtifactStep[Any]:
    """`ArtifactStep.adopt` (Marin's earlier module-level spelling)."""
    return ArtifactStep.adopt(name, version, source, kind=kind, config=config)


def materialized_config(handle: ArtifactStep, prefix: str) -> Any:
    """The config a run under `prefix` would receive (region None), for inspection and tests."""
    return handle.build_config(
        StepContext.for_run(
            output_path=handle.path(prefix), prefix=prefix, runtime_args=handle.runtime_args, deps=handle.deps
        )
    )


@dataclasses.dataclass(frozen=True)
class _ArtifactFn:
    """The StepSpec function of an ArtifactStep: build the config, run, write `.artifact.json`."""

    handle: ArtifactStep
    fingerprint: str
    payload: str
    result_type: str
    dep_refs: tuple[str, ...]
    provenance: Provenance

    @property
    def __name__(self) -> str:
        return getattr(self.handle.run, "__name__", "run")

    def __call__(self, output_path: str) -> Any:
        h = self.handle
        if h.adopt_source is not None:
            source = h.path(marin_prefix())
            if not exists(source):
                raise FileNotFoundError(f"cannot adopt {h.name}@{h.version}: no data at {source}")
            result, config_json, result_json = None, h.adopt_config, None
        else:
            prefix = marin_prefix()
            own = f"/{h.name}/{h.version}"
            if h.override_path is None and output_path.rstrip("/").endswith(own):
                prefix = output_path.rstrip("/")[: -len(own)]  # the prefix the executor runs under
            ctx = StepContext.for_run(
                output_path=output_path, prefix=prefix, region=marin_region(), runtime_args=h.runtime_args, deps=h.deps
            )
            resolved = current_dep_paths()
            if resolved is not None and len(resolved) == len(h.deps):  # the executor's resolution wins
                paths = list(zip(h.deps, resolved, strict=True))
                ctx = dataclasses.replace(ctx, _dep_ref=lambda d: next(p for dep, p in paths if dep is d))
            config = h.build_config(ctx)
            result = h.run(config)
            source = None
            config_json = json.loads(canonical_json(config))
            result_json = result.result_payload() if isinstance(result, Artifact) else None
        if h.override_path is None:
            write_record(
                ArtifactRecord(
                    name=h.name,
                    version=h.version,
                    fingerprint=self.fingerprint,
                    result_type=self.result_type,
                    output_path=output_path,
                    deps=list(self.dep_refs),
                    config=config_json
                    if isinstance(config_json, dict)
                    else None
                    if config_json is None
                    else {"value": config_json},
                    source=source,
                    result=result_json,
                    fingerprint_payload=self.payload,
                    provenance=self.provenance,
                )
            )
        return result


def _lower(handle: ArtifactStep, provenance: Provenance, memo: dict[int, StepSpec]) -> StepSpec:
    if id(handle) in memo:
        return memo[id(handle)]
    dep_specs: list[Any] = [d if isinstance(d, ExecutorStep) else _lower(d, provenance, memo) for d in handle.deps]
    try:
        payload = handle.fingerprint_payload()
    except TypeError as err:  # strict fingerprinting refused a value (marin_lab.marin.fingerprint)
        raise TypeError(f"ArtifactStep {handle.name}@{handle.version}: {err}") from err
    fingerprint = fingerprint_hash(payload)
    if handle.expected_fingerprint is not None and fingerprint != handle.expected_fingerprint:
        raise FingerprintMismatchError(
            f"{handle.name}@{handle.version}: config fingerprint is {fingerprint}, but "
            f"expected_fingerprint pins {handle.expected_fingerprint}. The recipe changed — update "
            "the pin, and bump the version if this is meant to be a different artifact."
        )
    if not is_mutable_version(handle.version):
        for dep in handle.deps:
            if isinstance(dep, ArtifactStep) and is_mutable_version(dep.version):
                raise ValueError(
                    f"{handle.name}@{handle.version} is a fixed version but depends on mutable "
                    f"{dep.name}@{dep.version}; a mutable dep would rebuild while the fixed parent stays "
                    "cached. Make the parent dev, or pin the dep."
                )
    dep_refs = tuple(_dep_label(d) for d in handle.deps)
    rt_name = result_type_name(handle.artifact_type)
    fn: Any = _ArtifactFn(handle, fingerprint, payload, rt_name, dep_refs, provenance)
    if isinstance(handle.run, RemoteCallable):  # the step runs on the hardware its function asks for
        fn = dataclasses.replace(handle.run, fn=fn)
    hash_attrs: dict[str, Any] = {
        FINGERPRINT_KEY: fingerprint,
        VERSION_KEY: handle.version,
        RESULT_TYPE_KEY: rt_name,
        "deps": list(dep_refs),
    }
    if handle.expected_fingerprint is not None:
        hash_attrs[EXPECTED_FINGERPRINT_KEY] = handle.expected_fingerprint
    spec = StepSpec(
        name=handle.name,
        override_output_path=handle.override_path or f"{handle.name}/{handle.version}",
        deps=dep_specs,
        hash_attrs=hash_attrs,
        fn=fn,
        fingerprint_payload=payload,
        writes_record=True,
    )
    memo[id(handle)] = spec
    return spec


def lower(handle: ArtifactStep) -> StepSpec:
    """`handle.lower()`: for `StepRunner().run([lower(h) for h in handles])`."""
    return handle.lower()


def _graph(handles: Iterable[ArtifactStep]) -> list[ArtifactStep]:
    out: list[ArtifactStep] = []
    seen: set[int] = set()

    def walk(h: Any) -> None:
        if id(h) in seen or not isinstance(h, ArtifactStep):
            return
        seen.add(id(h))
        for d in h.deps:
            walk(d)
        out.append(h)

    for h in handles:
        walk(h)
    return out


def _check_before_running(handles: Iterable[ArtifactStep]) -> None:
    """What must fail before anything is written: a missing adopt source, a changed result type."""
    for h in _graph(handles):
        if h.adopt_source is not None:
            source = h.path(marin_prefix())
            if not exists(source):
                missing = FileNotFoundError(f"cannot adopt {h.name}@{h.version}: no data at {source}")
                raise RuntimeError(f"{h.name}@{h.version} failed: {missing}") from missing
    for h in handles:
        record = read_record(h.path())
        expected = result_type_name(h.artifact_type)
        if (
            record is not None
            and record.result_type
            and record.result_type != expected
            and not is_mutable_version(h.version)
        ):
            raise ArtifactTypeMismatchError(
                f"{h.name}@{h.version}: recorded result_type is {record.result_type}, "
                f"but the handle requests {expected}. The value type changed under a reused version — "
                "bump the version."
            )


def run(*handles: ArtifactStep[T], max_concurrent: int = 8, force_run_failed: bool = True) -> list[T]:
    """Build `handles` (independent steps in parallel) and return their typed artifacts, in order."""
    provenance = Provenance.capture()
    memo: dict[int, StepSpec] = {}
    specs = [_lower(h, provenance, memo) for h in handles]
    _check_before_running(handles)
    StepRunner().run(specs, force_run_failed=force_run_failed, max_concurrent=max_concurrent)
    return [cast(T, h.artifact_type.raw_load(h.path())) for h in handles]


def resolve(handle: ArtifactStep[T], *, max_concurrent: int = 8) -> T:
    """`run` for one handle."""
    return run(handle, max_concurrent=max_concurrent)[0]


def executor_step(handle: ArtifactStep) -> ExecutorStep:
    """The ExecutorStep `handle` runs as, to reference from an ExecutorStep's config
    (`output_path_of(executor_step(handle))`) in an experiment run by `executor_main`."""
    return _spec_executor_step(handle.lower())


class _OutSentinel:
    def __repr__(self) -> str:
        return "OUT"

    def __reduce__(self) -> str:
        return "OUT"  # one object in every process


OUT: Final = _OutSentinel()
"""For `apply`: resolves to the step's output path."""


def _collect_deps(inputs: Mapping[str, Any]) -> list[Any]:
    deps: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, (ArtifactStep, ExecutorStep)):
            if not any(value is d for d in deps):
                deps.append(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    for value in inputs.values():
        walk(value)
    return deps


def _resolve_input(value: Any, ctx: StepContext) -> Any:
    if isinstance(value, (ArtifactStep, ExecutorStep)):
        return ctx.artifact_path(value)
    if value is OUT:
        return ctx.output_path
    if isinstance(value, list):
        return [_resolve_input(v, ctx) for v in value]
    if isinstance(value, tuple):
        return tuple(_resolve_input(v, ctx) for v in value)
    if isinstance(value, dict):
        return {k: _resolve_input(v, ctx) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class _ApplyConfig:
    inputs: Mapping[str, Any]

    def __call__(self, ctx: StepContext) -> dict[str, Any]:
        return {k: _resolve_input(v, ctx) for k, v in self.inputs.items()}


@dataclasses.dataclass(frozen=True)
class _ApplyRun:
    fn: Callable[..., Any]

    def __call__(self, config: dict[str, Any]) -> Any:
        return self.fn(**config)


def apply(
    name: str,
    fn: Callable[..., Any],
    *,
    version: str | None = None,
    artifact_type: type[Artifact] = Artifact,
    pin: str | None = None,
    **inputs: Any,
) -> ArtifactStep[Any]:
    """One step that calls `fn(**inputs)`: a handle input becomes a dep (its path at run time), `OUT`
    the output path, anything else a literal that bears identity. `version=None` defers to the
    ambient BuildContext. TypeError when `fn` cannot bind the inputs."""
    try:
        inspect.signature(fn).bind(**inputs)
    except TypeError as err:
        fn_name = getattr(fn, "__name__", repr(fn))
        raise TypeError(f"apply({name!r}): {fn_name} cannot bind the given inputs: {err}") from err
    run_fn: Any = _ApplyRun(fn.fn) if isinstance(fn, RemoteCallable) else _ApplyRun(fn)
    if isinstance(fn, RemoteCallable):
        run_fn = dataclasses.replace(fn, fn=run_fn)
    return ArtifactStep(
        name=name,
        version=resolve_version(name, version),
        artifact_type=cast(Any, artifact_type),
        run=run_fn,
        build_config=_ApplyConfig(dict(inputs)),
        deps=tuple(_collect_deps(inputs)),
        override_path=pin,
    )
