"""Step status: `.executor_status` holds the latest one; `.executor_info` holds the history."""

from __future__ import annotations

import datetime
import json
from typing import Any

from marin_lab.execution.errors import RecordError
from marin_lab.execution.records import read_step_record
from marin_lab.io.fs import read_bytes, write_json

# The layout and the vocabulary belong to the store; they are re-exported here for the executor.
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


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


status_path = status_url
info_path = info_url


def read_status(output_path: str) -> dict[str, Any] | None:
    """The latest status record, or None if the step never started.

    Outputs that Marin wrote are read too: its JSON-lines event log (the latest event wins) and its
    later one-word status; such records carry `"format": "marin"`. Damaged records never raise:
    a status file that cannot be read, or a SUCCESS beside a step record (`.executor_info`) that
    `records.read_step_record` rejects, is `{"status": "CORRUPT", "damage": "<what and where>"}`, so the step runs
    again instead of being reused on the word of a broken record or jamming every rerun.
    """
    url = status_path(output_path)
    try:
        data = read_bytes(url).decode("utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnicodeDecodeError as err:
        return _damaged(url, f"not UTF-8 at byte {err.start}")
    except OSError as err:  # a folder, a FIFO, a permission problem
        return _damaged(url, f"unreadable ({type(err).__name__}: {err})")
    try:
        parsed = json.loads(data)
    except (json.JSONDecodeError, RecursionError):
        parsed = parse_marin_status(data)
        return _damaged(url, "neither JSON nor Marin's status format") if parsed["status"] == CORRUPT else parsed
    if not isinstance(parsed, dict) or not isinstance(parsed.get("status"), str):
        return _damaged(url, "not an object with a string `status`")
    if parsed["status"] == Status.SUCCESS.value:
        # A SUCCESS is only as good as its record: a damaged one makes the step run again.
        try:
            read_step_record(output_path)
        except RecordError as err:
            return {"status": CORRUPT, "damage": str(err)}
    return parsed


def _damaged(url: str, why: str) -> dict[str, Any]:
    return {"status": CORRUPT, "damage": f"{url}: {why}"}


def parse_marin_status(text: str) -> dict[str, Any]:
    """Marin's `.executor_status`: JSON lines of events, or a single status word."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and lines[0].isupper() and lines[0].replace("_", "").isalpha():
        return {"status": lines[0], "format": "marin"}
    latest: dict[str, Any] | None = None
    for line in lines:
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            return {"status": CORRUPT}
        if isinstance(event, dict) and isinstance(event.get("status"), str):
            latest = event
    if latest is None:
        return {"status": CORRUPT}
    return {"status": latest["status"], "time": latest.get("date"), "format": "marin"}


def write_status(output_path: str, status: Status, *, durable: bool = False, **fields: Any) -> dict[str, Any]:
    """Write the latest status. Not flushed to disk unless `durable`: a status lost or torn by a
    power loss reads as an older status or CORRUPT, and the step runs again; what must survive
    (the full record before SUCCESS) is flushed by its writer."""
    record = {"status": status.value, "time": now_iso(), **fields}
    write_json(status_path(output_path), record, indent=None, durable=durable)
    return record
