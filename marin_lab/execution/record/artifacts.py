"""What a step's outputs are, for reproduction: artifacts, run logs, timings, and moving sources.

An **artifact** is a file a step produces as its result (a shard, a tokenizer, a checkpoint, an
evaluation). Reproducing a step means obtaining every artifact again, bit for bit. Some files are
not results but a log of one run: a W&B folder, `logs/`, a summary's wall-clock fields. A step
function declares them once:

    @reproducibility(non_artifacts=("wandb/*",), volatile_fields={"metrics.jsonl": ("time",)})
    def train_lm(config): ...

- `non_artifacts`: glob patterns (relative to the output path; `*` crosses folders) of files that
  are left out of the comparison and listed separately. `logs/*` and `wandb/*` always are.
- `volatile_fields`: file glob -> JSON keys (dotted for nested ones) holding wall-clock facts;
  those files are compared as JSON (every line of a .jsonl) without these keys.
- `not_reproducible`: config -> the reason the step cannot give the same bytes again (e.g. a
  download of a moving URL without a revision), or None. The step record says so at run time.

The declaration is written into the step record (`reproducibility`), so `marin-lab reproduce`
judges an old result by what its step declared when it ran.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from marin_lab.io.fs import exists, join, read_bytes

ATTRIBUTE = "__marin_reproducibility__"
ALWAYS_NON_ARTIFACTS = ("logs/*", "wandb/*")
# A small file that differs is read as JSON (a record, a ledger, a progress marker) in case only
# locations differ; larger ones (data) are compared by checksum only.
MAX_JSON_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class Reproducibility:
    non_artifacts: tuple[str, ...] = ()
    """Glob patterns of run-log files (not results), relative to the output path."""
    volatile_fields: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """File glob -> JSON keys (dotted for nested) that hold timings or other wall-clock facts."""
    not_reproducible: Callable[[Any], str | None] | None = None
    """config -> why the step's output cannot be obtained again, or None when it can."""


def reproducibility(
    *,
    non_artifacts: tuple[str, ...] = (),
    volatile_fields: Mapping[str, tuple[str, ...]] | None = None,
    not_reproducible: Callable[[Any], str | None] | None = None,
) -> Callable:
    """Declare, on a step function, what of its output is a run log (see the module docstring)."""
    spec = Reproducibility(tuple(non_artifacts), dict(volatile_fields or {}), not_reproducible)

    def mark(fn: Callable) -> Callable:
        setattr(fn, ATTRIBUTE, spec)
        return fn

    return mark


def declaration(fn: Any, config: Any) -> dict[str, Any]:
    """The step record's `reproducibility` entry for `fn` run on the resolved `config`."""
    spec: Reproducibility = (
        getattr(fn, ATTRIBUTE, None) or getattr(getattr(fn, "func", None), ATTRIBUTE, None) or Reproducibility()
    )
    reason = None
    if spec.not_reproducible is not None:
        try:
            reason = spec.not_reproducible(config)
        except Exception as err:  # a declaration must never fail a step
            reason = f"could not decide ({type(err).__name__}: {err})"
    return {
        "non_artifacts": sorted(set(ALWAYS_NON_ARTIFACTS) | set(spec.non_artifacts)),
        "volatile_fields": {k: list(v) for k, v in sorted(spec.volatile_fields.items())},
        "not_reproducible": reason,
    }


@dataclasses.dataclass
class Comparison:
    """One step's outputs against its record: `differences` empty means identical."""

    compared: int = 0
    differences: list[str] = dataclasses.field(default_factory=list)
    excluded: list[str] = dataclasses.field(default_factory=list)
    """Run-log files left out (`non_artifacts`), from either side."""
    normalized: list[str] = dataclasses.field(default_factory=list)
    """JSON files equal only without their volatile fields and with locations read as `{prefix}`."""


def _matches(path: str, patterns: Any) -> bool:
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def compare_outputs(
    recorded: dict[str, Any],
    original_root: str,
    actual: dict[str, Any],
    actual_root: str,
    declared: dict[str, Any],
    prefixes: tuple[str, ...] = (),
) -> Comparison:
    """Compare `actual` (a manifest of `actual_root`) with the `recorded` manifest of `original_root`.

    A JSON file that differs only in where things are (a path under one of `prefixes`, e.g. the
    checkpoint an evaluation read) is equal: both sides are read with every prefix as `{prefix}`.
    """
    non_artifacts = declared.get("non_artifacts") or list(ALWAYS_NON_ARTIFACTS)
    volatile = declared.get("volatile_fields") or {}
    rec = {f["path"]: f for f in recorded.get("files", [])}
    act = {f["path"]: f for f in actual.get("files", [])}
    out = Comparison()
    for path in sorted(rec.keys() | act.keys()):
        if _matches(path, non_artifacts):
            out.excluded.append(path)
            continue
        out.compared += 1
        r, a = rec.get(path), act.get(path)
        if a is None:
            out.differences.append(f"missing: {path}")
        elif r is None:
            out.differences.append(f"unexpected: {path}")
        elif "link" in r or "link" in a:
            if r.get("link") != a.get("link"):
                out.differences.append(f"link differs: {path}")
        elif r.get("sha256") == a.get("sha256") and r.get("size") == a.get("size"):
            continue
        elif (keys := [k for pattern, ks in volatile.items() if fnmatch.fnmatchcase(path, pattern) for k in ks]) or (
            a.get("size") or 0
        ) <= MAX_JSON_BYTES:
            problem = _compare_json(join(original_root, path), r, join(actual_root, path), keys, prefixes)
            if problem:
                out.differences.append(f"{problem}: {path}")
            else:
                out.normalized.append(path)
        elif r.get("size") != a.get("size"):
            out.differences.append(f"size differs: {path} ({r.get('size')} -> {a.get('size')} bytes)")
        else:
            out.differences.append(f"checksum differs: {path}")
    return out


def _compare_json(
    original: str, recorded: dict[str, Any], actual: str, keys: list[str], prefixes: tuple[str, ...]
) -> str | None:
    if not exists(original):
        return "original file gone, cannot compare its fields"
    data = read_bytes(original)
    if hashlib.sha256(data).hexdigest() != recorded.get("sha256"):
        return "original file changed since it was recorded"
    try:
        same = _normalized(data, keys, prefixes) == _normalized(read_bytes(actual), keys, prefixes)
    except ValueError:  # not JSON (or not UTF-8): bytes it is
        return "checksum differs"
    return None if same else "content differs (beyond its volatile fields)"


def _normalized(data: bytes, keys: list[str], prefixes: tuple[str, ...]) -> list[Any]:
    text = data.decode("utf-8")
    for prefix in sorted(prefixes, key=len, reverse=True):  # the longest first: one may hold another
        if prefix:
            text = text.replace(json.dumps(prefix.rstrip("/"))[1:-1], "{prefix}")
    try:
        docs = [json.loads(text)]
    except ValueError:  # JSON lines: one document per line
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    for doc in docs:
        for key in keys:
            _drop(doc, key.split("."))
    return docs


def _drop(doc: Any, parts: list[str]) -> None:
    if not isinstance(doc, dict) or not parts:
        return
    if len(parts) == 1:
        doc.pop(parts[0], None)
    else:
        _drop(doc.get(parts[0]), parts[1:])
