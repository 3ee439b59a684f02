"""What differs between two experiment records: the runs of one script, or of two scripts.

Every edit of a script is a new record (`{script}-{hash8}.json`, the hash over its step identities),
so a script run with two learning rates leaves two records with the same name. Steps are matched by
name: one with the same identity in both is shared (the same output); with another identity, the
fields of its hashed version that differ are listed, by the field diff `marin-lab explain` prints
(`execution.review.baseline.version_changes`); a step whose own fields are equal moved only because
something upstream did (`upstream`); a step in one record only is `added` or `removed`.

The experiments list groups the records of one script and says, for each, what it differs by from
the one before it (`annotate_siblings`); the compare-experiments page shows the whole diff of any two.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

from marin_lab.execution.review.baseline import version_changes
from marin_lab.io.secrets import redact

MAX_FIELDS = 40
"""At most this many differing fields are listed per step (the rest are counted)."""
SUMMARY_STEPS = 3
"""The experiments list names the fields of at most this many changed steps (the rest are counted)."""
SUMMARY_FIELDS = 3
_VALUE_CHARS = 60


def diff_records(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Step by step, what record `b` differs by from record `a` (both as written), and a short summary."""
    a_steps, b_steps = _by_name(a), _by_name(b)
    rows = []
    for name in [*a_steps, *(n for n in b_steps if n not in a_steps)]:
        sa, sb = a_steps.get(name), b_steps.get(name)
        fields: list[dict[str, Any]] = []
        if sa is None:
            change = "added"
        elif sb is None:
            change = "removed"
        elif sa.get("identity") == sb.get("identity"):
            change = "same"
        else:
            fields = version_changes(redact(_version(sa)), redact(_version(sb)))
            change = "upstream" if fields and all(f["field"] == "dependencies" for f in fields) else "changed"
        rows.append(
            {
                "name": name,
                "change": change,
                "a": _text((sa or {}).get("identity")),
                "b": _text((sb or {}).get("identity")),
                "fields": [{**f, "text": _field_text(f)} for f in fields[:MAX_FIELDS]],
                "more_fields": max(len(fields) - MAX_FIELDS, 0),
            }
        )
    counts = Counter(r["change"] for r in rows)
    return {"steps": rows, "counts": dict(counts), "summary": summary(rows)}


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """A few lines: the changed steps with their fields, then counts of the rest."""
    changed = [r for r in rows if r["change"] == "changed"]
    lines = []
    for row in changed[:SUMMARY_STEPS]:
        own = [f["text"] for f in row["fields"] if f["field"] != "dependencies"]
        more = len(own) - SUMMARY_FIELDS + row["more_fields"]
        lines.append(f"{row['name']}: " + "; ".join(own[:SUMMARY_FIELDS]) + (f"; {more} more" if more > 0 else ""))
    if len(changed) > SUMMARY_STEPS:
        lines.append(f"{len(changed) - SUMMARY_STEPS} more steps changed")
    upstream = sum(r["change"] == "upstream" for r in rows)
    if upstream == 1:
        lines.append("1 step changed through its dependencies")
    elif upstream:
        lines.append(f"{upstream} steps changed through their dependencies")
    for change in ("added", "removed"):
        names = [r["name"] for r in rows if r["change"] == change]
        if names:
            rest = len(names) - SUMMARY_STEPS
            lines.append(f"{change}: " + ", ".join(names[:SUMMARY_STEPS]) + (f" and {rest} more" if rest > 0 else ""))
    return lines or ["the same steps"]


def annotate_siblings(summaries: list[dict[str, Any]], records: dict[str, dict[str, Any]]) -> None:
    """Give each listed experiment its script's number of records (`siblings`) and, where an older
    record of the same script exists, that record's id (`previous`) and what differs (`differs`)."""
    by_script: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in summaries:
        if s.get("state") == "ok" and isinstance(s.get("script"), str) and s["id"] in records:
            by_script[s["script"]].append(s)
    for members in by_script.values():
        for s in members:
            s["siblings"] = len(members)
        ordered = sorted(members, key=lambda s: (s.get("created") or "", s["id"]))
        for older, newer in zip(ordered, ordered[1:], strict=False):
            newer["previous"] = older["id"]
            newer["differs"] = diff_records(records[older["id"]], records[newer["id"]])["summary"]


def _by_name(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    steps = record.get("steps")
    out: dict[str, dict[str, Any]] = {}
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict):
            name = _text(step.get("name")) or _text(step.get("identity"))
            if name is not None:
                out.setdefault(name, step)
    return out


def _version(step: dict[str, Any]) -> dict[str, Any]:
    version = step.get("version")
    return version if isinstance(version, dict) else {}


def _field_text(change: dict[str, Any]) -> str:
    if change["field"] == "dependencies":
        return "dependencies changed"
    old = "(absent)" if change["change"] == "added" else _short(change["old"])
    new = "(absent)" if change["change"] == "removed" else _short(change["new"])
    return f"{change['key']}: {old} -> {new}"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
