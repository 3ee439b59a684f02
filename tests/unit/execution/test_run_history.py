"""Every run is kept: each run of an experiment has its own record; a no-op rerun never hides the
run that did the work (the experiment record, `marin-lab status` and the browser)."""

from __future__ import annotations

import glob
import json
import os
import sys

import pytest

from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.cli import main as cli_main
from marin_lab.execution import Executor, ExecutorMainConfig
from marin_lab.execution.record.experiments import list_runs
from marin_lab.execution.review.decide import decide_one
from marin_lab.execution.state.status import Status, write_status
from marin_lab.store.layout import experiment_runs_dir, run_record_name
from tests.executor_steps import five_step_dag


def _run(prefix, log, argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", argv)
    return Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script="experiments/five.py").run(
        five_step_dag(log_path=log)
    )


@pytest.mark.slow
def test_each_run_keeps_its_record_and_a_noop_rerun_hides_nothing(tmp_path, monkeypatch, capsys):
    prefix, log = str(tmp_path / "store"), str(tmp_path / "exec.log")
    first = _run(prefix, log, ["five.py", "--first"], monkeypatch)
    second = _run(prefix, log, ["five.py", "--again"], monkeypatch)
    assert len(first.executed) == 5 and second.executed == []

    exp_path = first.experiment_path
    assert exp_path == second.experiment_path
    exp_id = os.path.basename(exp_path)[: -len(".json")]
    listed = list_runs(exp_path)
    runs = [r.record for r in listed]
    assert [r.command_line for r in runs] == [["five.py", "--again"], ["five.py", "--first"]]  # newest first
    newest, oldest = runs
    assert oldest.counts == {"executed": 5} and oldest.outcome == "succeeded" and oldest.ended
    assert newest.counts == {"reused": 5}
    assert {s["outcome"] for s in oldest.steps} == {"executed"}
    # The files live where the store says, and read back as the bytes the writer wrote.
    assert sorted(glob.glob(os.path.join(experiment_runs_dir(prefix, exp_id), "*.json"))) == sorted(
        r.url for r in listed
    )
    with open(listed[1].url) as f:
        assert json.load(f) == oldest.to_json()
    # The experiment record is still the latest run's (compatibility), and names it.
    with open(exp_path) as f:
        index = json.load(f)
    assert index["command_line"] == ["five.py", "--again"] and index["run"] == newest.run

    # The browser lists the runs, and for each step the run that produced it: the first one.
    page = Browser(prefix, Roots.of([prefix])).experiment(exp_id)
    assert [r["run"] for r in page["runs"]] == [newest.run, oldest.run]
    for row in page["steps"]:
        assert row["run"] == "reused"
        assert row["produced_by"]["run"] == oldest.run, row
        assert row["produced_by"]["command_line"] == ["five.py", "--first"]

    # marin-lab status shows the runs briefly.
    capsys.readouterr()
    cli_main(["status", prefix])
    out = capsys.readouterr().out
    assert "runs (newest first):" in out and "succeeded (5 reused)" in out and "succeeded (5 executed)" in out


def test_run_record_names_sort_by_time():
    a = run_record_name("2026-01-02T03:04:05.678+00:00", "aaaa1111")
    b = run_record_name("2026-01-02T03:04:06.000+00:00", "0000ffff")
    assert a == "20260102T030405-aaaa1111.json" and a < b


def test_a_cancelled_step_runs_again_without_a_flag(tmp_path):
    ps = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).plan(five_step_dag()).steps[0]
    write_status(ps.output_path, Status.CANCELLED)
    decision = decide_one(
        ps,
        {"status": "CANCELLED", "time": "T"},
        lease=lambda p: None,  # type: ignore[arg-type]
        force_run_failed=False,
        index=None,
    )
    assert decision.action == "run" and "CANCELLED" in decision.reason and "checkpoint" in decision.reason


def test_the_cli_and_the_browser_read_run_records_with_one_parser(tmp_path):
    prefix = str(tmp_path / "store")
    runs = experiment_runs_dir(prefix, "five-12345678")
    os.makedirs(runs)
    exp = os.path.join(prefix, "experiments", "five-12345678.json")
    with open(exp, "w") as f:
        json.dump({"schema": 1, "steps": []}, f)
    good = {
        "schema": 1,
        "run": "aaaa1111",
        "started": "2026-01-02T03:04:05",
        "outcome": "succeeded",
        "counts": "five",
        "steps": [{"identity": "a-1", "outcome": "executed"}, "not an entry"],
    }
    files = {"20260102T030405-aaaa1111.json": json.dumps(good), "20260103T000000-bbbb2222.json": "[1, 2]"}
    for name, text in files.items():
        with open(os.path.join(runs, name), "w") as f:
            f.write(text)
    damaged, ok = list_runs(exp)
    assert damaged.record is None and damaged.damage == "is list, not a JSON object"
    # A field of the wrong type is read as absent and kept aside; a step entry that is no object is left out.
    assert ok.record.counts == {} and ok.record.extra == {"counts": "five"} and ok.record.executed == ["a-1"]
    page = Browser(prefix, Roots.of([prefix])).runs("five-12345678")
    assert page[0]["state"] == "corrupt" and page[0]["error"] == f"{damaged.url}: {damaged.damage}"
    assert (page[1]["counts"], page[1]["executed"], page[1]["outcome"]) == ({}, ["a-1"], "succeeded")
