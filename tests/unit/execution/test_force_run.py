"""`--force_run REGEX`: steps whose name matches run again after a SUCCESS, as a new attempt."""

from __future__ import annotations

import json

import pytest

from marin_lab.execution import ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.errors import ExecutorConfigError
from marin_lab.execution.executor import Executor
from marin_lab.execution.main import parse_flags
from marin_lab.execution.review.plan_report import plan_report
from marin_lab.store.step_record import read_step_record
from tests.executor_steps import WriteConfig, executions, fail, five_step_dag


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--force_run", "proc/b"], ["proc/b"]),
        (["--force_run=^raw/"], ["^raw/"]),
        (["--force_run", "a", "b", "--dry_run"], ["a", "b"]),
        (["--force_run", '["x", "y{2}"]'], ["x", "y{2}"]),
    ],
)
def test_force_run_flag_takes_regexes(argv, expected):
    assert parse_flags(argv).force_run == expected


def test_a_bad_force_run_regex_is_one_line():
    with pytest.raises(ExecutorConfigError, match=r"--force_run '\(' is not a valid regular expression"):
        parse_flags(["--force_run", "("])


@pytest.mark.slow
def test_forced_steps_run_again_and_are_shown_forced(tmp_path, capsys):
    log = str(tmp_path / "log")
    prefix = str(tmp_path / "store")
    Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(log))
    assert len(executions(log)) == 5

    plan = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(
        five_step_dag(log), dry_run=True, force_run=["^proc/b$"]
    )
    capsys.readouterr()
    by_name = {d.step.name: d for d in plan.decisions}
    assert by_name["proc/b"].action == "run" and by_name["proc/b"].forced
    assert by_name["proc/b"].reason.startswith("forced by --force_run (last SUCCESS at ")
    assert all(d.action == "skip" and not d.forced for n, d in by_name.items() if n != "proc/b")
    doc = plan_report(plan.decisions, prefix=prefix, backend="local", script=None)
    assert [s["name"] for s in doc["steps"] if s["forced"]] == ["proc/b"]
    assert len(executions(log)) == 5  # a dry run runs nothing

    report = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(
        five_step_dag(log), force_run=["^proc/b$"]
    )
    ran = executions(log)[5:]
    assert len(ran) == 1 and ran[0].endswith(by_name["proc/b"].step.output_path.rsplit("/", 1)[-1])
    ps = by_name["proc/b"].step
    assert report.outcomes[ps.identity].executed
    record = read_step_record(ps.output_path)
    assert [a.status for a in record.attempts] == ["SUCCESS", "SUCCESS"]  # a new attempt, history kept
    # The identity is the same: the next plain run reuses everything again.
    again = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(log), dry_run=True)
    assert {d.action for d in again.decisions} == {"skip"}


def test_force_run_also_reruns_a_failed_step(tmp_path):
    step = ExecutorStep(name="broken", fn=fail, config=WriteConfig(output_path=this_output_path(), text=versioned("x")))
    prefix = str(tmp_path / "store")
    Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run([step], raise_on_failure=False)
    (d,) = (
        Executor(ExecutorMainConfig(prefix=prefix, backend="local"))
        .run([step], dry_run=True, force_run=["broken"])
        .decisions
    )
    assert d.action == "run" and d.forced and "last FAILED" in d.reason


def test_force_run_matching_no_step_names_the_steps(tmp_path):
    with pytest.raises(ExecutorConfigError, match=r"--force_run \['nope'\] matches no step name; the steps are: raw/a"):
        Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run(
            five_step_dag(), dry_run=True, force_run=["nope"]
        )


@pytest.mark.slow
def test_executor_main_passes_force_run(tmp_path, capsys):
    from marin_lab.execution.main import executor_main

    prefix = str(tmp_path / "store")
    executor_main(steps=five_step_dag(), args=["--prefix", prefix, "--backend", "local"])
    capsys.readouterr()
    executor_main(
        steps=five_step_dag(), args=["--prefix", prefix, "--dry_run", "--format", "json", "--force_run", "join/"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert {s["name"]: s["action"] for s in doc["steps"] if s["forced"]} == {"join/d": "run"}
