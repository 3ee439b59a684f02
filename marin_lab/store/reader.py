"""How the store's parsers get bytes: a `Reader` is `read(url) -> bytes | None`.

None means there is no such file; an `OSError` means there is one that cannot be read (a folder, a
FIFO, a permission problem). The executor, `marin-lab` and gc pass `read_file` (any fsspec URL or
local path); the data browser passes its confined reader, so every reader of a record parses the
same bytes the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from marin_lab.io.fs import read_bytes

Reader = Callable[[str], bytes | None]


def read_file(url: str) -> bytes | None:
    """The bytes at `url`, or None when there is no such file (or its folder is a file)."""
    try:
        return read_bytes(url)
    except (FileNotFoundError, NotADirectoryError):
        return None
