"""fsspec helpers: one way to open, list and atomically write files on any filesystem.

Atomicity: on a local disk a file is written under a temporary name in the same folder and
renamed into place (rename is atomic on POSIX); on object stores (gs://, memory://) a single
`pipe` is one object put, which readers see whole or not at all. Either way a reader never sees a
half-written file under its final name.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import fsspec
import fsspec.asyn
from fsspec.implementations.local import LocalFileSystem

# gcsfs 2026.10 waits a 60 s gRPC timeout on every call against emulators unless this is off;
# real GCS works either way. Must be set before gcsfs is imported.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


_LOCAL_FS = LocalFileSystem()


def fs_and_path(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem for `url` and the path within it (protocol stripped)."""
    if isinstance(url, str) and "://" not in url and "::" not in url and not url.startswith("data:"):
        # A plain local path, which fsspec would also read as one: its answer without the ~25 us
        # of URL parsing and instance lookup, paid a dozen times for every step a driver runs.
        return _LOCAL_FS, LocalFileSystem._strip_protocol(url)
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def is_local(url: str) -> bool:
    return isinstance(fs_and_path(url)[0], LocalFileSystem)


def join(base: str, *parts: str) -> str:
    """Join URL/path parts with '/', keeping the protocol of `base`."""
    out = base.rstrip("/")
    for part in parts:
        if part:
            out = f"{out}/{part.strip('/')}"
    return out


def normalize_prefix(prefix: str) -> str:
    """An absolute local path or a URL with protocol, without a trailing slash."""
    if "://" in prefix:
        return prefix.rstrip("/")
    return os.path.abspath(os.path.expanduser(prefix)).rstrip("/") or "/"


def exists(url: str) -> bool:
    fs, path = fs_and_path(url)
    return fs.exists(path)


def makedirs(url: str) -> None:
    fs, path = fs_and_path(url)
    fs.makedirs(path, exist_ok=True)


