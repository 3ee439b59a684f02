"""The store's one status parser, fed bytes by any reader; the one status vocabulary."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from marin_lab.execution.state.status import write_status
from marin_lab.store.layout import CORRUPT, MISSING, SHOWN, Status
from marin_lab.store.status import listed_status, parse_status, read_step_status

MARIN_EVENTS = (
    b'{"date": "2025-01-01T00:00:01", "status": "RUNNING"}\n{"date": "2025-01-01T00:00:09", "status": "SUCCESS"}\n'
)


def _reader(files: dict[str, bytes]):
    return lambda url: files.get(url)


def test_the_parser_takes_bytes_from_any_reader():
    files = {
        "a/.executor_status": MARIN_EVENTS,
        "b/.executor_status": b'{"status": "SUCCESS"}',
        "b/.executor_info": b"{garbage",
        "c/.executor_info": json.dumps({"status": "FAILED"}).encode(),
    }
    read = _reader(files)
    assert read_step_status("a", read) == {"status": "SUCCESS", "time": "2025-01-01T00:00:09", "format": "marin"}
    damaged = read_step_status("b", read)
    assert damaged["status"] == CORRUPT and damaged["damage"].startswith("b/.executor_info: not valid JSON")
    assert read_step_status("c", read) is None and listed_status("c", read) == {"status": "FAILED"}
    assert read_step_status("d", read) is None and listed_status("d", read) == {"status": MISSING}


def test_a_marin_success_beside_a_damaged_record_is_corrupt_too():
    read = _reader({"a/.executor_status": b"SUCCESS\n", "a/.executor_info": b"[1, 2]"})
    st = read_step_status("a", read)
    assert st["status"] == CORRUPT and "a/.executor_info" in st["damage"]


def test_a_success_without_any_record_is_success():
    assert read_step_status("a", _reader({"a/.executor_status": b"SUCCESS"})) == {
        "status": "SUCCESS",
        "format": "marin",
    }


def test_an_unreadable_status_file_is_corrupt_naming_it():
    def read(url: str) -> bytes | None:
        raise PermissionError(13, "Permission denied")

    st = read_step_status("out", read)
    assert st == {
        "status": CORRUPT,
        "damage": "out/.executor_status: unreadable (PermissionError: [Errno 13] Permission denied)",
    }


@pytest.mark.parametrize(
    "raw,why",
    [
        (b"\xff", "not UTF-8 at byte 0"),
        (b"[1]", "not an object with a string"),
        (b"nope {", "neither JSON nor Marin's status format"),
    ],
)
def test_damaged_status_bytes_say_why(raw, why):
    st = parse_status(raw, "u")
    assert st["status"] == CORRUPT and st["damage"].startswith(f"u: {why}")


def test_lost_is_in_the_enum_but_never_a_latest_status(tmp_path):
    assert Status("LOST") is Status.LOST
    assert Status.LOST.value not in SHOWN and {MISSING, CORRUPT} <= set(SHOWN)
    with pytest.raises(ValueError, match="LOST is never a step's latest status"):
        write_status(str(tmp_path), Status.LOST)


ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_every_status_written_is_in_the_enum():
    """Each `StepOutcome(identity, "WORD"` and `StatusEvent("WORD"` spelled in the package names a
    Status; the browser page's list of statuses is the store's."""
    words = set()
    for path in (ROOT / "marin_lab").rglob("*.py"):
        text = path.read_text()
        words |= set(re.findall(r'StepOutcome\([^,()]+, "([A-Z_]+)"', text))
        words |= set(re.findall(r'status="([A-Z_]+)"', text))
    assert "LOST" in words and words <= {s.value for s in Status}, words - {s.value for s in Status}
    app = (ROOT / "marin_lab" / "browser" / "static" / "app.js").read_text()
    listed = re.search(r"const STATUSES = \[([^\]]*)\]", app)
    assert listed and sorted(json.loads(f"[{listed.group(1)}]")) == sorted(SHOWN)
