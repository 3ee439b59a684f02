"""Why is this step new? A field-level diff against the latest recorded version of the same name.

Marin users dig through logs to learn why a step reran (Marin #473, #2219). Here a step whose
hash changed is compared with the most recent `.executor_info` of a step with the same name
under the prefix:

    tokenize/docs-9c01a7e2 is new; the latest recorded version is tokenize/docs-3fa1c2d9:
      tokenizer: 'gpt2' -> 'llama3'
      dependency raw/docs changed: raw/docs-1a2b3c4d -> raw/docs-77e0f1aa
        raw/docs-77e0f1aa is new; ...: source: 'file:///a' -> 'file:///b'
"""

from __future__ import annotations

import json
import re
from typing import Any

from marin_lab.execution.plan import Plan, PlannedStep
from marin_lab.execution.provenance import is_secret_field, redact
from marin_lab.execution.secrets import REDACTED
from marin_lab.execution.status import INFO_FILE
from marin_lab.io.fs import fs_and_path, join, read_json_or_none

_MISSING = object()


class RecordIndex:
    """Recorded step infos under a prefix, found by name; each parent folder is listed once."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._listed: dict[str, list[str]] = {}
        self._infos: dict[str, dict[str, Any] | None] = {}

    def _children(self, folder_url: str) -> list[str]:
        if folder_url not in self._listed:
            fs, path = fs_and_path(folder_url)
            try:
                entries = fs.ls(path, detail=False)
            except (FileNotFoundError, NotADirectoryError):
                entries = []
            self._listed[folder_url] = [e.rstrip("/").rsplit("/", 1)[-1] for e in entries]
        return self._listed[folder_url]

    def info(self, output_path: str) -> dict[str, Any] | None:
        if output_path not in self._infos:
            try:
                info = read_json_or_none(join(output_path, INFO_FILE))
            except (ValueError, UnicodeDecodeError):
                info = None
            self._infos[output_path] = info if isinstance(info, dict) else None
        return self._infos[output_path]

    def versions_of(self, name: str) -> list[dict[str, Any]]:
        """Recorded infos of steps named `name`, newest first."""
        parent, _, base = name.rpartition("/")
        folder = join(self.prefix, parent) if parent else self.prefix
        pattern = re.compile(re.escape(base) + r"-[0-9a-f]{8}$")
        found = []
        for child in self._children(folder):
            if pattern.match(child):
                info = self.info(join(folder, child))
                if info is not None and isinstance(info.get("version"), dict):
                    found.append(info)
        found.sort(key=_recency, reverse=True)
        return found

    def previous_version(self, planned: PlannedStep) -> dict[str, Any] | None:
        for info in self.versions_of(planned.name):
            if info.get("identity") != planned.identity:
                return info
        return None


def _recency(info: dict[str, Any]) -> str:
    timings = info.get("timings") or {}
    history = info.get("status_history") or [{}]
    return str(timings.get("ended") or timings.get("started") or history[-1].get("time") or "")


def _show(v: Any) -> str:
    if v is _MISSING:
        return "(absent)"
    if isinstance(v, str):
        return repr(v)
    return json.dumps(v, sort_keys=True)


def diff_versions(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Field-level differences between two version dicts (config fields, then dependencies)."""
    lines = []
    if ("inputs" in old) != ("inputs" in new):
        lines.append("(one of the two versions was recorded with the older identity scheme of dotted field "
                     "names; fields may show as removed and added)")
    # A path is in one section or the other within a version; merged, a field that became an input
    # (or stopped being one) shows as one change.
    old_cfg = {**(old.get("config") or {}), **(old.get("inputs") or {})}
    new_cfg = {**(new.get("config") or {}), **(new.get("inputs") or {})}
    old_deps, new_deps = old.get("dependencies", []), new.get("dependencies", [])
    for key in sorted(old_cfg.keys() | new_cfg.keys()):
        a, b = old_cfg.get(key, _MISSING), new_cfg.get(key, _MISSING)
        if a != b:
            lines.append(f"{key}: {_show_field(key, a)} -> {_show_field(key, b)}")
    if old_deps != new_deps:
        old_by_name = {d.rsplit("-", 1)[0]: d for d in old_deps}
        new_by_name = {d.rsplit("-", 1)[0]: d for d in new_deps}
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


def explain_step(plan: Plan, planned: PlannedStep, index: RecordIndex, *, depth: int = 0,
                 seen: set[str] | None = None) -> list[str]:
    """Lines explaining why `planned` has no recorded output, recursing into changed dependencies."""
    seen = set() if seen is None else seen
    if planned.identity in seen:
        return []
    seen.add(planned.identity)
    pad = "  " * depth
    if index.info(planned.output_path) is not None:
        return [f"{pad}{planned.identity} is recorded at {planned.output_path} (unchanged)"]
    previous = index.previous_version(planned)
    if previous is None:
        return [f"{pad}{planned.identity} is new: no earlier version of '{planned.name}' is recorded under {plan.prefix}"]
    lines = [f"{pad}{planned.identity} differs from the latest recorded version {previous.get('identity')}:"]
    diffs = diff_versions(previous["version"], planned.version)
    if not diffs:
        diffs = ["(same version; the output path differs, e.g. an override_output_path)"]
    for d in diffs:
        lines.append(f"{pad}  {d}")
    old_deps = set(previous["version"].get("dependencies", []))
    for dep in planned.dependencies:
        if dep.identity not in old_deps:
            lines.extend(explain_step(plan, dep, index, depth=depth + 2, seen=seen))
    return lines


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
    return _show(REDACTED if is_secret_field(key.rsplit(".", 1)[-1]) else redact(v))
