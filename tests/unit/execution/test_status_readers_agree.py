"""`marin-lab status`, the executor, gc and the data browser read a step's status with one parser.

The prefix below holds the two cases that once split them: a step whose `.executor_status` is
Marin's JSON-lines event log ending in SUCCESS (done: Marin's outputs are reused), and a step whose
`{"status": "SUCCESS"}` sits beside a damaged `.executor_info` (CORRUPT: not done, run again).
"""

from __future__ import annotations

import json
import re

import pytest

from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.cli import main as cli_main
from marin_lab.execution.state.status import read_status
from marin_lab.store.layout import CORRUPT, MISSING, Status

MARIN_EVENTS = (
    '{"date": "2025-01-01T00:00:00", "status": "WAITING"}\n'
    '{"date": "2025-01-01T00:00:01", "status": "RUNNING"}\n'
    '{"date": "2025-01-01T00:00:09", "status": "SUCCESS"}\n'
)
EXPECTED = {
    "marin-events-aaaaaaaa": "SUCCESS",
    "damaged-info-bbbbbbbb": CORRUPT,
    "marin-word-cccccccc": "SUCCESS",
    "record-only-dddddddd": "FAILED",
    "never-run-eeeeeeee": MISSING,
}


@pytest.fixture
def prefix(tmp_path):
    steps = {name: tmp_path / name for name in EXPECTED}
    steps["marin-events-aaaaaaaa"].mkdir()
    (steps["marin-events-aaaaaaaa"] / ".executor_status").write_text(MARIN_EVENTS)
    steps["damaged-info-bbbbbbbb"].mkdir()
    (steps["damaged-info-bbbbbbbb"] / ".executor_status").write_text('{"status": "SUCCESS"}')
    (steps["damaged-info-bbbbbbbb"] / ".executor_info").write_text("{garbage")
    steps["marin-word-cccccccc"].mkdir()
    (steps["marin-word-cccccccc"] / ".executor_status").write_text("SUCCESS\n")
    steps["record-only-dddddddd"].mkdir()  # a record, no status file: listings show the record's status
    (steps["record-only-dddddddd"] / ".executor_info").write_text(json.dumps({"name": "r", "status": "FAILED"}))
    (tmp_path / "experiments").mkdir()
    record = {
        "name": "agree",
        "created": "2026-01-01T00:00:00",
        "steps": [
            {"name": name.rsplit("-", 1)[0], "identity": name, "output_path": str(path), "dependencies": []}
            for name, path in steps.items()
        ],
    }
    (tmp_path / "experiments" / "agree-12345678.json").write_text(json.dumps(record))
    return tmp_path


def _cli_statuses(prefix, capsys) -> dict[str, str]:
    cli_main(["status", str(prefix)])
    out = capsys.readouterr().out
    return {m.group(2): m.group(1) for m in re.finditer(r"^    (\S+)\s+(\S+-[0-9a-f]{8})$", out, re.M)}


def test_the_cli_and_the_browser_give_the_same_status_for_each_step(prefix, capsys):
    cli = _cli_statuses(prefix, capsys)
    browser = Browser(str(prefix), Roots.of([str(prefix)]))
    page = {row["identity"]: row["status"] for row in browser.experiment("agree-12345678")["steps"]}
    listed = {e["id"]: e["status_counts"] for e in browser.experiments()}
    assert cli == EXPECTED
    assert page == EXPECTED
    assert listed["agree-12345678"] == {"SUCCESS": 2, CORRUPT: 1, "FAILED": 1, MISSING: 1}
    for name, status in EXPECTED.items():
        assert browser.step(str(prefix / name))["status"] == status if status != MISSING else True


def test_the_executor_reads_what_listings_show(prefix):
    """The executor's answer (None: never started) is the listing's, except that a listing falls
    back to the step record's own status where no status file exists."""
    assert read_status(str(prefix / "marin-events-aaaaaaaa"))["status"] == Status.SUCCESS
    assert read_status(str(prefix / "damaged-info-bbbbbbbb"))["status"] == CORRUPT
    assert read_status(str(prefix / "record-only-dddddddd")) is None
    assert read_status(str(prefix / "never-run-eeeeeeee")) is None
