"""`marin-lab explain` and the browser's explain: why a step is new, field by field.

Marin users dig through logs to learn why a step reran (Marin #473, #2219). Here each new version
of a step is compared with its baseline (`marin_lab.execution.review.baseline`: the same experiment's last
run, else the latest recorded version of its name) and its changed dependencies are explained in
turn:

    compared with this experiment's last run (quickstart-5c2e9a10.json, 2026-01-02T03:04:05+00:00)
    tokenize/docs-9c01a7e2 differs from tokenize/docs-3fa1c2d9 of this experiment's last run:
      tokenizer: 'gpt2' -> 'llama3'
      dependency raw/docs changed: raw/docs-1a2b3c4d -> raw/docs-77e0f1aa
        raw/docs-77e0f1aa differs from ...: source: 'file:///a' -> 'file:///b'

`explain_step` gives those lines for a planned step (the CLI); `explain_record` the same
explanation as data for a recorded step (the browser's step page). A tool over the executor's
records: the executor never imports it.
"""

from __future__ import annotations

import re
from typing import Any

from marin_lab.execution.plan.planner import Plan, PlannedStep
from marin_lab.execution.review.baseline import LastRun, RecordIndex, baseline, diff_versions, version_changes
from marin_lab.io.fs import join
from marin_lab.io.secrets import redact
from marin_lab.store.step_record import StepRecord

_IDENTITY = re.compile(r"(?P<name>.+)-(?P<hash>[0-9a-f]{8})")


def explain_step(
    plan: Plan,
    planned: PlannedStep,
    index: RecordIndex,
    *,
    depth: int = 0,
    seen: set[str] | None = None,
    last_run: LastRun | None = None,
) -> list[str]:
    """Lines explaining why `planned` has no recorded output, recursing into changed dependencies:
    against its entry in `last_run` (the same experiment's last run) when it has one, else against
    the latest recorded version of its name (`RecordIndex.previous_version`)."""
    seen = set() if seen is None else seen
    if planned.identity in seen:
        return []
    seen.add(planned.identity)
    pad = "  " * depth
    recorded = index.record(planned.output_path)
    if recorded is not None and (recorded.version is None or recorded.identity in (None, planned.identity)):
        return [f"{pad}{planned.identity} is recorded at {planned.output_path} (unchanged)"]
    if recorded is not None:  # a pinned path (e.g. a name@version artifact) holds another version: reused as it is
        lines = [
            f"{pad}{planned.identity} is pinned to {planned.output_path}, which holds another version "
            f"({recorded.identity}); a run reuses that output as it is. What differs:"
        ]
        return lines + [f"{pad}  {d}" for d in diff_versions(recorded.version or {}, planned.version)]
    entry = last_run.steps.get(planned.name) if last_run is not None else None
    if entry is not None and entry.get("identity") == planned.identity:
        return [
            f"{pad}{planned.identity} is as in this experiment's last run, but its output is no longer under "
            f"{plan.prefix} (removed?); a run makes it again"
        ]
    base = baseline(index, planned.name, planned.identity, last_run=last_run)
    if base is None:
        where = " (nor in this experiment's last run)" if last_run is not None else ""
        return [
            f"{pad}{planned.identity} is new: no earlier version of '{planned.name}' is recorded under "
            f"{plan.prefix}{where}"
        ]
    old_identity, old_version = base.identity, base.version
    if base.from_last_run:
        header = f"{pad}{planned.identity} differs from {old_identity} of this experiment's last run:"
    elif last_run is not None:
        header = (
            f"{pad}{planned.identity} is not in this experiment's last run; it differs from the latest "
            f"recorded version {old_identity} (from any experiment):"
        )
    else:
        header = f"{pad}{planned.identity} differs from the latest recorded version {old_identity}:"
    lines = [header]
    diffs = diff_versions(old_version, planned.version)
    if not diffs:
        diffs = ["(same version; the output path differs, e.g. an override_output_path)"]
    for d in diffs:
        lines.append(f"{pad}  {d}")
    old_deps = set(old_version.get("dependencies", []))
    for dep in planned.dependencies:
        if dep.identity not in old_deps:
            lines.extend(explain_step(plan, dep, index, depth=depth + 2, seen=seen, last_run=last_run))
    return lines


