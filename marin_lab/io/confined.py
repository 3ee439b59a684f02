"""The one reader for files that others wrote: confined to roots, and never a pipe, socket or device.

The data browser and `marin-lab evals` read whatever lies under a prefix, and a prefix is written
by other people and tools. Three things there must not reach a reader:

- a symlink (or a folder swapped for one after a check) that leads out of the folders the reader
  serves: the check is made on what was opened, the real path of the open descriptor
  (`/proc/self/fd/N`), which the caller's `Confinement` must accept;
- a named pipe: opening one blocks until a writer appears, so one FIFO named `results.json` would
  hang a whole leaderboard for ever; a socket or a device is no file either. They are refused from
  their `stat`, never opened; the open itself is non-blocking, so a FIFO swapped in after the
  stat returns at once and is refused from its `fstat`;
- a file too large to hold: `read_bounded` reads at most `max_bytes + 1` bytes.

`confinement=None` reads anywhere (the command line reading the prefix it was given), still
refusing pipes, sockets and devices. Object-store URLs have none of these and open through fsspec.
"""

from __future__ import annotations

import os
import stat
from typing import IO, Protocol

from fsspec.implementations.local import LocalFileSystem

from marin_lab.errors import MarinLabError
from marin_lab.io.fs import fs_and_path

__all__ = [
    "Confinement",
    "FileTooLargeError",
    "RefusedPathError",
    "SpecialFileError",
    "exists",
    "file_info",
    "open_file",
    "read_bounded",
    "read_record",
]

_PROC_FD = "/proc/self/fd"


class RefusedPathError(MarinLabError):
    """A file the reader will not read: outside its roots, or not a regular file."""


class SpecialFileError(RefusedPathError):
    """A named pipe, socket or device: refused from its stat, never opened."""


class FileTooLargeError(MarinLabError, ValueError):
    """A file larger than the caller reads whole."""


class Confinement(Protocol):
    """Where a reader may read (`marin_lab.browser.paths.Roots` is one)."""

    def resolve(self, requested: str) -> str:
        """The confined URL or absolute local path for `requested`; raises when it lies outside."""
        ...

    def check_real(self, real: str, original: str) -> None:
        """Raise when a local real path (symlinks resolved) lies outside."""
        ...


def _kind_of_mode(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refuse_special(url: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise SpecialFileError(f"{url} is {_kind_of_mode(mode)}; only regular files and folders are read")


def _target(url: str, confinement: Confinement | None) -> tuple[str, bool]:
    """(what to open, whether it is a local path)."""
    target = confinement.resolve(url) if confinement is not None else url
    fs, path = fs_and_path(target)
    if isinstance(fs, LocalFileSystem):
        return path, True
    return target, False


def open_file(url: str, confinement: Confinement | None = None) -> IO[bytes]:
    """A binary file object for `url`, after checking it is a regular file inside the confinement.

    Raises FileNotFoundError, IsADirectoryError, SpecialFileError, or what the confinement raises
    for a path outside it.
    """
    target, local = _target(url, confinement)
    if not local:
        fs, path = fs_and_path(target)
        return fs.open(path, "rb")
    try:
        before = os.stat(target)
    except NotADirectoryError:
        raise FileNotFoundError(f"{url} does not exist") from None
    if stat.S_ISDIR(before.st_mode):
        raise IsADirectoryError(f"{url} is a folder")
    _refuse_special(url, before.st_mode)
    # O_NONBLOCK: if a FIFO replaced the file since the stat, the open still returns at once.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags)
    except NotADirectoryError:
        raise FileNotFoundError(f"{url} does not exist") from None
    try:
        _refuse_special(url, os.fstat(fd).st_mode)
        if confinement is not None:
            confinement.check_real(_real_path_of(fd, target), url)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _real_path_of(fd: int, path: str) -> str:
    """Where the open descriptor really points (Linux); elsewhere, the path's real path now."""
    try:
        return os.readlink(f"{_PROC_FD}/{fd}")
    except OSError:
        return os.path.realpath(path)


def file_info(url: str, confinement: Confinement | None = None) -> dict:
    """{'type': 'file'|'directory', 'size'} of `url`; raises FileNotFoundError, SpecialFileError,
    or what the confinement raises."""
    target, local = _target(url, confinement)
    if not local:
        fs, path = fs_and_path(target)
        info = fs.info(path)
        kind = "directory" if info.get("type") == "directory" else "file"
        return {"type": kind, "size": int(info.get("size") or 0)}
    try:
        st = os.stat(target)
    except NotADirectoryError:
        raise FileNotFoundError(f"{url} does not exist") from None
    if stat.S_ISDIR(st.st_mode):
        return {"type": "directory", "size": 0}
    _refuse_special(url, st.st_mode)
    return {"type": "file", "size": st.st_size}


def exists(url: str, confinement: Confinement | None = None) -> bool:
    """Whether a regular file or folder that may be read exists at `url` (never raises)."""
    try:
        file_info(url, confinement)
    except (MarinLabError, OSError, ValueError):
        return False
    return True


def read_bounded(url: str, max_bytes: int, confinement: Confinement | None = None) -> bytes:
    """The whole file at `url`, refusing (FileTooLargeError) one larger than `max_bytes`."""
    with open_file(url, confinement) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileTooLargeError(f"{url} is larger than the {max_bytes} bytes read whole")
    return data


def read_record(url: str, confinement: Confinement | None = None, max_bytes: int = 16 * 1024 * 1024) -> bytes | None:
    """The store's reader shape (`marin_lab.store.reader.Reader`): the bytes at `url`, None when it
    does not exist, an OSError naming why when it may not or cannot be read."""
    try:
        return read_bounded(url, max_bytes, confinement)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except RefusedPathError as err:
        raise PermissionError(f"not read: {err}") from None
    except FileTooLargeError as err:
        raise OSError(f"cannot be read: {err}") from None
