"""Step status: `.executor_status` holds the latest one; `.executor_info` holds the history."""

from __future__ import annotations

import datetime
import enum
import json
from typing import Any

from marin_lab.io.fs import join, read_bytes, write_json

STATUS_FILE = ".executor_status"
INFO_FILE = ".executor_info"
LEASE_FILE = ".executor_lease"
RECORD_FILES = (STATUS_FILE, INFO_FILE, LEASE_FILE)


class Status(str, enum.Enum):
    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    DEP_FAILED = "DEP_FAILED"


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def status_path(output_path: str) -> str:
    return join(output_path, STATUS_FILE)


def info_path(output_path: str) -> str:
    return join(output_path, INFO_FILE)


def read_status(output_path: str) -> dict[str, Any] | None:
    """The latest status record, or None if the step never started (or the file is unreadable).

    Outputs that Marin wrote are read too: its JSON-lines event log (the latest event wins) and its
    later one-word status; such records carry `"format": "marin"`.
    """
    try:
        data = read_bytes(status_path(output_path)).decode("utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnicodeDecodeError:
        return {"status": "CORRUPT"}
    try:
        parsed = json.loads(data)
    except json.JSONDecodeError:
        return parse_marin_status(data)
    return parsed if isinstance(parsed, dict) else {"status": "CORRUPT"}


def parse_marin_status(text: str) -> dict[str, Any]:
    """Marin's `.executor_status`: JSON lines of events, or a single status word."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and lines[0].isupper() and lines[0].replace("_", "").isalpha():
        return {"status": lines[0], "format": "marin"}
    latest: dict[str, Any] | None = None
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return {"status": "CORRUPT"}
        if isinstance(event, dict) and isinstance(event.get("status"), str):
            latest = event
    if latest is None:
        return {"status": "CORRUPT"}
    return {"status": latest["status"], "time": latest.get("date"), "format": "marin"}


def write_status(output_path: str, status: Status, **fields: Any) -> dict[str, Any]:
    record = {"status": status.value, "time": now_iso(), **fields}
    write_json(status_path(output_path), record, indent=None)
    return record