# ------------------------------------------------------------------------------------------------
# The same explanation as data, for the browser's step page

MAX_DEPENDENCY_DEPTH = 2


def explain_record(
    index: RecordIndex, record: StepRecord, depth: int = 0, last_run: LastRun | None = None
) -> dict[str, Any] | None:
    """Why recorded version `record` differs from its baseline (`baseline`: its entry in
    `last_run`, the same experiment's run before it, else its previous version by
    `RecordIndex.previous_version`): {against, against_output_path, against_started, last_run,
    candidates, newer, changes, message}; `last_run` names the experiment run compared with (None:
    the latest version from any experiment); each change of `dependencies` carries `because`, the
    same explanation one dependency further."""
    name, identity = record.name, record.identity
    if not name or not identity or ".." in name.split("/"):
        return None
    others = [r for r in index.versions_of(name) if r.identity != identity]
    base = baseline(index, name, identity, last_run=last_run, started=record.recency or None)
    if base is None:
        return {
            "against": None,
            "candidates": 0,
            "changes": [],
            "last_run": None,
            "message": f"no other version of {name!r} under the prefix (or none with a readable record)",
        }
    mine = record.recency
    against = base.record or (index.record(base.output_path) if base.output_path else None)
    started = against.recency if against is not None else None
    changes = version_changes(redact(base.version), redact(record.version or {}))
    if depth < MAX_DEPENDENCY_DEPTH:
        for change in changes:
            if change["field"] == "dependencies":
                change["because"] = _explain_dependency(index, change, depth)
    return {
        "against": base.identity,
        "against_output_path": join(index.prefix, base.identity or ""),
        "against_started": started or None,
        "last_run": last_run.describe() if base.from_last_run and last_run is not None else None,
        "candidates": len(others),
        # No version started before this one: the diff is against a newer one, so say so.
        "newer": not base.from_last_run and not (mine and started and started < mine),
        "changes": changes,
        "message": None if changes else "the version fields are identical (same hash, other prefix?)",
    }


def _identity_pairs(old: Any, new: Any) -> list[tuple[str, str, str]]:
    """(name, old, new) identities of the dependencies that changed, matched by name."""
    old_by_name = {m["name"]: d for d in old if isinstance(d, str) and (m := _IDENTITY.fullmatch(d))}
    new_by_name = {m["name"]: d for d in new if isinstance(d, str) and (m := _IDENTITY.fullmatch(d))}
    return [
        (n, old_by_name[n], new_by_name[n])
        for n in sorted(old_by_name.keys() & new_by_name.keys())
        if old_by_name[n] != new_by_name[n] and ".." not in f"{old_by_name[n]}/{new_by_name[n]}".split("/")
    ]


def _explain_dependency(index: RecordIndex, change: dict[str, Any], depth: int) -> dict[str, Any] | None:
    """When a dependency's identity changed, why that dependency's own version changed."""
    pairs = _identity_pairs(change.get("old") or [], change.get("new") or [])
    if not pairs:
        return None
    changes: list[dict[str, Any]] = []
    problems = []
    for name, old, new in pairs:
        old_rec, new_rec = index.record(join(index.prefix, old)), index.record(join(index.prefix, new))
        if old_rec is None or new_rec is None or old_rec.version is None or new_rec.version is None:
            problems.append(f"a record of {old} or {new} is missing or damaged")
            continue
        sub_changes = version_changes(redact(old_rec.version), redact(new_rec.version))
        for sub in sub_changes:
            if sub["field"] == "dependencies" and depth + 1 < MAX_DEPENDENCY_DEPTH:
                sub["because"] = _explain_dependency(index, sub, depth + 1)
            if len(pairs) > 1:
                sub["field"] = f"{name}: {sub['field']}"
        changes.extend(sub_changes)
    return {
        "dependency": pairs[0][0],
        "old": pairs[0][1],
        "new": pairs[0][2],
        "changes": changes,
        "message": "; ".join(problems) or None,
    }
