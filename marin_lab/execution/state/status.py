"""Writing a step's status: `.executor_status` holds the latest one; `.executor_info` the history.

Reading it is the store's (`marin_lab.store.status`, one parser for every reader); `read_status`
and the layout names are re-exported here for the executor's modules.
"""

from __future__ import annotations

import datetime
from typing import Any

from marin_lab.io.fs import write_json
from marin_lab.store.layout import (  # noqa: F401
    CORRUPT,
    INFO_FILE,
    LEASE_FILE,
    RECORD_FILES,
    STATUS_FILE,
    Status,
    info_url,
    status_url,
)
from marin_lab.store.status import read_step_status as read_status  # noqa: F401


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


def write_status(output_path: str, status: Status, *, durable: bool = False, **fields: Any) -> dict[str, Any]:
    """Write the latest status. Not flushed to disk unless `durable`: a status lost or torn by a
    power loss reads as an older status or CORRUPT, and the step runs again; what must survive
    (the full record before SUCCESS) is flushed by its writer."""
    if status is Status.LOST:
        raise ValueError("LOST is never a step's latest status: it describes an attempt or an outcome")
    record = {"status": status.value, "time": now_iso(), **fields}
    write_json(status_url(output_path), record, indent=None, durable=durable)
    return record
