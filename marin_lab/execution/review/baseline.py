"""Which recorded version a step is compared with, and the field-level difference.

One rule for `marin-lab explain`, the dry run's notes and the browser's explain (`baseline`): a
step is compared first with its version in the same experiment's last run (`last_run_of`: the
newest experiment record of that script under the prefix, whose `steps` hold each step's version;
for a recorded step in the browser, the newest one made before the step started), so a step of the
same name in another script never stands in for it; a step that run did not have, or a script with
no recorded run, is compared with the latest recorded version of its name
(`RecordIndex.previous_version`: the most recent one that started before it; for a step not yet
run, the most recent one). Marin users dig through logs to learn why a step reran (Marin #473,
#2219).

The executor decides with it (a new version's notes; a reused step's unversioned fields,
`stale_reuse_diffs`); the explanations built on it, as text and as data, are the `marin_lab.explain`
package's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from marin_lab.execution.plan.hashing import hash8
from marin_lab.execution.plan.planner import Plan
from marin_lab.execution.record.experiments import ListedExperiment, list_experiments
from marin_lab.execution.state.status import INFO_FILE
from marin_lab.io.fs import fs_and_path, join, read_bytes
from marin_lab.io.secrets import REDACTED, is_secret_field, redact
from marin_lab.store.errors import RecordError
from marin_lab.store.step_record import StepRecord, parse_step_record

_MISSING = object()


def _list_names(folder_url: str) -> list[str]:
    fs, path = fs_and_path(folder_url)
    try:
        entries = fs.ls(path, detail=False)
    except (FileNotFoundError, NotADirectoryError):
        entries = []
    return [e.rstrip("/").rsplit("/", 1)[-1] for e in entries]


def _read(url: str) -> bytes | None:
    try:
        return read_bytes(url)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


class RecordIndex:
    """Recorded step records under a prefix, found by name; each parent folder is listed once.

    The one place that decides which recorded version a step is compared with (`previous_version`),
    for `marin-lab explain`, the dry run and the browser alike. The browser passes its own
    `list_names` and `read`, which stay inside its roots.
    """

    def __init__(
        self,
        prefix: str,
        *,
        list_names: Callable[[str], list[str]] = _list_names,
        read: Callable[[str], bytes | None] = _read,
    ):
        self.prefix = prefix
        self._list_names, self._read = list_names, read
        self._listed: dict[str, list[str]] = {}
        self._records: dict[str, StepRecord | None] = {}

    def _children(self, folder_url: str) -> list[str]:
        if folder_url not in self._listed:
            self._listed[folder_url] = self._list_names(folder_url)
        return self._listed[folder_url]

    def record(self, output_path: str) -> StepRecord | None:
        """The step record at `output_path`; None when there is none or it is damaged."""
        if output_path not in self._records:
            url = join(output_path, INFO_FILE)
            try:
                raw = self._read(url)
                record = parse_step_record(raw, url) if raw is not None else None
            except (RecordError, OSError, ValueError):
                record = None
            self._records[output_path] = record
        return self._records[output_path]

    def remember(self, output_path: str, record: StepRecord) -> None:
        """`record`, already read and parsed at `output_path`, is what `record(output_path)` gives."""
        self._records[output_path] = record

    def versions_of(self, name: str) -> list[StepRecord]:
        """Recorded versions of steps named `name` (with a version), newest start first."""
        parent, _, base = name.rpartition("/")
        folder = join(self.prefix, parent) if parent else self.prefix
        pattern = re.compile(re.escape(base) + r"-[0-9a-f]{8}")
        found = []
        for child in self._children(folder):
            if pattern.fullmatch(child):
                record = self.record(join(folder, child))
                if record is not None and record.version is not None:
                    found.append(record)
        found.sort(key=lambda r: (r.recency, r.identity or ""), reverse=True)
        return found

    def previous_version(self, name: str, identity: str, started: str | None = None) -> StepRecord | None:
        """The recorded version `identity` is compared with: the most recent other version of
        `name` that started before `started` (this version's start), or, when none did or this
        version has not started (a planned step), the most recent other one."""
        others = [r for r in self.versions_of(name) if r.identity != identity]
        if started:
            older = [r for r in others if r.recency and r.recency < started]
            if older:
                return older[0]
        return others[0] if others else None


def _show(v: Any) -> str:
    if v is _MISSING:
        return "(absent)"
    if isinstance(v, str):
        return repr(v)
    return json.dumps(v, sort_keys=True)


def version_changes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Field-level changes between two version dicts: `{"field", "key", "change", "old", "new"}`,
    config and input fields first (`field` is `config.KEY` or `inputs.KEY`; a path is in one section
    or the other within a version, so a field that became an input shows as one change), then one
    `dependencies` change holding both identity lists. `change`: added | removed | changed."""
    changes = []
    old_cfg = {**_section(old, "config"), **_section(old, "inputs")}
    new_cfg = {**_section(new, "config"), **_section(new, "inputs")}
    for top in sorted(old_cfg.keys() | new_cfg.keys()):
        section = "inputs" if top in _section(new if top in new_cfg else old, "inputs") else "config"
        for key, a, b in _leaf_changes(top, old_cfg.get(top, _MISSING), new_cfg.get(top, _MISSING)):
            changes.append(
                {
                    "field": f"{section}.{key}",
                    "key": key,
                    "change": "added" if a is _MISSING else "removed" if b is _MISSING else "changed",
                    "old": None if a is _MISSING else a,
                    "new": None if b is _MISSING else b,
                }
            )
    old_deps, new_deps = old.get("dependencies") or [], new.get("dependencies") or []
    if old_deps != new_deps:
        changes.append(
            {"field": "dependencies", "key": "dependencies", "change": "changed", "old": old_deps, "new": new_deps}
        )
    return changes


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _leaf_changes(key: str, a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(path, old, new) for each differing leaf under `key`: a versioned dataclass or dict is one
    version key whose value is a nested object, and a person wants `optimizer.learning_rate: 0.003
    -> 0.002`, not the whole optimizer twice. Lists of the same length recurse by position; a list
    that grew or shrank is shown whole (positions would all shift)."""
    if a == b:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(a.keys() | b.keys(), key=str):
            sub = f"{key}.{k}" if isinstance(k, str) and _NAME.fullmatch(k) else f"{key}[{json.dumps(k)}]"
            out.extend(_leaf_changes(sub, a.get(k, _MISSING), b.get(k, _MISSING)))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out.extend(_leaf_changes(f"{key}[{i}]", x, y))
        return out
    return [(key, a, b)]


def _section(version: dict[str, Any], name: str) -> dict[str, Any]:
    value = version.get(name)
    return value if isinstance(value, dict) else {}


def diff_versions(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`version_changes` as lines for the terminal (config fields, then dependencies by name)."""
    lines = []
    if ("inputs" in old) != ("inputs" in new):
        lines.append(
            "(one of the two versions was recorded with the older identity scheme of dotted field "
            "names; fields may show as removed and added)"
        )
    for change in version_changes(old, new):
        if change["field"] != "dependencies":
            a = _MISSING if change["change"] == "added" else change["old"]
            b = _MISSING if change["change"] == "removed" else change["new"]
            lines.append(f"{change['key']}: {_show_field(change['key'], a)} -> {_show_field(change['key'], b)}")
            continue
        old_by_name = {d.rsplit("-", 1)[0]: d for d in change["old"] if isinstance(d, str)}
        new_by_name = {d.rsplit("-", 1)[0]: d for d in change["new"] if isinstance(d, str)}
        for dname in sorted(old_by_name.keys() | new_by_name.keys()):
            a, b = old_by_name.get(dname), new_by_name.get(dname)
            if a == b:
                continue
            if a is None:
                lines.append(f"dependency {dname} added: {b}")
            elif b is None:
                lines.append(f"dependency {dname} removed: was {a}")
            else:
                lines.append(f"dependency {dname} changed: {a} -> {b}")
    return lines


@dataclasses.dataclass(frozen=True)
class LastRun:
    """An experiment's last recorded run, by the experiment record it rewrote: its steps by name."""

    path: str
    created: str | None
    steps: dict[str, dict[str, Any]]
    """step name -> its entry in the record (`identity`, `version`, `output_path`, ...)."""

    def describe(self) -> str:
        return f"{self.path.rsplit('/', 1)[-1]}" + (f", {self.created}" if self.created else "")


def last_run_of(listed: Sequence[ListedExperiment], script: str | None, current_hash: str | None) -> LastRun | None:
    """The last run of the experiment `script` among the `listed` records (experiments.list_experiments:
    newest first): the newest record of a file of that name (one of that exact path when there is
    one) other than the current plan's own (`current_hash`: the same steps, nothing to compare)."""
    if not script:
        return None
    stem = os.path.splitext(os.path.basename(script))[0]
    same = [
        (e.url, e.record)
        for e in listed
        if e.record is not None and e.record.name == stem and e.record.hash != current_hash
    ]
    exact = [(url, r) for url, r in same if _same_script(r.script, script)]
    chosen = (exact or same)[:1]
    if not chosen:
        return None
    url, record = chosen[0]
    steps = {
        s["name"]: s
        for s in record.steps
        if isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("version"), dict)
    }
    return LastRun(url, record.created, steps)


def last_run_of_plan(plan: Plan, script: str | None) -> LastRun | None:
    """The last recorded run under `plan.prefix` of the experiment `script` (`last_run_of`), other
    than a run of this very plan: what `marin-lab explain` and the dry run compare with."""
    if not script:
        return None
    return last_run_of(list_experiments(plan.prefix), script, experiment_hash(plan))


def experiment_hash(plan: Plan) -> str:
    """The hash of a plan's experiment record (`{script}-{hash}.json`): over its step identities."""
    return hash8(sorted(s.identity for s in plan.steps))


def _same_script(recorded: Any, script: str) -> bool:
    if not isinstance(recorded, str):
        return False
    return recorded == script or os.path.abspath(recorded) == os.path.abspath(script)


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The recorded version a version of a step is compared with."""

    identity: str | None
    version: dict[str, Any]
    output_path: str | None
    from_last_run: bool
    """True: the step's entry in the same experiment's last run; False: the latest other recorded
    version of its name, from any experiment."""
    record: StepRecord | None = None
    """Its step record, when the index gave it (from any experiment)."""


def baseline(
    index: RecordIndex, name: str, identity: str, *, last_run: LastRun | None, started: str | None = None
) -> Baseline | None:
    """What version `identity` of step `name` is compared with, for `marin-lab explain`, the dry
    run's notes and the browser alike: its entry in `last_run` (the same experiment's last run,
    `last_run_of`) when that run had another version of it; else the latest other recorded version
    of its name (`RecordIndex.previous_version`, from any experiment). None when there is neither."""
    entry = last_run.steps.get(name) if last_run is not None else None
    if entry is not None and entry.get("identity") != identity:
        path = entry.get("output_path")
        return Baseline(
            _str_or_none(entry.get("identity")), entry["version"], path if isinstance(path, str) else None, True
        )
    previous = index.previous_version(name, identity, started)
    if previous is None or previous.version is None:
        return None
    return Baseline(previous.identity, previous.version, previous.output_path, False, previous)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def stale_reuse_diffs(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Unversioned fields that differ between a reused SUCCESS record and the current config."""
    lines = []
    for key in sorted(recorded.keys() | current.keys()):
        a, b = recorded.get(key, _MISSING), current.get(key, _MISSING)
        if a != b:
            lines.append(f"{key}: {_show(a)} -> {_show(b)}")
    return lines


def _show_field(key: str, v: Any) -> str:
    """A version field's value for the terminal: a secret (by its field's name or its text) is
    shown as '<redacted>', so that explain and the dry run print what the records hold."""
    if v is _MISSING:
        return _show(v)
    # Any component of the path counts: `credentials.hf_token` and `hf_token.value` are both secret.
    names = [n.strip('[]"') for n in re.findall(r'[A-Za-z_][A-Za-z0-9_]*|\["(?:[^"\\]|\\.)*"\]', key)]
    return _show(REDACTED if any(is_secret_field(n) for n in names) else redact(v))
