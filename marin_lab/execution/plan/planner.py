"""Planning: from the steps a user passes to a validated DAG with identities and output paths.

Everything that can be wrong with an experiment's definition is found here, before anything
runs: bad names, non-JSON-like versioned values, cycles, references to steps that are not in
the experiment, two steps claiming one output path, two different functions claiming one
identity.

The planner also turns Marin's ways of saying things into ours, once: a `@ray.remote` function
becomes its Python function plus its Ray options as the step's resources, Marin's resource
classes (`GpuConfig(...)`, `TpuPodConfig`, `CpuOnlyConfig`, Fray's `ResourceConfig`) become ours, and
`pip_dependency_groups` becomes a locked step environment. `PlannedStep.step` is that normalized
step; the user's own objects stay in `Plan.objects`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import logging
import operator
import re
import types
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from marin_lab.execution.errors import CycleError, ExecutorConfigError, MissingDependencyError, StepDefinitionError
from marin_lab.execution.plan.extras import environment_for_groups
from marin_lab.execution.plan.hashing import ConfigScan, hash8, scan_config, version_hash8, version_of
from marin_lab.execution.plan.resources import RAY_OPTION_KEYS, executor_resources
from marin_lab.execution.plan.sources import portable_value
from marin_lab.execution.plan.step import _NAME_RE, ExecutorStep, InputName, OutputName, VersionedValue, validate_name
from marin_lab.io.fs import join

logger = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False, slots=True)
class PlannedStep:
    """A step with its identity settled. Identical steps (same version) share one PlannedStep."""

    step: ExecutorStep
    """The step as the executor runs it (Marin's spellings normalized; see the module docstring)."""
    hash: str
    output_path: str
    dependencies: list[PlannedStep]
    """What this step waits for (and runs first when they are not done)."""
    scan: ConfigScan
    pseudo_dependencies: Sequence[PlannedStep]
    """`.nonblocking()` inputs: part of the identity, never waited for."""
    identity: str
    """`name-hash8`."""
    inputs: dict[str, Any]
    """The version's "inputs" section: field path -> `DEP[i]...` or `PATH:...`."""
    _version: dict[str, Any] | None = None
    """The version, when the planner made it (a step with pseudo-dependencies); else made on first use."""

    @property
    def version(self) -> dict[str, Any]:
        """What the identity is the hash of (`hashing.version_of`). A plan hashes each step's version
        as it settles it but keeps only the parts: the dict is made when something reads it (a record,
        an explanation), not for each of 100,000 planned steps."""
        if self._version is None:
            self._version = version_of(
                self.step.name, self.scan.versioned, self.inputs, [d.identity for d in self.dependencies]
            )
        return self._version

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
    by_step: dict[Any, PlannedStep] = dataclasses.field(default_factory=dict, repr=False)
    """`step_key(step object)` -> its PlannedStep (identical steps share one); see `planned_of`."""
    objects: list[ExecutorStep] = dataclasses.field(default_factory=list, repr=False)
    """Every step object the user's DAG holds, dependencies first."""
    named_map: dict[str, PlannedStep] = dataclasses.field(default_factory=dict, repr=False)
    """step name -> PlannedStep, for references by name (checked unique at plan time)."""

    by_identity: dict[str, PlannedStep] = dataclasses.field(default_factory=dict, repr=False)
    """identity -> PlannedStep (built from `steps` when not given)."""
    uncommon: list[PlannedStep] | None = dataclasses.field(default=None, repr=False)
    """The steps that may pin their output path or carry resources (None: any may; `build_plan` lists
    them, so that checks of those need not visit every step of a large plan)."""
    names_urls: bool = True
    """Whether some step's config names a URL (`ConfigScan.urls`); False only when none does."""

    def __post_init__(self) -> None:
        if not self.by_identity:
            self.by_identity = {s.identity: s for s in self.steps}
        self._dependents: dict[str, list[PlannedStep]] | None = None
        self._object_map: dict[int, PlannedStep] | None = None

    def planned_of(self, step: ExecutorStep) -> PlannedStep:
        """The PlannedStep of a step object of this plan's DAG (KeyError for another object)."""
        return self.by_step[step_key(step)]

    def uncommon_steps(self) -> list[PlannedStep]:
        """The steps that may pin their output path or carry resources: `uncommon`, or every step."""
        return self.steps if self.uncommon is None else self.uncommon

    @property
    def object_map(self) -> dict[int, PlannedStep]:
        """id(ExecutorStep object) -> its PlannedStep (identical steps share one); made on first use."""
        if self._object_map is None:
            self._object_map = {id(s): self.planned_of(s) for s in self.objects}
        return self._object_map

    def dependents(self, step: PlannedStep) -> list[PlannedStep]:
        if self._dependents is None:  # built on first use: most runs never ask
            self._dependents = {s.identity: [] for s in self.steps}
            for s in self.steps:
                for d in s.dependencies:
                    self._dependents[d.identity].append(s)
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

    def select(self, run_only: Sequence[str] | None) -> list[PlannedStep]:
        """The steps a run considers, dependencies first.

        Without `run_only`: the steps passed in and everything they wait for (a step reached only
        through `.nonblocking()` inputs is not run). With it: the steps whose *name* matches one
        of the regexes (`re.search`, as in Marin; the hash suffix never matches), plus what they
        wait for.
        """
        if not run_only:
            return self.ancestors(self.roots)
        patterns = compile_run_only(run_only)
        chosen = [s for s in self.steps if any(p.search(s.name) for p in patterns)]
        if not chosen:
            names = ", ".join(s.name for s in self.steps[:10]) + (", ..." if len(self.steps) > 10 else "")
            raise ExecutorConfigError(f"--run_only {list(run_only)} matches no step name; the steps are: {names}")
        unused = [p.pattern for p in patterns if not any(p.search(s.name) for s in self.steps)]
        if unused:
            logger.warning("--run_only: %s matched no step name", ", ".join(repr(u) for u in unused))
        return self.ancestors(chosen)

    def forced(self, force_run: Sequence[str] | None) -> set[str]:
        """The identities of the steps whose *name* matches one of the `--force_run` regexes
        (`re.search`, as `--run_only`): they run again even after a SUCCESS."""
        if not force_run:
            return set()
        patterns = compile_run_only(force_run, flag="--force_run")
        chosen = {s.identity for s in self.steps if any(p.search(s.name) for p in patterns)}
        if not chosen:
            names = ", ".join(s.name for s in self.steps[:10]) + (", ..." if len(self.steps) > 10 else "")
            raise ExecutorConfigError(f"--force_run {list(force_run)} matches no step name; the steps are: {names}")
        unused = [p.pattern for p in patterns if not any(p.search(s.name) for s in self.steps)]
        if unused:
            logger.warning("--force_run: %s matched no step name", ", ".join(repr(u) for u in unused))
        return chosen


def compile_run_only(run_only: Sequence[str], *, flag: str = "--run_only") -> list[re.Pattern[str]]:
    """The --run_only (or --force_run) regexes, compiled; a bad one is one clear line."""
    if isinstance(run_only, str):
        run_only = [run_only]
    patterns = []
    for rx in run_only:
        if not isinstance(rx, str):
            raise ExecutorConfigError(f"{flag} {rx!r} is not a string; give regular expressions over step names")
        try:
            patterns.append(re.compile(rx))
        except re.error as err:
            raise ExecutorConfigError(
                f"{flag} {rx!r} is not a valid regular expression ({err}); quote it for your shell, "
                "and escape regex characters such as [ ( * with a backslash"
            ) from None
    return patterns


def function_path(fn: Any) -> str:
    fn = _ray_function(fn) or fn
    if isinstance(fn, functools.partial):
        return f"partial({function_path(fn.func)})"
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


def same_function(a: Any, b: Any) -> bool:
    """Whether two step functions are the same code (two closures made by one factory are)."""
    if a is b:
        return True
    a, b = _ray_function(a) or a, _ray_function(b) or b
    if a is b:
        return True
    if isinstance(a, functools.partial) and isinstance(b, functools.partial):
        try:
            return same_function(a.func, b.func) and a.args == b.args and a.keywords == b.keywords
        except Exception:  # arguments that cannot be compared are taken as different
            return False
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    if code_a is not None and code_b is not None:
        return function_path(a) == function_path(b) and (
            code_a is code_b
            or (code_a.co_filename, code_a.co_firstlineno) == (code_b.co_filename, code_b.co_firstlineno)
        )
    return type(a) is type(b) and _safe_eq(a, b)


def _safe_eq(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


def _ray_function(fn: Any) -> Any:
    """The Python function inside a `@ray.remote` function (None for anything else)."""
    if type(fn).__name__ == "RemoteFunction" and hasattr(fn, "_function"):
        return fn._function
    return None


def _label(step: ExecutorStep) -> str:
    return f"step '{step.name}'"


_CONFIG_TYPES: set[type] = set()
"""Config types already seen to be dataclasses (a dataclass instance's type is never itself a type)."""


def _check_step(step: Any, referrer: ExecutorStep | None) -> None:
    if not isinstance(step, ExecutorStep):
        where = f" (referenced by {_label(referrer)})" if referrer is not None else ""
        raise StepDefinitionError(f"expected an ExecutorStep{where}, got {type(step).__name__}: {step!r}")
    problem = validate_name(step.name)
    if problem:
        raise StepDefinitionError(f"step {step.name!r}: {problem}")
    if not callable(step.fn):
        raise StepDefinitionError(f"{_label(step)}: fn is {type(step.fn).__name__}, not a function")
    if (
        step.config is not None
        and type(step.config) not in _CONFIG_TYPES
        and (not hasattr(type(step.config), "__dataclass_fields__") or isinstance(step.config, type))
    ):
        raise StepDefinitionError(
            f"{_label(step)}: config is a {type(step.config).__name__}; it must be a dataclass instance or None"
        )
    if step.pip_dependency_groups is not None and step.environment is not None:
        raise StepDefinitionError(f"{_label(step)}: give either pip_dependency_groups or environment, not both")
    if step.config is not None:
        _CONFIG_TYPES.add(type(step.config))


def _normalized(step: ExecutorStep) -> ExecutorStep:
    """The step as the executor runs it: Marin's spellings turned into ours."""
    if (
        step.resources is None
        and step.pip_dependency_groups is None
        and step.environment is None
        and type(step.fn) is types.FunctionType
    ):
        return step  # a plain function and nothing to turn into ours (most steps): no call below would change it
    try:
        resources = executor_resources(step.resources)  # Marin's GpuConfig(...) and friends
    except Exception as err:
        raise StepDefinitionError(f"{_label(step)}: resources {step.resources!r}: {err}") from err
    if (
        step.pip_dependency_groups is None
        and step.environment is None
        and _ray_function(step.fn) is None
        and resources is step.resources
    ):
        return step  # nothing to turn into ours (most steps)
    changes: dict[str, Any] = {}
    if resources is not step.resources:
        changes["resources"] = resources
    inner = _ray_function(step.fn)
    if inner is not None:
        changes["fn"] = inner
        if step.resources is None:
            options = {
                k: v
                for k, v in (getattr(step.fn, "_default_options", None) or {}).items()
                if k in RAY_OPTION_KEYS and v is not None
            }
            changes["resources"] = options or None
    if step.pip_dependency_groups is not None:
        changes["environment"] = environment_for_groups(step.pip_dependency_groups, step_label=_label(step))
    environment = changes.get("environment", step.environment)
    fn = changes.get("fn", step.fn)
    qualname = getattr(fn, "__qualname__", "")
    if environment is not None and ("<lambda>" in qualname or "<locals>" in qualname):
        raise StepDefinitionError(
            f"{_label(step)}: fn {qualname!r} is a lambda or a nested function, but the step runs in its own "
            "environment (another interpreter), which imports the function by name; define it at the top "
            "level of a module"
        )
    return dataclasses.replace(step, **changes) if changes else step


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Planning allocates many small objects but frees none of them: the cyclic collector would
    rescan the whole (large) heap again and again for nothing. Pause it for the duration.

    On the way out, what planning made joins the oldest generation (`gc.freeze()` moves every
    tracked object to the permanent generation and `gc.unfreeze()` moves it on to the oldest):
    the plan lives as long as the run, and otherwise the first young collection after planning
    would walk all of it (about 15% of planning's time at 10,000 steps). Nothing is exempted from
    collection: the oldest generation is still collected in full collections. A process that froze
    objects itself keeps them frozen: then the objects stay young, as before."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def build_plan(roots: Sequence[ExecutorStep], prefix: str) -> Plan:
    """Discover every step reachable from `roots`, validate the DAG and compute identities."""
    with gc_paused():
        return _build_plan(roots, prefix)


_FUNCTION = types.FunctionType


def step_key(step: Any) -> Any:
    """A step's key in the planner's maps: the step object itself when it is an `ExecutorStep`, which
    hashes and compares by identity (a dict finds it without making an int or reading the int it
    stored: at 100,000 steps each such read is a cache miss), else `id(step)` (a subclass may compare
    by value). The hot loops below spell it out."""
    return step if type(step) is ExecutorStep else id(step)


_IDENTITY = operator.attrgetter("identity")
_new_object = object.__new__
_NO_STEPS: tuple[PlannedStep, ...] = ()  # the pseudo-dependencies of every step that has none
_N_DEP = 16
_DEP = tuple(f"DEP[{i}]" for i in range(_N_DEP))  # the common input entries, made once


def _plain(step: Any) -> bool:
    """Whether `step` passes `_check_step` and `_normalized` leaves it as it is, by a sufficient test
    cheap enough to make for every step (a step it does not clear goes through both in full)."""
    return (
        type(step) is ExecutorStep
        and type(name := step.name) is str
        and _NAME_RE.match(name) is not None
        and ".." not in name
        and type(step.fn) is _FUNCTION
        and (step.config is None or type(step.config) in _CONFIG_TYPES)
        and step.resources is None
        and step.pip_dependency_groups is None
        and step.environment is None
        and not step.override_output_path
    )


def _settle(
    step: ExecutorStep,
    scan: ConfigScan,
    planned: dict[Any, PlannedStep],
    by_identity: dict[str, PlannedStep],
    base: str,
    checked: bool,
) -> bool:
    """Plan a step of the common kind as it finishes discovery, as pass 3 of `_build_plan` would; False
    (nothing done) for anything else: a step that is not `_plain` (or pins its path), a fixed local
    or named input, a pseudo-dependency, or an identity already taken by another function. Such a step
    and every one after it are left to pass 3, which raises the errors in the order it always has."""
    if not checked and (  # `_normalized` would return it as it is (and `_check_step` passed it)
        step.override_output_path
        or step.resources is not None
        or step.pip_dependency_groups is not None
        or step.environment is not None
        or type(step.fn) is not _FUNCTION
    ):
        return False
    deps: list[PlannedStep] = []
    entries: dict[str, Any] = {}
    for field, inp in scan.inputs:
        target = inp.step
        name = inp.name
        if target is None:
            if inp.step_name is not None or (name or "").startswith(("/", "file://")):
                return False
            entries[field] = f"PATH:{name}"
            continue
        if not inp.block_on_step:
            return False
        dep = planned[target if type(target) is ExecutorStep else id(target)]
        if dep in deps:  # identity comparison (PlannedStep has eq=False); identical steps share one
            idx = deps.index(dep)
        else:
            idx = len(deps)
            deps.append(dep)
        entries[field] = f"DEP[{idx}]/{name}" if name else _DEP[idx] if idx < _N_DEP else f"DEP[{idx}]"
    h = version_hash8(step.name, scan.versioned, entries, list(map(_IDENTITY, deps)))
    identity = f"{step.name}-{h}"
    existing = by_identity.get(identity)
    if existing is not None:
        if not same_function(existing.step.fn, step.fn):
            return False
        planned[step if type(step) is ExecutorStep else id(step)] = existing
        return True
    # PlannedStep(step, h, f"{base}/{identity}", deps, scan, _NO_STEPS, identity, entries), without
    # its __init__ call: one is made per step (keep the fields in step with the class)
    ps = _new_object(PlannedStep)
    ps.step, ps.hash, ps.output_path, ps.dependencies, ps.scan = step, h, f"{base}/{identity}", deps, scan
    ps.pseudo_dependencies, ps.identity, ps.inputs, ps._version = _NO_STEPS, identity, entries, None
    planned[step if type(step) is ExecutorStep else id(step)] = by_identity[identity] = ps
    return True


@dataclasses.dataclass
class _Discovered:
    """What pass 1 of `_build_plan` found."""

    scans: dict[Any, ConfigScan]
    """Every step's config scan, keyed by `step_key`."""
    order: list[ExecutorStep]
    """Every step, dependencies first."""
    root_keys: list[Any]
    named: bool
    """Whether a step refers to another by name (then pass 2 has work to do)."""
    urls: bool
    """Whether a config names a URL (the egress guard has nothing to check if none does)."""
    settled: int
    """The steps at the head of `order` that `_settle` already planned."""


def _build_plan(roots: Sequence[ExecutorStep], prefix: str) -> Plan:
    if not roots:
        raise StepDefinitionError("no steps given: pass steps=[...] to executor_main or Executor.run")
    planned: dict[Any, PlannedStep] = {}  # keyed by `step_key`
    by_identity: dict[str, PlannedStep] = {}
    found = _discover(roots, planned, by_identity, prefix.rstrip("/"))
    order, scans, settled = found.order, found.scans, found.settled

    named_refs = _named_references(order, scans) if found.named else {}
    if named_refs:
        resorted = _toposort_with_names(order, scans, named_refs)
        # The settled head of `order` holds no name reference and depends on nothing after it, so the
        # re-sort keeps it in place; should it not, plan everything again.
        if not all(map(operator.is_, order[:settled], resorted[:settled])):
            planned.clear()
            by_identity.clear()
            settled = 0
        order = resorted

    uncommon, pinned_any = _version_steps(order[settled:], scans, named_refs, planned, by_identity, prefix)
    steps = list(by_identity.values())
    if pinned_any:  # computed paths are distinct (one per identity); only a pinned one can collide
        _check_distinct_paths(steps)
    root_planned = list(dict.fromkeys(map(planned.__getitem__, found.root_keys)))  # PlannedStep hashes by identity
    named_map = {}
    for refs in named_refs.values():
        for target in refs.values():
            named_map[target.name] = planned[step_key(target)]
    return Plan(
        prefix=prefix,
        steps=steps,
        roots=root_planned,
        by_step=planned,
        named_map=named_map,
        objects=order,
        by_identity=by_identity,
        uncommon=uncommon,
        names_urls=found.urls,
    )


def _discover(
    roots: Sequence[ExecutorStep], planned: dict[Any, PlannedStep], by_identity: dict[str, PlannedStep], base: str
) -> _Discovered:
    """Pass 1: discover steps through object references, with an iterative DFS that also finds
    cycles: a step in `scans` was discovered; one in `on_path` (the few on the current path) is not
    finished yet. (One large map per step, not a second one for its colour: at 100,000 steps the
    planner's maps no longer fit in the CPU's caches, and each lookup costs a memory access.)

    While every step that finished discovery is of the common kind (`_settle`), it is planned as it
    finishes (into `planned` and `by_identity`): its dependencies finished before it."""
    scans: dict[Any, ConfigScan] = {}
    order: list[ExecutorStep] = []
    named = False
    eager = True
    settled = -1
    on_path: set[Any] = set()
    root_keys: list[Any] = []
    key: Any  # a step's `step_key`
    all_plain = True  # every step discovered so far is `_plain` (so `_settle` need not check it again)
    urls = False
    for root in roots:
        if type(root) is ExecutorStep:
            key = root
        else:
            if isinstance(root, InputName) and root.step is not None:
                root = root.step
            key = step_key(root)
        root_keys.append(key)
        if key in scans:  # finished (between roots no step is on a path)
            continue
        if not _plain(root):
            _check_step(root, None)
            all_plain = False
        stack: list[tuple[ExecutorStep, ConfigScan, int]] = []  # the path to `step`, with where each stands
        step, i = root, 0
        on_path.add(key)
        scans[key] = scan = scan_config(step.config, step_label=f"step '{step.name}'")
        if scan.urls:
            urls = True
        while True:
            # The next input of `step` whose step is not finished yet, if any.
            inputs = scan.inputs
            n = len(inputs)
            while i < n:
                inp = inputs[i][1]
                i += 1
                if inp.step_name is not None:
                    named = True
                child = inp.step
                if child is None:
                    continue
                key = child if type(child) is ExecutorStep else id(child)
                if key in scans:
                    if key not in on_path:  # finished
                        continue
                    path = [s for s, _, _ in stack] + [step]
                    cycle = path[path.index(child) :] + [child]
                    raise CycleError(
                        "the steps form a cycle: "
                        + " -> ".join(repr(s.name) for s in cycle)
                        + "; a step cannot depend on itself, directly or through others"
                    )
                if not _plain(child):
                    _check_step(child, step)
                    all_plain = False
                stack.append((step, scan, i))
                step, i = child, 0
                on_path.add(key)
                scans[key] = scan = scan_config(step.config, step_label=f"step '{step.name}'")
                if scan.urls:
                    urls = True
                break
            else:  # every input's step is finished: so is this one
                on_path.discard(step if type(step) is ExecutorStep else id(step))
                order.append(step)
                if eager and (named or not _settle(step, scan, planned, by_identity, base, all_plain)):
                    eager = False
                    settled = len(order) - 1
                if not stack:
                    break
                step, scan, i = stack.pop()
    if eager:
        settled = len(order)
    return _Discovered(scans, order, root_keys, named, urls, settled)


def _named_references(order: list[ExecutorStep], scans: dict[Any, ConfigScan]) -> dict[int, dict[str, ExecutorStep]]:
    """Pass 2: references by name resolve against the discovered steps (by id(step), then field)."""
    named_refs: dict[int, dict[str, ExecutorStep]] = {}
    by_name: dict[str, list[ExecutorStep]] = {}
    for step in order:
        by_name.setdefault(step.name, []).append(step)
    for step in order:
        for field, inp in scans[step_key(step)].inputs:
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
    return named_refs


def _version_steps(
    steps: list[ExecutorStep],
    scans: dict[Any, ConfigScan],
    named_refs: dict[int, dict[str, ExecutorStep]],
    planned: dict[Any, PlannedStep],
    by_identity: dict[str, PlannedStep],
    prefix: str,
) -> tuple[list[PlannedStep], bool]:
    """Pass 3: versions in dependency order of the steps `_settle` left; identical versions collapse
    into one PlannedStep. Returns what it planned and whether a path was pinned."""
    base = prefix.rstrip("/")
    pinned_any = False
    uncommon: list[PlannedStep] = []  # `_settle` takes no pinned path or resources
    for step in steps:
        scan = scans[step_key(step)]
        input_entries: dict[str, Any] = {}
        deps: list[PlannedStep] = []
        blocking: set[str] = set()
        dep_index: dict[str, int] = {}
        for field, inp in scan.inputs:
            target = inp.step if inp.step is not None else named_refs.get(id(step), {}).get(field)
            if target is None:  # a fixed path: as written (prefix-relative or a URL), or a local one's content
                local = (inp.name or "").startswith(("/", "file://"))  # others are prefix-relative or URLs
                portable = portable_value(inp.name) if local else inp.name
                input_entries[field] = f"PATH:{inp.name}" if portable is inp.name else {"PATH": portable}
                continue
            dep = planned[step_key(target)]
            idx = dep_index.get(dep.identity)
            if idx is None:
                idx = dep_index[dep.identity] = len(deps)
                deps.append(dep)
            if inp.block_on_step:
                blocking.add(dep.identity)
            input_entries[field] = f"DEP[{idx}]/{inp.name}" if inp.name else f"DEP[{idx}]"
        version = version_of(step.name, dict(scan.versioned), input_entries, [d.identity for d in deps])
        pseudo = [d for d in deps if d.identity not in blocking] if len(blocking) < len(deps) else []
        if pseudo:  # only when present, so steps without pseudo-dependencies keep their hashes
            version["pseudo_dependencies"] = [d.identity for d in pseudo]
        h = hash8(version)
        identity = f"{step.name}-{h}"
        existing = by_identity.get(identity)
        if existing is not None:
            if not same_function(existing.step.fn, step.fn):
                raise StepDefinitionError(
                    f"steps '{identity}': two steps have this name and the same versioned config, so they "
                    f"would share {existing.output_path}, but their functions differ "
                    f"({function_path(existing.step.fn)} and {function_path(step.fn)}); give one another "
                    "name or a versioned field that tells them apart"
                )
            planned[step_key(step)] = existing
            continue
        output_path = f"{base}/{identity}"  # join(prefix, identity): a valid name has no leading or trailing "/"
        if step.override_output_path:
            pinned = step.override_output_path
            pinned_any = True
            pinned = pinned.rstrip("/") if "://" in pinned or pinned.startswith("/") else join(prefix, pinned)
            # A step addressed by name (a name@version artifact: its function says so) is pinned by design.
            if pinned != output_path and not getattr(step.fn, "addressed_by_name", False):
                logger.warning("step '%s': output path pinned to %s (computed: %s)", step.name, pinned, output_path)
            output_path = pinned
        ps = PlannedStep(
            step=_normalized(step),
            hash=h,
            output_path=output_path,
            dependencies=[d for d in deps if d.identity in blocking] if pseudo else deps,
            scan=scan,
            pseudo_dependencies=pseudo,
            identity=identity,
            inputs=input_entries,
            _version=version,
        )
        planned[step_key(step)] = ps
        by_identity[identity] = ps
        uncommon.append(ps)
    return uncommon, pinned_any


def _check_distinct_paths(steps: list[PlannedStep]) -> None:
    """Two steps pinned (or one pinned onto another's computed path) to one folder: refused."""
    seen_paths: dict[str, str] = {}
    for ps in steps:
        other = seen_paths.setdefault(ps.output_path, ps.identity)
        if other != ps.identity:
            raise StepDefinitionError(
                f"steps '{other}' and '{ps.identity}' both write to {ps.output_path}; give one of them "
                "another override_output_path (or none)"
            )


def _toposort_with_names(
    order: list[ExecutorStep], scans: dict[Any, ConfigScan], named: dict[int, dict[str, ExecutorStep]]
) -> list[ExecutorStep]:
    """Re-sort when name references add edges (and detect the cycles they may close)."""
    deps = {
        id(s): [i.step for _, i in scans[step_key(s)].inputs if i.step is not None]
        + list(named.get(id(s), {}).values())
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
        return _resolve(obj.value, planned, plan)
    if isinstance(obj, OutputName):
        return join(planned.output_path, obj.name) if obj.name else planned.output_path
    if isinstance(obj, (InputName, ExecutorStep)):
        inp = obj if isinstance(obj, InputName) else InputName(step=obj)
        if inp.step is None and inp.step_name is None:
            path = inp.name or ""
            return path if "://" in path or path.startswith("/") else join(plan.prefix, path)
        target = _find_dep(inp, plan)
        return join(target.output_path, inp.name) if inp.name else target.output_path
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
        values = [_resolve(v, planned, plan) for v in obj]
        if hasattr(obj, "_fields"):  # a NamedTuple keeps its type (and its attribute names)
            return type(obj)(*values)
        return tuple(values)
    if isinstance(obj, dict):
        return {k: _resolve(v, planned, plan) for k, v in obj.items()}
    return obj


def _find_dep(inp: InputName, plan: Plan) -> PlannedStep:
    if inp.step is not None:
        return plan.planned_of(inp.step)
    assert inp.step_name is not None  # an InputName names its step by object or by name
    return plan.named_map[inp.step_name]
