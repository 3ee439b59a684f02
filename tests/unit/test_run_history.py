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
    runs = list_runs(exp_path)
    assert [r["command_line"] for r in runs] == [["five.py", "--again"], ["five.py", "--first"]]  # newest first
    newest, oldest = runs
    assert oldest["counts"] == {"executed": 5} and oldest["outcome"] == "succeeded" and oldest["ended"]
    assert newest["counts"] == {"reused": 5}
    assert {s["outcome"] for s in oldest["steps"]} == {"executed"}
    # The files live where the store says.
    assert sorted(glob.glob(os.path.join(experiment_runs_dir(prefix, exp_id), "*.json"))) == sorted(
        r["_path"] for r in runs
    )
    # The experiment record is still the latest run's (compatibility), and names it.
    with open(exp_path) as f:
        index = json.load(f)
    assert index["command_line"] == ["five.py", "--again"] and index["run"] == newest["run"]

    # The browser lists the runs, and for each step the run that produced it: the first one.
    page = Browser(prefix, Roots.of([prefix])).experiment(exp_id)
    assert [r["run"] for r in page["runs"]] == [newest["run"], oldest["run"]]
    for row in page["steps"]:
        assert row["run"] == "reused"
        assert row["produced_by"]["run"] == oldest["run"], row
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
