"""How the store's parsers get bytes: a `Reader` is `read(url) -> bytes | None`.

None means there is no such file; an `OSError` means there is one that cannot be read (a folder, a
FIFO, a permission problem). The executor, `marin-lab` and gc pass `read_file` (any fsspec URL or
local path); the data browser passes its confined reader, so every reader of a record parses the
same bytes the same way. The executor reads a whole plan's statuses with `read_files`, which asks
an object store for all of them at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from marin_lab.io.fs import cat_many, read_bytes

Reader = Callable[[str], bytes | None]
ManyReader = Callable[[Sequence[str]], list[bytes | None | OSError]]
"""`Reader` over many URLs at once: each answer as `Reader` gives it, an `OSError` returned, not raised."""


def read_file(url: str) -> bytes | None:
    """The bytes at `url`, or None when there is no such file (or its folder is a file)."""
    try:
        return read_bytes(url)
    except (FileNotFoundError, NotADirectoryError):
        return None


def read_files(urls: Sequence[str]) -> list[bytes | None | OSError]:
    """`read_file` of each URL, concurrently on object stores (`cat_many`). Any other error than
    an `OSError` (a refused credential, say) is raised, as `read_file` raises it."""
    out: list[bytes | None | OSError] = []
    for got in cat_many(urls):
        if isinstance(got, FileNotFoundError | NotADirectoryError):
            out.append(None)
        elif isinstance(got, bytes | OSError):
            out.append(got)
        else:
            raise got
    return out
