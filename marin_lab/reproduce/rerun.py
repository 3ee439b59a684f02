"""`marin-lab reproduce`: run a recorded experiment again into a scratch prefix and compare.

The steps are rebuilt from the script stored with the experiment record (not from today's working
tree), planned under the scratch prefix, and must get the recorded identities. Then:

- by default each selected step runs once more, reading its dependencies' recorded outputs from
  the original prefix: does this step, given the same inputs, give the same bytes?
- with `deep`, every step and everything it depends on runs again in the scratch prefix: does the
  whole chain give the same bytes?

Every artifact is compared with the record's manifest (artifacts.compare_outputs); run logs and
timings that the step declared are left out and listed. Nothing is written under the original
prefix: dependencies are read there only after their SUCCESS status is checked, a scratch prefix
that reaches it (resolved with `marin_lab.io.paths`) is refused, and so is a step whose pinned
output path leads out of the scratch prefix. The record is checked whole (target.py)
before the recorded script runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import re
import shutil
import tempfile
from typing import Any

from marin_lab.execution import ExecutorMainConfig
from marin_lab.execution.errors import MarinLabError, RecordError
from marin_lab.execution.executor import Decision, Executor
from marin_lab.execution.main import capture_steps
from marin_lab.execution.record.artifacts import ALWAYS_NON_ARTIFACTS, compare_outputs, declaration
from marin_lab.execution.record.provenance import manifest
from marin_lab.execution.state.status import read_status
from marin_lab.io.fs import join
from marin_lab.io.paths import canonical, is_within
from marin_lab.reproduce.target import (
    RecordedExperiment,
    ReproduceError,
    check_scratch,
    compile_steps,
    locate,
    read_script,
)
from marin_lab.store.step_record import read_step_record

IDENTICAL, DIFFERS, NOT_REPRODUCIBLE, NOT_CHECKED = "identical", "DIFFERS", "not reproducible", "not checked"

__all__ = [
    "DIFFERS",
    "IDENTICAL",
    "NOT_CHECKED",
    "NOT_REPRODUCIBLE",
    "ReproduceError",
    "ReproduceReport",
    "StepResult",
    "reproduce",
]


@dataclasses.dataclass
class StepResult:
    name: str
    identity: str
    verdict: str
    details: list[str] = dataclasses.field(default_factory=list)
    excluded: dict[str, int] = dataclasses.field(default_factory=dict)
    """Run-log files left out of the comparison: the declared pattern -> how many files."""
    compared: int = 0


@dataclasses.dataclass
class ReproduceReport:
    experiment: str
    original_prefix: str
    scratch: str
    deep: bool
    steps: list[StepResult]

    @property
    def ok(self) -> bool:
        return all(s.verdict in (IDENTICAL, NOT_REPRODUCIBLE) for s in self.steps)

    def table(self) -> str:
        """One line per step (identity, verdict, files compared, run logs left out), then its details."""
        width = max([len(s.identity) for s in self.steps] + [4])
        how = "deep: every dependency recomputed" if self.deep else "dependencies read from the original prefix"
        lines = [
            f"reproduce {self.experiment} ({how})",
            f"  into {self.scratch}",
            f"  {'step':<{width}}  {'result':<16}  {'compared':>8}  not compared (run logs)",
        ]
        for s in self.steps:
            logs = ", ".join(f"{pattern} ({n})" for pattern, n in s.excluded.items()) or "-"
            lines.append(f"  {s.identity:<{width}}  {s.verdict:<16}  {s.compared:>8}  {logs}")
            for d in s.details[:10]:
                lines.append(f"  {'':<{width}}    {d}")
            if len(s.details) > 10:
                lines.append(f"  {'':<{width}}    ... and {len(s.details) - 10} more")
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.verdict] = counts.get(s.verdict, 0) + 1
        lines.append(
            f"{len(self.steps)} step{'' if len(self.steps) == 1 else 's'}: "
            + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        )
        return "\n".join(lines)


def reproduce(
    target: str, *, into: str | None = None, steps: str | None = None, deep: bool = False, backend: str = "local"
) -> ReproduceReport:
    """Rebuild the experiment `target` names from its stored script and compare every selected step.

    Everything is checked before anything is executed (target.py); the temporary copy of
    the script is removed whatever happens."""
    rec = locate(target)
    pattern = compile_steps(steps, rec)
    text = read_script(rec)
    scratch = check_scratch(into, rec) if into else None
    workdir = tempfile.mkdtemp(prefix="marin-lab-script-")
    made_scratch = None
    try:
        if scratch is None:
            made_scratch = scratch = canonical(tempfile.mkdtemp(prefix="marin-lab-reproduce-"))
        script = os.path.join(workdir, rec.script_name)
        with open(script, "w", encoding="utf-8") as f:
            f.write(text)
        report = _reproduce(rec, script, scratch, pattern, deep, backend)
        made_scratch = None  # it holds the reproduction now: kept for the reader
        return report
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if made_scratch is not None:
            with contextlib.suppress(OSError):
                os.rmdir(made_scratch)  # only while still empty: never a partial reproduction


def _reproduce(
    rec: RecordedExperiment, script: str, scratch: str, pattern: re.Pattern[str] | None, deep: bool, backend: str
) -> ReproduceReport:
    try:
        rebuilt, _ = capture_steps(script)
    except MarinLabError as err:
        raise ReproduceError(f"the recorded script {rec.script_name} (from {rec.url}): {err}") from err
    except BaseException as err:  # the recorded script no longer imports or runs here
        raise ReproduceError(
            f"the recorded script {rec.script_name} (from {rec.url}) no longer runs here: {type(err).__name__}: {err}"
        ) from err
    executor = Executor(
        ExecutorMainConfig(prefix=scratch, backend=backend),
        script=script,
        description=f"reproduction of {rec.url}" + (" (deep)" if deep else ""),
    )
    try:
        plan = executor.plan(rebuilt, strict_regions=True)  # it runs steps itself: every region checked
    except MarinLabError as err:  # e.g. two steps now share an output path
        raise ReproduceError(
            f"the recorded script {rec.script_name} (from {rec.url}) cannot be planned here: {err}"
        ) from err
    for ps in plan.steps:  # a pinned output path (override_output_path) could lead anywhere
        if not is_within(ps.output_path, scratch):
            raise ReproduceError(
                f"step '{ps.identity}' of {rec.url} writes to {ps.output_path} (a pinned "
                f"override_output_path), outside the scratch prefix {scratch}; reproduce writes "
                "nowhere else, so it cannot rerun this experiment"
            )
    chosen = [ps for ps in plan.steps if pattern is None or pattern.search(ps.name)]
    if not chosen:
        raise ReproduceError(f"--steps {pattern.pattern if pattern else None!r} matches no step of {rec.url}")
    results: dict[str, StepResult] = {}
    runnable = []
    for ps in chosen:
        recorded = rec.steps.get(ps.name)
        if recorded is None:
            results[ps.identity] = StepResult(
                ps.name, ps.identity, DIFFERS, ["not in the record: the recorded script plans a step it did not record"]
            )
        elif recorded != ps.identity:
            results[ps.identity] = StepResult(
                ps.name,
                ps.identity,
                DIFFERS,
                [
                    f"identity differs from the record ({recorded}): the helpers or a source changed since; "
                    "`marin-lab explain` shows which field"
                ],
            )
        else:
            runnable.append(ps)
    # The same place under the original prefix (`{identity}`, or a pinned `{name}/{version}`).
    originals = {
        ps.identity: join(rec.original, ps.output_path[len(scratch.rstrip("/")) :].strip("/"))
        if is_within(ps.output_path, scratch)
        else join(rec.original, ps.identity)
        for ps in plan.steps
    }
    if deep and runnable:
        executor.run(rebuilt, run_only=[f"^{re.escape(ps.name)}$" for ps in runnable], raise_on_failure=False)
    if not deep and runnable:
        executor._write_experiment(plan)  # the scratch prefix gets its own experiment record
    prefixes = (rec.original, *rec.aliases, scratch)
    for ps in runnable:
        if not deep:
            problem = _run_on_original_inputs(executor, plan, ps, originals)
            if problem:
                results[ps.identity] = StepResult(ps.name, ps.identity, NOT_CHECKED, [problem])
                continue
        results[ps.identity] = _judge(ps, originals[ps.identity], plan, prefixes)
    return ReproduceReport(rec.url, rec.original, scratch, deep, [results[ps.identity] for ps in chosen])


def _record_or_none(output_path: str) -> Any:
    """The step record at `output_path`; None when there is none or it is damaged (judged then as
    having no record)."""
    try:
        return read_step_record(output_path)
    except RecordError:
        return None


def _run_on_original_inputs(executor: Any, plan: Any, ps: Any, originals: dict[str, str]) -> str | None:
    """Run `ps` into the scratch prefix with its dependencies read from the original prefix."""

    original_info = _record_or_none(originals[ps.identity])
    if ((original_info.reproducibility if original_info else None) or {}).get("not_reproducible"):
        return None  # judged from the record; nothing to run
    for dep in plan.ancestors([ps]):
        if dep is ps:
            continue
        st = read_status(originals[dep.identity])
        if (st or {}).get("status") != "SUCCESS":
            return (
                f"dependency {dep.identity} has no successful output in the original prefix; use --deep to recompute it"
            )
    saved = {s.identity: s.output_path for s in plan.steps}
    try:
        for dep in plan.ancestors([ps]):
            if dep is not ps:
                dep.output_path = originals[dep.identity]
        decisions = []
        for s in plan.steps:
            if s is ps:
                decisions.append(executor._decide_one(ps, read_status(ps.output_path), None))
            elif s.identity in {d.identity for d in plan.ancestors([ps])}:
                decisions.append(Decision(s, "skip", "read from the original prefix"))
            else:
                decisions.append(Decision(s, "unselected", "not reproduced now"))
        outcome = executor._execute(plan, decisions).get(ps.identity)
    finally:
        for s in plan.steps:
            s.output_path = saved[s.identity]
    if outcome is not None and outcome.status != "SUCCESS":
        return f"the step {outcome.status} when run again: {outcome.message}"
    return None


def _judge(ps: Any, original_path: str, plan: Any, prefixes: tuple[str, ...]) -> StepResult:
    info = _record_or_none(original_path)
    if info is None or info.manifest is None:
        return StepResult(
            ps.name,
            ps.identity,
            NOT_CHECKED,
            [f"the original {original_path} has no successful record with a manifest"],
        )
    declared = info.reproducibility
    if not isinstance(declared, dict):  # recorded before declarations: today's declaration, said so
        declared = declaration(ps.step.fn, plan.resolve_config(ps))
    if declared.get("not_reproducible"):
        return StepResult(ps.name, ps.identity, NOT_REPRODUCIBLE, [f"declared: {declared['not_reproducible']}"])
    status = (read_status(ps.output_path) or {}).get("status")
    if status != "SUCCESS":
        return StepResult(ps.name, ps.identity, DIFFERS, [f"the rerun ended {status or 'without a status'}"])
    cmp = compare_outputs(info.manifest, original_path, manifest(ps.output_path), ps.output_path, declared, prefixes)
    verdict = IDENTICAL if not cmp.differences else DIFFERS
    details = list(cmp.differences)
    if cmp.normalized and not cmp.differences:
        details.append("compared without volatile fields: " + ", ".join(cmp.normalized[:5]))
    excluded: dict[str, int] = {}
    for path in cmp.excluded:
        pattern = next(p for p in declared.get("non_artifacts") or ALWAYS_NON_ARTIFACTS if fnmatch.fnmatchcase(path, p))
        excluded[pattern] = excluded.get(pattern, 0) + 1
    return StepResult(ps.name, ps.identity, verdict, details, excluded, cmp.compared)
