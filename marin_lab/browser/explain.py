"""Why a step's hash differs from the previous version of the same name, field by field.

Other versions of step `tokenize/docs` live beside it as `{prefix}/tokenize/docs-{hash8}/`. The
previous version is the most recent one that started before this one (or, if none did, the most
recent other one). Their `version` dicts are flattened to dotted paths and compared; a changed
dependency identity is explained one level further by diffing that dependency's two versions.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from marin_lab.browser.paths import Roots
from marin_lab.browser.redact import redact
from marin_lab.browser.storage import child, list_dir, load_json, parallel_map

_IDENTITY = re.compile(r"(?P<name>.+)-(?P<hash>[0-9a-f]{8})")
MAX_DEPENDENCY_DEPTH = 2


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as {'a.b.c': leaf}; lists and scalars are leaves."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key in sorted(value, key=str):
            out.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def diff_versions(old: Any, new: Any) -> list[dict]:
    """Field-level changes from `old` to `new`: [{'field', 'change', 'old', 'new'}]."""
    flat_old, flat_new = flatten(old if old is not None else {}), flatten(new if new is not None else {})
    changes = []
    for field in sorted(set(flat_old) | set(flat_new)):
        if field not in flat_old:
            changes.append({"field": field, "change": "added", "old": None, "new": flat_new[field]})
        elif field not in flat_new:
            changes.append({"field": field, "change": "removed", "old": flat_old[field], "new": None})
        elif flat_old[field] != flat_new[field]:
            changes.append({"field": field, "change": "changed", "old": flat_old[field], "new": flat_new[field]})
    return changes


def _started(record: dict) -> str:
    timings = record.get("timings")
    if isinstance(timings, dict) and isinstance(timings.get("started"), str):
        return timings["started"]
    history = record.get("status_history")
    if isinstance(history, list) and history and isinstance(history[0], dict):
        time = history[0].get("time")
        if isinstance(time, str):
            return time
    return ""


def sibling_versions(prefix: str, name: str, roots: Roots) -> list[str]:
    """Identities `{name}-{hash8}` present under the prefix."""
    folder = child(prefix, posixpath.dirname(name)) if "/" in name else prefix
    base = posixpath.basename(name)
    pattern = re.compile(re.escape(base) + r"-[0-9a-f]{8}")
    prefix_of_name = f"{posixpath.dirname(name)}/" if "/" in name else ""
    return [prefix_of_name + e["name"] for e in list_dir(roots, folder)
            if e["type"] == "directory" and pattern.fullmatch(e["name"])]


def explain_step(prefix: str, record: dict, roots: Roots, depth: int = 0) -> dict | None:
    """The diff of `record`'s version against the previous version of the same name."""
    name, identity = record.get("name"), record.get("identity")
    if not isinstance(name, str) or not name or ".." in name.split("/"):
        return None
    others = [i for i in sibling_versions(prefix, name, roots) if i != identity]
    if not others:
        return {"against": None, "candidates": 0, "changes": [],
                "message": f"no other version of {name!r} under the prefix"}
    loaded = parallel_map(lambda i: (i, load_json(roots, child(prefix, i, ".executor_info"))), others, local="://" not in prefix)
    usable = [(i, item.value) for i, item in loaded if item.state == "ok"]
    if not usable:
        return {"against": None, "candidates": len(others), "changes": [],
                "message": f"{len(others)} other version(s) of {name!r}, but none has a readable record"}
    mine = _started(record)
    older = [(i, r) for i, r in usable if _started(r) and (not mine or _started(r) < mine)]
    pool = older or usable
    against_identity, against = max(pool, key=lambda item: (_started(item[1]), item[0]))
    changes = diff_versions(redact(against.get("version")), redact(record.get("version")))
    if depth < MAX_DEPENDENCY_DEPTH:
        for change in changes:
            change["because"] = _explain_dependency(prefix, change, roots, depth)
    return {
        "against": against_identity,
        "against_output_path": child(prefix, against_identity),
        "against_started": _started(against) or None,
        "candidates": len(others),
        # No version started before this one: the diff is against a newer one, so say so.
        "newer": not older,
        "changes": changes,
        "message": None if changes else "the version fields are identical (same hash, other prefix?)",
    }


def _identity_pairs(old: Any, new: Any) -> list[tuple[str, str]]:
    """(old, new) identity pairs of one dependency that changed: a string, or lists side by side."""
    if isinstance(old, str) and isinstance(new, str):
        pairs = [(old, new)]
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        pairs = [(a, b) for a, b in zip(old, new) if isinstance(a, str) and isinstance(b, str) and a != b]
    else:
        return []
    out = []
    for a, b in pairs:
        match_a, match_b = _IDENTITY.fullmatch(a), _IDENTITY.fullmatch(b)
        if match_a and match_b and match_a["name"] == match_b["name"] and ".." not in f"{a}/{b}".split("/"):
            out.append((a, b))
    return out


def _explain_dependency(prefix: str, change: dict, roots: Roots, depth: int) -> dict | None:
    """When a dependency identity changed, why that dependency's own hash changed."""
    pairs = _identity_pairs(change.get("old"), change.get("new"))
    if not pairs:
        return None
    changes: list[dict] = []
    problems = []
    for old, new in pairs:
        old_rec = load_json(roots, child(prefix, old, ".executor_info"))
        new_rec = load_json(roots, child(prefix, new, ".executor_info"))
        if old_rec.state != "ok" or new_rec.state != "ok":
            problems.append(f"a record of {old} or {new} is missing or corrupt")
            continue
        sub_changes = diff_versions(redact(old_rec.value.get("version")), redact(new_rec.value.get("version")))
        for sub in sub_changes:
            if depth + 1 < MAX_DEPENDENCY_DEPTH:
                sub["because"] = _explain_dependency(prefix, sub, roots, depth + 1)
            if len(pairs) > 1:
                sub["field"] = f"{_IDENTITY.fullmatch(new)['name']}: {sub['field']}"
        changes.extend(sub_changes)
    name = _IDENTITY.fullmatch(pairs[0][1])["name"]
    return {"dependency": name, "old": pairs[0][0], "new": pairs[0][1], "changes": changes,
            "message": "; ".join(problems) or None}
