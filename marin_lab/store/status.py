"""The one parser of a step's status: `.executor_status` bytes, checked against `.executor_info`.

The executor (what to run), `marin-lab status`, `marin-lab gc` and the data browser all call
`read_step_status` / `listed_status`, each handing it a `Reader` (`store.reader`): the browser its
confined reader, the others `read_file`. What each case reads as:

| on disk                                                        | read as                      |
|----------------------------------------------------------------|------------------------------|
| no `.executor_status`                                          | None (never started); a listing shows the step record's status, CORRUPT if that record is damaged, else MISSING |
| our JSON object with a string `status`                         | that object                  |
| Marin's JSON-lines event log (`{"date", "status", ...}` a line) | the latest event, `"format": "marin"` |
| Marin's one-word status (`SUCCESS`)                            | that word, `"format": "marin"` |
| not UTF-8, unreadable, neither JSON nor Marin's, no `status`   | CORRUPT, `damage` names the file and why |
| SUCCESS (any format) beside an `.executor_info` the step record parser rejects | CORRUPT, `damage` names the record and field |

A SUCCESS is only as good as its record: the output is reused on its word, so a damaged record
makes the step run again rather than be reused. A SUCCESS with no record at all stays SUCCESS
(Marin's one-word outputs and outputs copied without their record are reused, as Marin would).
Nothing here raises for damage: a step with a broken record runs again instead of jamming a run.

`read_step_states` reads a whole plan the same way in two batches (every status, then the record of
every SUCCESS), so on an object store a rerun costs two round trips' worth of waiting rather than
two per step; each file is read once and the parsed record is handed back for the plan's other uses.
"""  # noqa: E501 (the table's rows)

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from marin_lab.io.fs import join
from marin_lab.store.errors import RecordError
from marin_lab.store.layout import CORRUPT, INFO_FILE, MISSING, STATUS_FILE, Status
from marin_lab.store.reader import ManyReader, Reader, read_file, read_files
from marin_lab.store.step_record import StepRecord, parse_step_record, read_step_record

__all__ = [
    "CORRUPT",
    "MISSING",
    "Status",
    "StepState",
    "listed_status",
    "parse_marin_status",
    "parse_status",
    "read_step_states",
    "read_step_status",
]


def parse_status(raw: bytes, url: str) -> dict[str, Any]:
    """The status file's bytes as a record (`{"status": ..., ...}`), or CORRUPT with `damage`.
    This checks the status file alone; `read_step_status` also checks a SUCCESS's step record."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return _damaged(url, f"not UTF-8 at byte {err.start}")
    try:
        parsed = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        marin = parse_marin_status(text)
        return _damaged(url, "neither JSON nor Marin's status format") if marin["status"] == CORRUPT else marin
    if not isinstance(parsed, dict) or not isinstance(parsed.get("status"), str):
        return _damaged(url, "not an object with a string `status`")
    return parsed


def parse_marin_status(text: str) -> dict[str, Any]:
    """Marin's `.executor_status`: JSON lines of events (the latest wins), or a single status word."""
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


def read_step_status(output_path: str, read: Reader = read_file) -> dict[str, Any] | None:
    """The latest status of the step at `output_path`, or None if it never started (no status
    file). Damage never raises: it is `{"status": "CORRUPT", "damage": "<file: what>"}` (see the
    module's table). This is what the executor decides on."""
    url = join(output_path, STATUS_FILE)
    try:
        raw: bytes | OSError | None = read(url)
    except OSError as err:  # a folder, a FIFO, a permission problem
        raw = err
    parsed = _status_of(raw, url)
    if parsed is not None and parsed["status"] == Status.SUCCESS.value:
        try:
            read_step_record(output_path, read)
        except RecordError as err:
            return {"status": CORRUPT, "damage": str(err)}
    return parsed


@dataclasses.dataclass(frozen=True)
class StepState:
    """What `read_step_states` read of one step."""

    status: dict[str, Any] | None
    """As `read_step_status` gives it."""
    record: StepRecord | None = None
    """The step record, parsed, when the status is SUCCESS and there is one (it was read to check it)."""


def read_step_states(output_paths: Sequence[str], read_many: ManyReader = read_files) -> list[StepState]:
    """`read_step_status` of every output path, in order, in two batches of reads: the statuses,
    then the records beside the SUCCESSes. Every case reads as `read_step_status` reads it."""
    status_urls = [join(p, STATUS_FILE) for p in output_paths]
    statuses = [_status_of(raw, url) for raw, url in zip(read_many(status_urls), status_urls, strict=True)]
    done = [i for i, st in enumerate(statuses) if st is not None and st["status"] == Status.SUCCESS.value]
    records: dict[int, StepRecord | None] = {}
    info_urls = [join(output_paths[i], INFO_FILE) for i in done]
    for i, raw, url in zip(done, read_many(info_urls), info_urls, strict=True):
        try:
            if isinstance(raw, OSError):  # as read_step_record words it
                raise RecordError(url, f"unreadable ({type(raw).__name__}: {raw})")
            records[i] = None if raw is None else parse_step_record(raw, url)
        except RecordError as err:
            statuses[i] = {"status": CORRUPT, "damage": str(err)}
    return [StepState(st, records.get(i)) for i, st in enumerate(statuses)]


def _status_of(raw: bytes | OSError | None, url: str) -> dict[str, Any] | None:
    if isinstance(raw, OSError):  # a folder, a FIFO, a permission problem
        return _damaged(url, f"unreadable ({type(raw).__name__}: {raw})")
    return None if raw is None else parse_status(raw, url)


def listed_status(output_path: str, read: Reader = read_file) -> dict[str, Any]:
    """The status a listing shows (`marin-lab status`, `gc`, the browser): `read_step_status`,
    else, with no status file, the step record's own status (CORRUPT with `damage` when the record
    is damaged), else MISSING."""
    status = read_step_status(output_path, read)
    if status is not None:
        return status
    try:
        record = read_step_record(output_path, read)
    except RecordError as err:
        return {"status": CORRUPT, "damage": str(err)}
    return {"status": record.status} if record is not None and record.status else {"status": MISSING}


def _damaged(url: str, why: str) -> dict[str, Any]:
    return {"status": CORRUPT, "damage": f"{url}: {why}"}
