"""Reading small JSON records through fsspec, where missing and corrupt are answers, not crashes."""

from __future__ import annotations

import json
import logging
import os
import posixpath
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

from marin_lab.io.fs import fs_and_path

logger = logging.getLogger(__name__)

# Records are small and object stores are latency-bound: read many at once.
_POOL = ThreadPoolExecutor(max_workers=32, thread_name_prefix="browser-io")
# A step record with a huge `result` should not stall the page; past this it is shown as too big.
MAX_RECORD_BYTES = 32 * 1024 * 1024

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Loaded:
    """A JSON file as the page shows it: `state` is 'ok', 'missing' or 'corrupt'."""

    url: str
    state: str
    value: Any = None
    error: str | None = None

    def as_json(self) -> dict:
        return {"url": self.url, "state": self.state, "error": self.error}


def load_json(url: str, *, expect: type | None = dict) -> Loaded:
    """Read `url` as JSON; never raises for a missing, unreadable or malformed file."""
    if "://" not in url:
        return _load_local_json(url, expect)
    try:
        fs, path = fs_and_path(url)
        size = fs.size(path)
        if size is not None and size > MAX_RECORD_BYTES:
            return Loaded(url, "corrupt", error=f"{size} bytes, larger than the {MAX_RECORD_BYTES} "
                                                  "bytes the browser parses; open it in the file viewer")
        data = fs.cat_file(path)
    except FileNotFoundError:
        return Loaded(url, "missing", error="file does not exist")
    except IsADirectoryError:
        return Loaded(url, "corrupt", error="is a folder, expected a JSON file")
    except OSError as err:
        return Loaded(url, "corrupt", error=f"cannot be read: {err}")
    return _parse(url, data, expect)


def _load_local_json(path: str, expect: type | None) -> Loaded:
    # The fsspec layer costs more than the read itself for small local files (a 1,000-step
    # experiment reads 1,000 status files per page); this path reads them directly.
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_RECORD_BYTES:
                return Loaded(path, "corrupt", error=f"{size} bytes, larger than the {MAX_RECORD_BYTES} "
                                                     "bytes the browser parses; open it in the file viewer")
            data = f.read()
    except FileNotFoundError:
        return Loaded(path, "missing", error="file does not exist")
    except (IsADirectoryError, NotADirectoryError):
        return Loaded(path, "corrupt", error="is a folder (or under a file), expected a JSON file")
    except OSError as err:
        return Loaded(path, "corrupt", error=f"cannot be read: {err}")
    return _parse(path, data, expect)


def _parse(url: str, data: bytes, expect: type | None) -> Loaded:
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError) as err:
        return Loaded(url, "corrupt", error=f"not valid JSON: {err}")
    if expect is not None and not isinstance(value, expect):
        return Loaded(url, "corrupt", error=f"expected a JSON {expect.__name__}, found {type(value).__name__}")
    return Loaded(url, "ok", value=value)


def parallel_map(fn: Callable[[T], R], items: Iterable[T], *, local: bool = False) -> list[R]:
    """map() over a thread pool for object stores; a plain loop on a local disk, where reads are
    microseconds and handing them to threads costs more than it saves."""
    if local:
        return [fn(item) for item in items]
    return list(_POOL.map(fn, items))


def list_dir(url: str) -> list[dict]:
    """Entries of a folder as {'name', 'type': 'file'|'directory', 'size'}; [] if it is missing."""
    fs, path = fs_and_path(url)
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    out = []
    base = path.rstrip("/")
    for entry in entries:
        name = posixpath.basename(str(entry["name"]).rstrip("/"))
        if not name or str(entry["name"]).rstrip("/") == base:
            continue
        out.append({"name": name, "type": "directory" if entry.get("type") == "directory" else "file",
                    "size": int(entry.get("size") or 0)})
    out.sort(key=lambda e: (e["type"] != "directory", e["name"]))
    return out


def child(url: str, *parts: str) -> str:
    out = url.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def parent(url: str) -> str:
    if "://" in url:
        protocol, rest = url.split("://", 1)
        return f"{protocol}://{posixpath.dirname(rest.rstrip('/'))}"
    return posixpath.dirname(url.rstrip("/")) or "/"
