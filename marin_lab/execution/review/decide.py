"""Deciding what a run does with each step: run, skip (reuse), wait, fail, or leave unselected.

Reads only statuses, leases and records under the prefix; never writes. The dry run prints these
decisions (plan_report.py); a real run acts on them (executor.py).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from marin_lab.execution.errors import RecordError
from marin_lab.execution.plan.hashing import lenient_value, unversioned_fingerprint
from marin_lab.execution.plan.planner import PlannedStep
from marin_lab.execution.plan.sources import missing_local_paths
from marin_lab.execution.record.code_provenance import function_fingerprint
from marin_lab.execution.review.baseline import LastRun, RecordIndex, baseline, diff_versions, stale_reuse_diffs
from marin_lab.execution.state.lease import DRIVER_GONE, Lease, running_driver_gone
from marin_lab.execution.state.status import CORRUPT, Status
from marin_lab.io.secrets import redact
from marin_lab.io.text import strip_ansi
from marin_lab.store.status import StepState, read_step_states
from marin_lab.store.step_record import StepRecord, read_step_record


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a run will do with one step, and why."""

    step: PlannedStep
    action: str
    """run | skip | wait | fail | unselected"""
    reason: str
    notes: tuple[str, ...] = ()
    forced: bool = False
    """Matched by `--force_run`: it runs again whatever its status (a live run elsewhere is still waited for)."""


def read_statuses(steps: Sequence[PlannedStep]) -> dict[str, StepState]:
    """Each step's latest status, and the record a SUCCESS was checked against (`read_step_states`:
    two batches of reads, concurrent on object stores, where each read is a round trip)."""
    states = read_step_states([s.output_path for s in steps])
    return {s.identity: state for s, state in zip(steps, states, strict=True)}


def decide_one(
    ps: PlannedStep,
    st: dict[str, Any] | None,
    *,
    lease: Callable[[PlannedStep], Lease],
    force_run_failed: bool,
    index: RecordIndex | None,
    forced: bool = False,
    last_run: LastRun | None = None,
    record: StepRecord | None = None,
) -> Decision:
    """One step's decision from its status (`read_status`); `index` adds the field-level
    difference for a step that is new, against its version in `last_run` (the same experiment's
    last run) or else the latest recorded version of its name (baseline.py). A `forced` step
    (`--force_run`) runs again after a SUCCESS or a FAILED: a new attempt, as any rerun. `record`:
    the step record already read with the status (`read_statuses`), so it is not read again."""
    status = (st or {}).get("status")
    if forced and status in (Status.SUCCESS.value, Status.FAILED.value):
        return Decision(
            ps,
            "run",
            f"forced by --force_run (last {status} at {(st or {}).get('time')}); a new attempt writes its output again",
            forced=True,
        )
    if status == Status.SUCCESS.value:
        rebuild = rebuild_reason(ps)
        if rebuild is not None:
            return Decision(ps, "run", rebuild)
        reuse_notes = stale_reuse_notes(ps, st or {}, record) + changed_code_notes(ps, st or {})
        return Decision(ps, "skip", f"SUCCESS at {(st or {}).get('time')}", tuple(reuse_notes))
    if status == Status.RUNNING.value:
        holder = lease(ps).current_holder()
        if holder is not None and not holder.is_stale(time.time()):
            return Decision(
                ps,
                "wait",
                f"RUNNING by driver {holder.holder} (heartbeat "
                f"{holder.age(time.time()):.0f}s ago); will wait and reuse",
            )
        since = running_driver_gone(ps.output_path, st or {})
        return Decision(
            ps,
            "run",
            f"RUNNING, {DRIVER_GONE} since {since or 'an unknown time'} (lease stale or released); taking it over",
        )
    if status == Status.CANCELLED.value:
        return Decision(
            ps,
            "run",
            f"CANCELLED at {(st or {}).get('time')} (interrupted); running again, from its "
            "last checkpoint when it wrote one",
        )
    if status == Status.FAILED.value:
        if force_run_failed:
            return Decision(ps, "run", "previously FAILED; --force_run_failed is set")
        error = (st or {}).get("error")
        error = strip_ansi(error) if isinstance(error, str) else error  # a status written before errors were stripped
        said = f" ({error})" if error else ""
        return Decision(ps, "fail", f"failed previously{said}; pass --force_run_failed true to run it again")
    if status == CORRUPT:
        return Decision(ps, "run", f"its records are damaged ({(st or {}).get('damage', 'unreadable')}); running again")
    reason = "no output yet" if status is None else f"previous status {status}"
    notes: tuple[str, ...] = ()
    if index is not None and status is None:
        base = baseline(index, ps.name, ps.identity, last_run=last_run)
        if base is not None:
            against = ("this experiment's last run: " if base.from_last_run else "latest recorded: ") + str(
                base.identity
            )
            if last_run is not None and not base.from_last_run:
                against += ", from any experiment"
            reason = f"new version ({against})"
            notes = tuple(diff_versions(base.version, ps.version))
    return Decision(ps, "run", reason, notes)


def with_missing_sources(d: Decision) -> Decision:
    """`d` with one note per versioned local path of a step that will run which does not exist
    (naming the step, the field and the path): without it the dry run says nothing and the run fails
    in the step."""
    if d.action != "run":
        return d
    missing = [m for field, value in d.step.scan.versioned.items() for m in missing_local_paths(value, field)]
    if not missing:
        return d
    notes = tuple(
        f"step '{d.step.name}': field '{field}' names the local path {path!r}, which does not exist; "
        "create it or fix the path before running"
        for field, path in missing
    )
    return dataclasses.replace(d, notes=(*d.notes, *notes))


def rebuild_reason(ps: PlannedStep) -> str | None:
    """Why a step's SUCCESS must not be reused, or None to reuse it.

    A step function may carry `rebuild_reason(output_path)` (a name@version artifact does:
    marin_lab.marin.step_runner): it returns a reason for a mutable version, which rebuilds in
    place, and None otherwise; it may warn of recipe drift, or raise to stop the run."""
    hook = getattr(ps.step.fn, "rebuild_reason", None)
    return hook(ps.output_path) if callable(hook) else None


def changed_code_notes(ps: PlannedStep, st: dict[str, Any]) -> list[str]:
    """A reused SUCCESS whose function's source (with its helpers in the same module) differs from
    the source it ran with: one line, with the rerun command. Statuses older than the fingerprint
    say nothing."""
    recorded = st.get("code_fingerprint")
    if not isinstance(recorded, str):
        return []
    current = function_fingerprint(ps.step.fn)
    if current is None or current["sha256"] == recorded:
        return []
    return [
        f"reused, but its code changed since it ran ({current['file']}: {current['function']}); "
        f"use --force_run '^{_regex_literal(ps.name)}$' to run it again"
    ]


def _regex_literal(name: str) -> str:
    """`name` as a regex that matches it, escaping only what a step name may hold that is special."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", name)


def stale_reuse_notes(ps: PlannedStep, st: dict[str, Any], record: StepRecord | None = None) -> list[str]:
    """A reused SUCCESS whose unversioned fields differ from the record's (`record`, else read), field by field."""
    if st.get("config_fingerprint") == unversioned_fingerprint(ps.scan.unversioned):
        return []
    current = lenient_value(ps.scan.unversioned)
    try:
        info = record if record is not None else read_step_record(ps.output_path)
    except RecordError:  # read_status already made a damaged record CORRUPT: not reused
        return []
    recorded = info.unversioned if info is not None else None
    if recorded is None:
        return []
    diffs = stale_reuse_diffs(recorded, redact(current))
    return [f"reused although unversioned field {d}" for d in diffs]
