"""The browser's experiment answer carries the launched run's driver attempts and where their logs are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from marin_lab.browser.logs import read_log
from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.cluster.launch_state import LaunchRecordError, attempt_log_url, read_state, write_state


def test_an_experiment_written_by_a_launched_driver_lists_its_attempts(tmp_path):
    prefix = str(tmp_path)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "x-00000001.json").write_text(
        json.dumps({"name": "x", "steps": [], "launch": {"run_id": "x-1", "attempt": 2}})
    )
    write_state(
        prefix,
        {
            "run_id": "x-1",
            "status": "RUNNING",
            "max_restarts": 3,
            "attempts": [
                {"attempt": 1, "outcome": "died", "reason": "its host was lost", "node": "10.0.0.5", "pid": 7},
                {"attempt": 2, "outcome": "running", "node": "10.0.0.6"},
            ],
        },
    )
    for n in (1, 2):
        url = attempt_log_url(prefix, "x-1", n)
        (tmp_path / "launches" / "x-1" / "logs").mkdir(parents=True, exist_ok=True)
        Path(url).write_text(f"attempt {n} says hi\n")
    b = Browser(prefix, Roots.of([prefix]))
    launch = b.experiment("x-00000001")["launch"]
    assert launch["status"] == "RUNNING" and launch["restarts"] == 1 and launch["max_restarts"] == 3
    assert [a["outcome"] for a in launch["attempts"]] == ["died", "running"]
    assert "pid" not in launch["attempts"][0]
    log = read_log(b.roots, launch["log_path"], attempt=1)
    assert log["text"] == "attempt 1 says hi\n" and log["attempts"] == [1, 2]


def test_no_launch_and_a_missing_launch_record_are_said_plainly(tmp_path):
    prefix = str(tmp_path)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "a-00000001.json").write_text(json.dumps({"name": "a", "steps": []}))
    (tmp_path / "experiments" / "b-00000001.json").write_text(
        json.dumps({"name": "b", "steps": [], "launch": {"run_id": "gone-1"}})
    )
    b = Browser(prefix, Roots.of([prefix]))
    assert b.experiment("a-00000001")["launch"] is None
    gone = b.experiment("b-00000001")["launch"]
    assert gone["state"] == "missing" and gone["attempts"] == []


def test_a_damaged_launch_record_is_the_same_line_in_the_browser_and_launch_status(tmp_path):
    prefix = str(tmp_path)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "c-00000001.json").write_text(
        json.dumps({"name": "c", "steps": [], "launch": {"run_id": "c-1"}})
    )
    (tmp_path / "launches" / "c-1").mkdir(parents=True)
    (tmp_path / "launches" / "c-1" / "launch.json").write_text(
        json.dumps({"run_id": "c-1", "status": "RUNNING", "attempts": [{"attempt": "1"}]})
    )
    with pytest.raises(LaunchRecordError) as err:
        read_state(prefix, "c-1")
    assert "is damaged: attempts[0] is not an object with an integer `attempt`" in str(err.value)
    launch = Browser(prefix, Roots.of([prefix])).experiment("c-00000001")["launch"]
    assert launch["state"] == "corrupt" and launch["error"] == str(err.value) and launch["attempts"] == []
