"""The browser's only way to touch storage: every open, stat and listing is confined to the roots.

Files are opened by the project's one reader for files others wrote (`marin_lab.io.confined`),
with the browser's `Roots` as its confinement: a path that passed `Roots.resolve` can still lead
out (a file inside a step folder may be a symlink to `/etc/shadow`, or a folder may be swapped for
a symlink between the check and the open), so the check is made on the real path of the open
descriptor; a named pipe, socket or device is refused from its `stat` alone, because opening a
FIFO blocks until a writer appears and would hold a server thread forever. Here the reader's
refusals become the browser's answers (403, 404). The evaluation pages read through the same
reader (`marin_lab.evaluation.results` is given the roots).

Missing and corrupt JSON records are answers (`Loaded.state`), not crashes.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from marin_lab.browser.errors import ForbiddenPathError, NotFoundError, NotRegularFileError
from marin_lab.browser.paths import Roots
from marin_lab.io import confined
from marin_lab.io.fs import fs_and_path

logger = logging.getLogger(__name__)

# Records are small and object stores are latency-bound: read many at once.
_POOL = ThreadPoolExecutor(max_workers=32, thread_name_prefix="browser-io")
# Parsing JSON costs about ten times its size in memory; past this a record is shown as too big.
MAX_RECORD_BYTES = 16 * 1024 * 1024

T = TypeVar("T")
R = TypeVar("R")


def _is_remote(url: str) -> bool:
    return "://" in url


@contextmanager
def _answers(url: str) -> Iterator[None]:
    """The reader's refusals as the browser's answers: 404 for a missing file, 403 for a pipe."""
    try:
        yield
    except (FileNotFoundError, NotADirectoryError):
        raise NotFoundError(f"{url} does not exist") from None
    except confined.SpecialFileError as err:
        raise NotRegularFileError(f"{err}; the browser reads regular files and folders only") from None


def open_file(roots: Roots, url: str) -> IO[bytes]:
    """A binary file object for `url`, after checking it is a regular file inside the roots.

    Raises ForbiddenPathError (outside the roots, or not a regular file), NotFoundError, or
    IsADirectoryError.
    """
    with _answers(url):
        return confined.open_file(url, roots)


def file_info(roots: Roots, url: str) -> dict:
    """{'type': 'file'|'directory', 'size'} of a path inside the roots; refuses anything else."""
    with _answers(url):
        return confined.file_info(url, roots)


def exists(roots: Roots, url: str) -> bool:
    """Whether a regular file or folder exists at `url` inside the roots (never raises)."""
    return confined.exists(url, roots)


@dataclass(frozen=True)
class Loaded:
    """A JSON file as the page shows it: `state` is 'ok', 'missing' or 'corrupt'."""

    url: str
    state: str
    value: Any = None
    error: str | None = None

    def as_json(self) -> dict:
        return {"url": self.url, "state": self.state, "error": self.error}


def read_bounded(roots: Roots, url: str, max_bytes: int) -> bytes:
    """The whole file at `url`, refusing (ValueError) one larger than `max_bytes`."""
    with open_file(roots, url) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than the {max_bytes} bytes the browser reads whole; open it in the file viewer")
    return data


def read_record(roots: Roots, url: str) -> bytes | None:
    """The confined reader the store's parsers take (`marin_lab.store.reader.Reader`): a record's
    bytes, None when it does not exist, an OSError when it cannot be read (outside the roots, not
    a regular file, a folder, larger than MAX_RECORD_BYTES)."""
    return confined.read_record(url, roots, MAX_RECORD_BYTES)


def load_json(roots: Roots, url: str, *, expect: type | None = dict) -> Loaded:
    """Read `url` as JSON; never raises for a missing, refused, unreadable or malformed file."""
    try:
        data = read_bounded(roots, url, MAX_RECORD_BYTES)
    except (NotFoundError, FileNotFoundError):
        return Loaded(url, "missing", error="file does not exist")
    except IsADirectoryError:
        return Loaded(url, "corrupt", error="is a folder, expected a JSON file")
    except ForbiddenPathError as err:
        return Loaded(url, "corrupt", error=f"not read: {err}")
    except (OSError, ValueError) as err:
        return Loaded(url, "corrupt", error=f"cannot be read: {err}")
    return parse_json(url, data, expect)


def parse_json(url: str, data: bytes, expect: type | None = dict) -> Loaded:
    try:
        value = json.loads(data)
    except RecursionError:
        return Loaded(url, "corrupt", error="not readable JSON: nested too deeply")
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


def list_dir(roots: Roots, url: str) -> list[dict]:
    """Entries of a folder as {'name', 'type', 'size'}; [] if it is missing.

    `type` is 'file', 'directory', or, on a local disk, 'link' for a symlink that leaves the
    roots (neither followed nor sized) and 'other' for pipes, sockets and devices.
    """
    target = roots.resolve(url)
    out = _list_remote(target) if _is_remote(target) else _list_local(roots, target)
    out.sort(key=lambda e: (e["type"] != "directory", e["name"]))
    return out


def _list_remote(url: str) -> list[dict]:
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
        out.append(
            {
                "name": name,
                "type": "directory" if entry.get("type") == "directory" else "file",
                "size": int(entry.get("size") or 0),
            }
        )
    return out


def _list_local(roots: Roots, folder: str) -> list[dict]:
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for entry in entries:
        item = {"name": entry.name, "type": "other", "size": 0}
        try:
            if entry.is_symlink() and not roots.contains(entry.path):
                item["type"] = "link"
            elif entry.is_dir():
                item["type"] = "directory"
            elif entry.is_file():
                item.update(type="file", size=entry.stat().st_size)
        except OSError:  # a dangling link or an entry removed while listing
            item["type"] = "link" if entry.is_symlink() else "other"
        out.append(item)
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
