"""Planning: from the steps a user passes to a validated DAG with identities and output paths.

Everything that can be wrong with an experiment's definition is found here, before anything
runs: bad names, non-JSON-like versioned values, cycles, references to steps that are not in
the experiment, two steps claiming one output path.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from marin_lab.execution.errors import CycleError, MissingDependencyError, StepDefinitionError
from marin_lab.execution.hashing import ConfigScan, hash8, scan_config
from marin_lab.execution.step import ExecutorStep, InputName, OutputName, VersionedValue, validate_name
from marin_lab.io.fs import join

logger = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class PlannedStep:
    """A step with its identity settled. Identical steps (same version) share one PlannedStep."""

    step: ExecutorStep
    version: dict[str, Any]
    hash: str
    output_path: str
    dependencies: list["PlannedStep"]
    scan: ConfigScan
    identity: str = ""
    """`name-hash8`."""

    def __post_init__(self) -> None:
        self.identity = f"{self.step.name}-{self.hash}"

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def fn_path(self) -> str:
        return function_path(self.step.fn)


@dataclasses.dataclass
class Plan:
    prefix: str
    steps: list[PlannedStep]
    """Every distinct step, dependencies before dependents."""
    roots: list[PlannedStep]
    object_map: dict[int, PlannedStep] = dataclasses.field(default_factory=dict, repr=False)
    """id(ExecutorStep object) -> its PlannedStep (identical steps share one)."""
    named_map: dict[str, PlannedStep] = dataclasses.field(default_factory=dict, repr=False)
    """step name -> PlannedStep, for references by name (checked unique at plan time)."""

    def __post_init__(self) -> None:
        self.by_identity = {s.identity: s for s in self.steps}
        self._dependents: dict[str, list[PlannedStep]] = {s.identity: [] for s in self.steps}
        for s in self.steps:
            for d in s.dependencies:
                self._dependents[d.identity].append(s)

    def dependents(self, step: PlannedStep) -> list[PlannedStep]:
        return self._dependents[step.identity]

    def ancestors(self, selected: Iterable[PlannedStep]) -> list[PlannedStep]:
        """`selected` and all their transitive dependencies, in plan order."""
        keep: set[str] = set()
        stack = list(selected)
        while stack:
            s = stack.pop()
            if s.identity in keep:
                continue
            keep.add(s.identity)
            stack.extend(s.dependencies)
        return [s for s in self.steps if s.identity in keep]

    def resolve_config(self, planned: PlannedStep) -> Any:
        """The step's config with every placeholder replaced by a concrete value."""
        return _resolve(planned.step.config, planned, self)


