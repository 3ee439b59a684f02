"""What a source location names (its files), and what they are (a content digest).

`list_source` is the one reading of a source used both to download it and to identify it, so a
step's identity covers exactly the files the step copies:

- a glob: its matches, relative to the part before the first wildcard;
- an http(s) URL: one file (HTTP has no folders);
- a folder: every file under it, recursively (broken symlinks of local folders are skipped: unpacked
  packages hold links to files of other packages; symlinks to folders are not entered;
  `list_source_and_skipped_links` names both, and download records them);
- anything else: one file.

`content_digest` identifies local files by what they hold: sha256 over every file's relative path,
size and sha256. Hashing a corpus on every plan would be slow, so each file's sha256 is cached by
(absolute path, size, mtime) in `~/.cache/marin_lab/digests` (or `$MARIN_LAB_CACHE/digests`): a
replan stats the files and hashes only what changed. The cache is a speed-up only; it never
enters an identity, and a lost or corrupt cache file is rebuilt.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence

from marin_lab.io import fs as mfs

logger = logging.getLogger(__name__)

__all__ = [
    "SourceFile",
    "content_digest",
    "has_glob",
    "list_source",
    "list_source_and_broken_links",
    "list_source_and_skipped_links",
    "sha256_file",
]

_CHUNK = 8 << 20
_GLOB_CHARS = "*?["


@dataclasses.dataclass(frozen=True)
class SourceFile:
    url: str
    rel: str
    """Path relative to the source (where the file lands under a download's `data/`)."""


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def has_glob(url: str) -> bool:
    return any(c in url for c in _GLOB_CHARS)


def list_source(source: str, include: Sequence[str] | None = None) -> list[SourceFile]:
    """Every file `source` names (see the module docstring), sorted by relative path."""
    return list_source_and_broken_links(source, include)[0]


def list_source_and_broken_links(
    source: str, include: Sequence[str] | None = None
) -> tuple[list[SourceFile], list[dict[str, str]]]:
    """`list_source`, and the broken symlinks it skipped (`{"path": rel, "link": target}`), so a
    caller can account for them instead of losing them silently."""
    return list_source_and_skipped_links(source, include)[:2]


def list_source_and_skipped_links(
    source: str, include: Sequence[str] | None = None
) -> tuple[list[SourceFile], list[dict[str, str]], list[dict[str, str]]]:
    """`list_source_and_broken_links`, and the symlinks to folders it did not enter (same form).

    A linked folder is not entered, as `os.walk` does not: its files are copies of files elsewhere
    (often in the same tree, listed there) and a link to a folder above itself would never end."""
    files, broken, folders = _list(source)
    if include:
        files = [f for f in files if _included(f.rel, include)]
        broken = [b for b in broken if _included(b["path"], include)]
        folders = [b for b in folders if _included(b["path"], include)]
    return files, broken, folders


def _included(rel: str, include: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(rel, p) for p in include)


def _link_target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _list(source: str) -> tuple[list[SourceFile], list[dict[str, str]], list[dict[str, str]]]:
    if has_glob(source):
        parts = source.split("/")
        first = next(i for i, p in enumerate(parts) if has_glob(p))
        base = "/".join(parts[:first])
        base_path = mfs.fs_and_path(base)[1].rstrip("/") if base else ""
        found = []
        for url in mfs.glob(source):
            path = mfs.fs_and_path(url)[1]
            rel = path[len(base_path) :].lstrip("/") if path.startswith(base_path) else path.rsplit("/", 1)[-1]
            if mfs.fs_and_path(url)[0].isfile(path):
                found.append(SourceFile(url, rel))
        return sorted(found, key=lambda t: t.rel), [], []
    if source.startswith(("http://", "https://")):
        return [SourceFile(source, source.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0])], [], []
    fs, path = mfs.fs_and_path(source)
    if fs.isdir(path):
        found = [SourceFile(mfs.join(source, rel), rel) for rel, _ in mfs.list_files(source)]
        broken: list[dict[str, str]] = []
        folders: list[dict[str, str]] = []
        if mfs.is_local(source):
            dead = [t for t in found if not os.path.exists(mfs.fs_and_path(t.url)[1])]
            if dead:
                logger.info("source %s: skipping %d broken symlinks, e.g. %s", source, len(dead), dead[0].url)
                broken = [{"path": t.rel, "link": _link_target(mfs.fs_and_path(t.url)[1])} for t in dead]
            # fsspec lists a symlink to a folder as one entry (it does not enter it): not a file.
            linked = [t for t in found if os.path.isdir(mfs.fs_and_path(t.url)[1])]
            if linked:
                logger.info("source %s: not entering %d linked folders, e.g. %s", source, len(linked), linked[0].url)
                folders = [{"path": t.rel, "link": _link_target(mfs.fs_and_path(t.url)[1])} for t in linked]
            found = [t for t in found if t not in dead and t not in linked]
        return found, broken, folders
    if fs.isfile(path):
        return [SourceFile(source, path.rstrip("/").rsplit("/", 1)[-1])], [], []
    return [], [], []


def cache_dir() -> str:
    root = os.environ.get("MARIN_LAB_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "marin_lab")
    return os.path.join(root, "digests")


def content_digest(source: str, include: Sequence[str] | None = None) -> dict:
    """{"sha256", "files", "bytes"} of the local files `source` names; FileNotFoundError if none."""
    files = list_source(source, include)
    if not files:
        raise FileNotFoundError(source)
    cache_file = os.path.join(cache_dir(), hashlib.sha256(source.encode()).hexdigest()[:24] + ".json")
    cache = _read_cache(cache_file)
    fresh: dict[str, list] = {}
    total = 0
    h = hashlib.sha256()
    for f in files:
        path = mfs.fs_and_path(f.url)[1]
        st = os.stat(path)
        key = os.path.abspath(path)
        entry = cache.get(key)
        if entry is None or entry[0] != st.st_size or entry[1] != st.st_mtime_ns:
            entry = [st.st_size, st.st_mtime_ns, sha256_file(path)]
        fresh[key] = entry
        total += st.st_size
        # One line per file; json.dumps quotes the name, so no name can imitate a separator.
        h.update(f"{json.dumps(f.rel)} {st.st_size} {entry[2]}\n".encode())
    if fresh != cache:
        _write_cache(cache_file, fresh)
    return {"sha256": h.hexdigest(), "files": len(files), "bytes": total}


def _read_cache(path: str) -> dict[str, list]:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(path: str, entries: dict[str, list]) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp.", dir=os.path.dirname(path))
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f)
        os.replace(tmp, path)
    except OSError as err:  # a read-only home: digests are recomputed next time, nothing else changes
        logger.debug("could not write the digest cache %s: %s", path, err)
