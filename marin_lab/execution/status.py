"""Step status: `.executor_status` holds the latest one; `.executor_info` holds the history."""

from __future__ import annotations

import datetime
import enum
import json
from typing import Any

from marin_lab.io.fs import join, read_json, write_json

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
    """The latest status record, or None if the step never started (or the file is unreadable)."""
    try:
        data = read_json(status_path(output_path))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {"status": "CORRUPT"}
    return data if isinstance(data, dict) else {"status": "CORRUPT"}


def write_status(output_path: str, status: Status, **fields: Any) -> dict[str, Any]:
    record = {"status": status.value, "time": now_iso(), **fields}
    write_json(status_path(output_path), record, indent=None)
    return record