def function_path(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


def _label(step: ExecutorStep) -> str:
    return f"step '{step.name}'"


def _check_step(step: Any, referrer: str | None) -> None:
    if not isinstance(step, ExecutorStep):
        where = f" (referenced by {referrer})" if referrer else ""
        raise StepDefinitionError(f"expected an ExecutorStep{where}, got {type(step).__name__}: {step!r}")
    problem = validate_name(step.name)
    if problem:
        raise StepDefinitionError(f"step {step.name!r}: {problem}")
    fn = step.fn
    if not callable(fn):
        raise StepDefinitionError(f"{_label(step)}: fn is {type(fn).__name__}, not a function")
    qualname = getattr(fn, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise StepDefinitionError(
            f"{_label(step)}: fn {qualname!r} is a lambda or a nested function; step functions must "
            "be module-level functions so that workers can import them"
        )
    if not dataclasses.is_dataclass(step.config) or isinstance(step.config, type):
        raise StepDefinitionError(
            f"{_label(step)}: config is a {type(step.config).__name__}; it must be a dataclass instance"
        )


def build_plan(roots: Sequence[ExecutorStep], prefix: str) -> Plan:
    """Discover every step reachable from `roots`, validate the DAG and compute identities."""
    # Planning allocates many small objects but frees none of them: the cyclic collector would
    # rescan the whole (large) heap again and again for nothing. Pause it for the duration.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _build_plan(roots, prefix)
    finally:
        if was_enabled:
            gc.enable()


def _build_plan(roots: Sequence[ExecutorStep], prefix: str) -> Plan:
    if not roots:
        raise StepDefinitionError("no steps given: pass steps=[...] to executor_main or Executor.run")
    scans: dict[int, ConfigScan] = {}
    order: list[ExecutorStep] = []  # dependencies first
    by_name: dict[str, list[ExecutorStep]] = {}
    edges: dict[int, list[ExecutorStep]] = {}

    # Pass 1: discover steps through object references, with an iterative DFS that also finds
    # cycles (grey = on the current path).
    WHITE, GREY, BLACK = 0, 1, 2
    color: dict[int, int] = {}
    for root in roots:
        if id(root) not in color:
            _check_step(root, None)
        if color.get(id(root)) == BLACK:
            continue
        stack: list[tuple[ExecutorStep, int]] = [(root, 0)]
        path: list[ExecutorStep] = []
        while stack:
            step, child_index = stack.pop()
            sid = id(step)
            if child_index == 0:
                if color.get(sid) == BLACK:
                    continue
                color[sid] = GREY
                path.append(step)
                scan = scan_config(step.config, step_label=_label(step))
                scans[sid] = scan
                edges[sid] = [i.step for _, i in scan.inputs if i.step is not None]
            children = edges[sid]
            if child_index < len(children):
                stack.append((step, child_index + 1))
                child = children[child_index]
                c = color.get(id(child), WHITE)
                if c == WHITE:
                    _check_step(child, _label(step))
                if c == GREY:
                    cycle = path[path.index(child) :] + [child]
                    raise CycleError(
                        "the steps form a cycle: " + " -> ".join(repr(s.name) for s in cycle)
                        + "; a step cannot depend on itself, directly or through others"
                    )
                if c == WHITE:
                    stack.append((child, 0))
            else:
                color[sid] = BLACK
                path.pop()
                order.append(step)
                by_name.setdefault(step.name, []).append(step)

    # Pass 2: references by name resolve against the discovered steps.
    named_refs: dict[int, dict[str, ExecutorStep]] = {}
    for step in order:
        for field, inp in scans[id(step)].inputs:
            if inp.step_name is None:
                continue
            candidates = by_name.get(inp.step_name, [])
            if not candidates:
                raise MissingDependencyError(
                    f"{_label(step)}: field '{field}' depends on step '{inp.step_name}', which is not "
                    "in this experiment; pass that step to executor_main or reference the step object"
                )
            if len({id(c) for c in candidates}) > 1:
                raise StepDefinitionError(
                    f"{_label(step)}: field '{field}' refers to '{inp.step_name}' by name, but "
                    f"{len(candidates)} steps have that name; reference the step object instead"
                )
            named_refs.setdefault(id(step), {})[field] = candidates[0]
    if named_refs:
        order = _toposort_with_names(order, scans, named_refs)

    # Pass 3: versions in dependency order; identical versions collapse into one PlannedStep.
    planned: dict[int, PlannedStep] = {}
    by_identity: dict[str, PlannedStep] = {}
    for step in order:
        scan = scans[id(step)]
        config_entries = dict(scan.versioned)
        dep_identities: list[str] = []
        deps: list[PlannedStep] = []
        dep_index: dict[str, int] = {}
        for field, inp in scan.inputs:
            target = inp.step if inp.step is not None else named_refs.get(id(step), {}).get(field)
            if target is None:  # a fixed path: enters the identity as written
                config_entries[field] = f"PATH:{inp.subpath}"
                continue
            dep = planned[id(target)]
            idx = dep_index.get(dep.identity)
            if idx is None:
                idx = dep_index[dep.identity] = len(deps)
                deps.append(dep)
                dep_identities.append(dep.identity)
            config_entries[field] = f"DEP[{idx}]/{inp.subpath}" if inp.subpath else f"DEP[{idx}]"
        version = {"name": step.name, "config": config_entries, "dependencies": dep_identities}
        h = hash8(version)
        identity = f"{step.name}-{h}"
        existing = by_identity.get(identity)
        if existing is not None:
            planned[id(step)] = existing
            continue
        output_path = join(prefix, identity)
        if step.override_output_path:
            pinned = step.override_output_path
            pinned = pinned.rstrip("/") if "://" in pinned or pinned.startswith("/") else join(prefix, pinned)
            if pinned != output_path:
                logger.warning("step '%s': output path pinned to %s (computed: %s)", step.name, pinned, output_path)
            output_path = pinned
        ps = PlannedStep(step=step, version=version, hash=h, output_path=output_path, dependencies=deps, scan=scan)
        planned[id(step)] = ps
        by_identity[identity] = ps

    steps = list(by_identity.values())
    seen_paths: dict[str, str] = {}
    for ps in steps:
        other = seen_paths.setdefault(ps.output_path, ps.identity)
        if other != ps.identity:
            raise StepDefinitionError(
                f"steps '{other}' and '{ps.identity}' both write to {ps.output_path}; give one of them "
                "another override_output_path (or none)"
            )
    root_planned = list({id(planned[id(r)]): planned[id(r)] for r in roots}.values())
    named_map = {}
    for refs in named_refs.values():
        for target in refs.values():
            named_map[target.name] = planned[id(target)]
    return Plan(prefix=prefix, steps=steps, roots=root_planned, object_map=planned, named_map=named_map)


def _toposort_with_names(
    order: list[ExecutorStep], scans: dict[int, ConfigScan], named: dict[int, dict[str, ExecutorStep]]
) -> list[ExecutorStep]:
    """Re-sort when name references add edges (and detect the cycles they may close)."""
    deps = {
        id(s): [i.step for _, i in scans[id(s)].inputs if i.step is not None] + list(named.get(id(s), {}).values())
        for s in order
    }
    by_id = {id(s): s for s in order}
    out: list[ExecutorStep] = []
    state: dict[int, int] = {}

    for start in order:
        if state.get(id(start)) == 2:
            continue
        stack = [(id(start), iter(deps[id(start)]))]
        state[id(start)] = 1
        while stack:
            sid, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[sid] = 2
                out.append(by_id[sid])
            elif state.get(id(nxt)) == 1:
                names = [by_id[s].name for s, _ in stack] + [nxt.name]
                raise CycleError("the steps form a cycle: " + " -> ".join(repr(n) for n in names))
            elif state.get(id(nxt)) is None:
                state[id(nxt)] = 1
                stack.append((id(nxt), iter(deps[id(nxt)])))
    return out


def _resolve(obj: Any, planned: PlannedStep, plan: Plan) -> Any:
    if isinstance(obj, VersionedValue):
        return obj.value
    if isinstance(obj, OutputName):
        return join(planned.output_path, obj.subpath) if obj.subpath else planned.output_path
    if isinstance(obj, (InputName, ExecutorStep)):
        inp = obj if isinstance(obj, InputName) else InputName(step=obj)
        if inp.step is None and inp.step_name is None:
            path = inp.subpath or ""
            return path if "://" in path or path.startswith("/") else join(plan.prefix, path)
        target = _find_dep(inp, plan)
        return join(target.output_path, inp.subpath) if inp.subpath else target.output_path
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            if not f.init:
                continue
            old = getattr(obj, f.name)
            new = _resolve(old, planned, plan)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(obj, **changes) if changes else obj
    if isinstance(obj, list):
        return [_resolve(v, planned, plan) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_resolve(v, planned, plan) for v in obj)
    if isinstance(obj, dict):
        return {k: _resolve(v, planned, plan) for k, v in obj.items()}
    return obj


def _find_dep(inp: InputName, plan: Plan) -> PlannedStep:
    if inp.step is not None:
        return plan.object_map[id(inp.step)]
    return plan.named_map[inp.step_name]
