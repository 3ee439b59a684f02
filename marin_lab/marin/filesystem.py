"""Marin's storage helpers (`rigging.filesystem`), over marin_lab's `marin_lab.io.fs`.

`open_url(url, mode)` opens a local path or an object-store URL; `url_to_fs(url)` gives its
fsspec filesystem and path; `marin_prefix()`, `marin_region()` and `prefix_join(prefix, rel)` as in
`marin_lab.marin.step_spec`.
"""

from __future__ import annotations

from typing import Any

import fsspec

from marin_lab.io.fs import fs_and_path
from marin_lab.marin.step_spec import marin_prefix, marin_region, prefix_join

__all__ = ["marin_prefix", "marin_region", "open_url", "prefix_join", "url_to_fs"]


def open_url(url: str, mode: str = "r", **kwargs: Any) -> Any:
    """An open file at `url` (parent folders made when writing a local file)."""
    if "w" in mode or "a" in mode:
        kwargs.setdefault("auto_mkdir", True)
    return fsspec.open(url, mode, **kwargs).open()


def url_to_fs(url: str, **_options: Any) -> tuple[Any, str]:
    """(the fsspec filesystem, the path within it) for `url`."""
    return fs_and_path(url)
