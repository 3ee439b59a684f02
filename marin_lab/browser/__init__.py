"""The data browser: a read-only web view of experiments, step records, lineage and data.

Start it with `marin-lab browse --prefix P` or `marin_lab.browser.serve(prefix)`. The server
(and aiohttp) is imported on first use, so the readers in this package stay cheap to import.
"""

from __future__ import annotations

from typing import Any

__all__ = ["main", "make_app", "serve", "start_in_thread"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from marin_lab.browser import server

        return getattr(server, name)
    raise AttributeError(f"module 'marin_lab.browser' has no attribute {name!r}")
