"""`marin-lab gc [PREFIX] [--older_than 14d] [--yes]`: what storage under a prefix (default: the
store, as `status` and `browse` take it) nobody needs.

Lists, with sizes, folders older than the limit (their newest file) that are one of:

- unreferenced: a step output (a folder with a status or step record) that no experiment record
  under `{prefix}/experiments/` lists;
- failed: a step whose status is FAILED or DEP_FAILED;
- abandoned: a step left RUNNING or WAITING whose lease is stale (its driver is gone), or a
  step folder with a lease but no status;
- scratch: the children of `{prefix}/tmp/` (where experiments put temporary outputs: gc expires
  them by default) and of `{prefix}/reproduce/`.

Never listed, whatever their age: a step with a live lease (it is running), and a SUCCESS that an
experiment record references. When an experiment record is damaged (unreadable, or one of its step
entries names no output path), what it references is unknown, so nothing is called unreferenced
(said so). Deletes only with `--yes`, and checks each folder's
lease again just before deleting it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import re
import time
from typing import Any

from marin_lab.execution.errors import MarinLabError
from marin_lab.execution.record.experiments import ListedExperiment, list_experiments
from marin_lab.execution.state.lease import LeaseHolder
from marin_lab.execution.state.status import INFO_FILE, LEASE_FILE, STATUS_FILE, Status, read_status
from marin_lab.flags import add_prefix_arguments
from marin_lab.io.fs import fs_and_path, join, read_bytes, remove
from marin_lab.store.layout import EXPERIMENTS_DIR, LAUNCHES_DIR, TMP_DIR, default_prefix

SCRATCH_AREAS = (TMP_DIR, "reproduce")
SKIP = {EXPERIMENTS_DIR, LAUNCHES_DIR, *SCRATCH_AREAS}
_DURATION = re.compile(r"(?P<n>\d+(?:\.\d+)?)(?P<unit>[smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class GcError(MarinLabError):
    """gc cannot do what was asked (a prefix it cannot list, a bad --older_than)."""


@dataclasses.dataclass
class Candidate:
    path: str
    kind: str  # unreferenced | failed | abandoned | scratch
    size: int
    newest: float
    detail: str = ""


def parse_age(text: str) -> float:
    m = _DURATION.fullmatch(text.strip())
    if not m:
        raise GcError(f"--older_than {text!r}: give a number and a unit s, m, h or d (e.g. 14d, 12h)")
    return float(m["n"]) * _UNIT_S[m["unit"]]


def _mtime(info: dict[str, Any]) -> float:
    value = info.get("mtime", info.get("updated", info.get("LastModified", 0)))
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, str):
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return float(value or 0)


def _usage(url: str) -> tuple[int, float]:
    """Total bytes and newest modification time of the files under `url`."""
    fs, path = fs_and_path(url)
    files = fs.find(path, detail=True)
    return sum(int(i.get("size") or 0) for i in files.values()), max((_mtime(i) for i in files.values()), default=0.0)


def _live_holder(lease_url: str, now: float) -> bool:
    try:
        holder = LeaseHolder.parse(read_bytes(lease_url))
    except (FileNotFoundError, NotADirectoryError):
        return False
    return holder is not None and not holder.is_stale(now)


def _live_lease(url: str, now: float) -> bool:
    return _live_holder(join(url, LEASE_FILE), now)


def _live_lease_below(url: str, now: float) -> bool:
    """A live lease in `url` or any folder below it: a step pinned into the scratch area
    (`override_output_path=tmp_path(...)`) still writes there."""
    fs, path = fs_and_path(url)
    root = path.rstrip("/")
    try:
        found = fs.find(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    for p in found:
        rel = p[len(root) :].strip("/")
        if rel.rsplit("/", 1)[-1] == LEASE_FILE and _live_holder(join(url, rel), now):
            return True
    return False


def _step_folders(prefix: str) -> list[str]:
    """Folders under `prefix` holding a status, step record or lease (not descending into them)."""
    fs, root = fs_and_path(prefix)
    try:
        if fs.isfile(root):
            raise GcError(f"{prefix} is a file, not a folder; give the prefix folder the executor writes under")
        fs.ls(root, detail=False)
    except (FileNotFoundError, NotADirectoryError, PermissionError, OSError) as err:
        raise GcError(
            f"cannot list {prefix} ({type(err).__name__}: {err}); give a prefix that exists and that "
            "these credentials may list"
        ) from None
    found = []
    for dirpath, dirs, files in fs.walk(root, topdown=True):
        rel = dirpath[len(root) :].strip("/")
        if not rel:
            dirs[:] = [d for d in dirs if d not in SKIP]
            continue
        if {STATUS_FILE, INFO_FILE, LEASE_FILE} & set(files):
            found.append(join(prefix, rel))
            dirs[:] = []
    return found


def _record_damage(listed: ListedExperiment) -> str | None:
    """Why the listed record cannot say which steps it references (None when it can)."""
    if listed.record is None:
        return "unreadable"
    for i, step in enumerate(listed.steps):
        if (
            not isinstance(step, dict)
            or not isinstance(step.get("output_path"), str)
            or not step["output_path"].strip()
        ):
            return f"steps[{i}] has no output_path"
    return None


def _is_referenced(url: str, prefix: str, name: str, referenced: set[str], referenced_paths: set[str]) -> bool:
    """A hashed folder (`name-hash8`) by its name, wherever the prefix was spelled; a folder addressed
    by name (`{name}/{version}`, marin_lab.marin's artifacts) by its whole path under the prefix."""
    if re.fullmatch(r".+-[0-9a-f]{8}", name):
        return name in referenced
    rel = url[len(prefix) :].strip("/")
    return any(p == url or p.endswith("/" + rel) for p in referenced_paths)


def find_garbage(prefix: str, older_than_s: float, *, now: float | None = None) -> tuple[list[Candidate], list[str]]:
    """(candidates, notes); lists, never deletes."""
    now = time.time() if now is None else now
    prefix = prefix.rstrip("/")
    steps = _step_folders(prefix)
    notes = []
    experiments = list_experiments(prefix)
    damaged = [(e.url, why) for e in experiments if (why := _record_damage(e))]
    # Even a damaged record's readable entries are references.
    referenced_paths = {
        s["output_path"].rstrip("/")
        for e in experiments
        for s in e.steps
        if isinstance(s, dict) and isinstance(s.get("output_path"), str)
    }
    referenced = {p.rsplit("/", 1)[-1] for p in referenced_paths}
    if damaged:
        notes.append(
            f"{len(damaged)} experiment record(s) are damaged ({damaged[0][0]}: {damaged[0][1]}): what they "
            "reference is unknown, so no step is listed as unreferenced"
        )
    out = []
    for url in steps:
        if _live_lease(url, now):
            continue
        status = (read_status(url) or {}).get("status")
        name = url.rsplit("/", 1)[-1]
        if status in (Status.FAILED, Status.DEP_FAILED):
            kind, detail = "failed", status
        elif status in (Status.RUNNING, Status.WAITING) or status is None:
            kind, detail = "abandoned", f"{status or 'no status'}, no live lease"
        elif not _is_referenced(url, prefix, name, referenced, referenced_paths) and not damaged:
            kind, detail = "unreferenced", status or ""
        else:
            continue  # a referenced SUCCESS (or a step we cannot judge): kept
        size, newest = _usage(url)
        if now - newest >= older_than_s:
            out.append(Candidate(url, kind, size, newest, detail))
    for area in SCRATCH_AREAS:
        fs, path = fs_and_path(join(prefix, area))
        try:
            children = fs.ls(path, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for child in children:
            url = join(prefix, area, child.rstrip("/").rsplit("/", 1)[-1])
            if _live_lease_below(url, now):
                continue
            size, newest = _usage(url)
            if now - newest >= older_than_s:
                out.append(Candidate(url, "scratch", size, newest))
    return out, notes


def delete(candidates: list[Candidate], *, now: float | None = None) -> list[str]:
    """Delete the candidates; a folder that took a live lease since it was listed is kept (said so)."""
    kept = []
    for c in candidates:
        at = time.time() if now is None else now
        if _live_lease(c.path, at) or (c.kind == "scratch" and _live_lease_below(c.path, at)):
            kept.append(f"{c.path}: a live lease appeared since it was listed; kept")
            continue
        remove(c.path, recursive=True)
    return kept


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _cmd_gc(args: argparse.Namespace) -> int:
    args.prefix = default_prefix(args.prefix)  # the store `status` and `browse` show, unless named
    older = parse_age(args.older_than)
    candidates, notes = find_garbage(args.prefix, older)
    for note in notes:
        print(f"note: {note}")
    now = time.time()
    for c in candidates:
        age_d = (now - c.newest) / 86400
        print(f"{c.kind:<12} {_human(c.size):>9}  {age_d:5.1f} d  {c.path}" + (f"  ({c.detail})" if c.detail else ""))
    total = sum(c.size for c in candidates)
    if not candidates:
        print(f"nothing to collect under {args.prefix} older than {args.older_than}")
        return 0
    if not args.yes:
        print(f"{len(candidates)} folder(s), {_human(total)}: nothing deleted; pass --yes to delete them")
        return 0
    kept = delete(candidates)
    for line in kept:
        print(line)
    print(f"deleted {len(candidates) - len(kept)} folder(s), {_human(total)}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "gc", help="list (and with --yes delete) unreferenced, failed, abandoned and scratch outputs under a prefix"
    )
    add_prefix_arguments(p)
    p.add_argument("--older_than", default="14d", help="only what was last written longer ago (default 14d)")
    p.add_argument("--yes", action="store_true", help="delete what is listed (default: list only)")
    p.set_defaults(func=_cmd_gc)