def atomic_write_bytes(url: str, data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `url` so that readers see the old file, or the new one whole.

    `durable`: on local disk, flush the data to the device (fsync) before the rename, so that
    after a power loss the file is the old one or the new one whole. A file whose loss or tear is
    harmless (a transient status the reader treats as damaged and redoes) may skip it: without
    fsync a crashed *process* still leaves the old or new file whole; only the OS's crash can tear."""
    atomic_write_chunks(url, [data], durable=durable)


def atomic_write_chunks(url: str, chunks: Iterable[bytes | memoryview], *, durable: bool = True) -> None:
    """`atomic_write_bytes` for data held in pieces: written one after the other, never joined
    into one buffer first on local disk (a large array is not copied to be written)."""
    fs, path = fs_and_path(url)
    if isinstance(fs, LocalFileSystem):
        folder = os.path.dirname(path)
        tmp = os.path.join(folder, f".tmp.{os.path.basename(path)}.{uuid.uuid4().hex[:8]}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileNotFoundError:  # the folder is made on the first write into it, not checked at every one
            os.makedirs(folder, exist_ok=True)
            fd = os.open(tmp, flags, 0o666)
        with open(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    else:
        # One object put: object stores show it whole or not at all.
        parts = [bytes(c) if isinstance(c, memoryview) else c for c in chunks]
        fs.pipe_file(path, parts[0] if len(parts) == 1 else b"".join(parts))


def atomic_write_text(url: str, text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(url, text.encode("utf-8"), durable=durable)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def json_default(obj: Any) -> Any:
    """What `json` cannot encode, as the same value in every process: a function or class by its
    qualified name, a set sorted, a numpy scalar as its number, anything else as its text without
    memory addresses (a default repr such as `<function f at 0x7f...>` differs from run to run)."""
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=lambda v: json.dumps(v, sort_keys=True, default=json_default))
    if type(obj).__module__ == "numpy" and getattr(obj, "shape", None) == ():
        return obj.item()
    name = getattr(obj, "__qualname__", None)
    if callable(obj) and isinstance(name, str):
        module = getattr(obj, "__module__", None)
        return f"{module}.{name}" if module else name
    return _ADDRESS.sub("", str(obj))


def write_json(url: str, obj: Any, *, indent: int | None = 2, durable: bool = True) -> None:
    text = json.dumps(obj, indent=indent, sort_keys=False, default=json_default)
    atomic_write_text(url, text + "\n", durable=durable)


def read_bytes(url: str) -> bytes:
    fs, path = fs_and_path(url)
    if fs is _LOCAL_FS:  # what fsspec's local cat_file does, without its file object around the read
        with open(path, "rb") as f:
            return f.read()
    return fs.cat_file(path)


def cat_many(urls: Sequence[str], *, concurrency: int = 64) -> list[bytes | Exception]:
    """The bytes at each URL, or the exception reading it raised, in the order given.

    On an async filesystem (gcsfs, s3fs, http) the reads run on its event loop, up to `concurrency`
    at once, so N reads cost about N / `concurrency` round trips instead of N; elsewhere they run
    one after the other (a local read is a system call, not a round trip)."""
    out: list[bytes | Exception] = [b""] * len(urls)
    groups: dict[str, list[int]] = {}
    for i, url in enumerate(urls):
        groups.setdefault(url.split("://", 1)[0] if "://" in url else "", []).append(i)
    for indices in groups.values():
        fs, _ = fs_and_path(urls[indices[0]])
        paths = [fs._strip_protocol(urls[i]) for i in indices]
        if getattr(fs, "async_impl", False):
            got = fsspec.asyn.sync(fs.loop, _cat_concurrently, fs, paths, concurrency)
        else:
            got = [_cat_or_error(fs, p) for p in paths]
        for i, result in zip(indices, got, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result  # a cancellation or an interrupt, not a read's answer
            out[i] = result
    return out


async def _cat_concurrently(fs: Any, paths: Sequence[str], concurrency: int) -> list[Any]:
    gate = asyncio.Semaphore(concurrency)

    async def one(path: str) -> bytes:
        async with gate:
            return await fs._cat_file(path)

    return await asyncio.gather(*(one(p) for p in paths), return_exceptions=True)


def _cat_or_error(fs: fsspec.AbstractFileSystem, path: str) -> bytes | Exception:
    try:
        return fs.cat_file(path)
    except Exception as err:  # noqa: BLE001 - handed back in the result, as the async path does
        return err


def read_text(url: str) -> str:
    return read_bytes(url).decode("utf-8")


def read_json(url: str) -> Any:
    return json.loads(read_bytes(url))


def read_json_or_none(url: str) -> Any | None:
    """The parsed JSON at `url`, or None when the file does not exist."""
    try:
        return read_json(url)
    except FileNotFoundError:
        return None


def remove(url: str, *, recursive: bool = False, missing_ok: bool = True) -> None:
    fs, path = fs_and_path(url)
    try:
        fs.rm(path, recursive=recursive)
    except FileNotFoundError:
        if not missing_ok:
            raise


def list_files(url: str) -> Iterator[tuple[str, int]]:
    """Every file under `url` (recursively) as (path relative to `url`, size), sorted by path."""
    fs, root = fs_and_path(url)
    root = root.rstrip("/")
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return
    for full, info in sorted(found.items()):
        if info.get("type") == "directory":
            continue
        rel = full[len(root) :].lstrip("/") if full.startswith(root) else full
        yield rel, int(info.get("size") or 0)


def glob(url: str) -> list[str]:
    """Sorted matches of a glob, returned as URLs with the protocol of `url`."""
    fs, path = fs_and_path(url)
    protocol = url.split("://", 1)[0] + "://" if "://" in url else ""
    matches = sorted(fs.glob(path))
    if protocol and protocol != "file://":
        return [m if "://" in m else protocol + m for m in matches]
    return matches
