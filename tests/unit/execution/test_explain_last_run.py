"""`marin-lab explain` compares with the same experiment's last run, not with a step of the same
name that another script recorded later; without a recorded run of the script it says so and
compares with the latest recorded version of each name."""

from __future__ import annotations

import os

import pytest

from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.cli import main as cli_main
from marin_lab.execution import ExecutorMainConfig
from marin_lab.execution.executor import Executor
from marin_lab.execution.main import capture_steps
from marin_lab.execution.record.experiments import list_experiments
from tests.conftest import REPO_ROOT

SCRIPT = """import sys
sys.path.insert(0, {root!r})
from marin_lab.execution import ExecutorStep, executor_main, this_output_path, versioned
from tests.executor_steps import WriteConfig, write_text

shared = ExecutorStep(name="shared/x", fn=write_text, config=WriteConfig(this_output_path(), versioned({text!r})))
if __name__ == "__main__":
    executor_main(steps=[shared])
"""


def _script(path, text):
    path.write_text(SCRIPT.format(root=REPO_ROOT, text=text))
    return str(path)


def _run(script, prefix):
    steps, _ = capture_steps(script)
    Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script=script).run(steps)


@pytest.mark.slow
def test_explain_compares_with_this_experiments_last_run(tmp_path, capsys):
    prefix = str(tmp_path / "store")
    exp_a = _script(tmp_path / "exp_a.py", "a1")
    _run(exp_a, prefix)
    _run(_script(tmp_path / "exp_b.py", "b1"), prefix)  # the latest 'shared/x' is now exp_b's
    _script(tmp_path / "exp_a.py", "a2")
    capsys.readouterr()
    assert cli_main(["explain", exp_a, "--prefix", prefix]) == 0
    out = capsys.readouterr().out
    assert "compared with this experiment's last run (exp_a-" in out
    assert "of this experiment's last run:" in out
    assert "text: 'a1' -> 'a2'" in out and "'b1'" not in out


def test_explain_without_a_recorded_run_of_the_script_says_what_it_compares_with(tmp_path, capsys):
    prefix = str(tmp_path / "store")
    _run(_script(tmp_path / "exp_a.py", "a1"), prefix)
    exp_c = _script(tmp_path / "exp_c.py", "c1")
    capsys.readouterr()
    assert cli_main(["explain", exp_c, "--prefix", prefix]) == 0
    out = capsys.readouterr().out
    assert (
        f"no earlier run of {exp_c} is recorded under {prefix}: each step is compared with the latest "
        "recorded version of its name, from any experiment"
    ) in out
    assert "differs from the latest recorded version shared/x-" in out and "text: 'a1' -> 'c1'" in out


def _three_runs(tmp_path):
    """exp_a ran with 'a1', then exp_b with 'b1' (the latest 'shared/x' is exp_b's); exp_a now says 'a2'."""
    prefix = str(tmp_path / "store")
    exp_a = _script(tmp_path / "exp_a.py", "a1")
    _run(exp_a, prefix)
    _run(_script(tmp_path / "exp_b.py", "b1"), prefix)
    _script(tmp_path / "exp_a.py", "a2")
    return prefix, exp_a


def _decision(script, prefix):
    steps, _ = capture_steps(script)
    executor = Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script=script)
    (decision,) = executor.decide(executor.plan(steps), executor.plan(steps).steps)
    return decision


@pytest.mark.slow
def test_the_dry_run_compares_a_new_step_with_this_experiments_last_run(tmp_path):
    prefix, exp_a = _three_runs(tmp_path)
    decision = _decision(exp_a, prefix)
    assert decision.action == "run"
    assert decision.reason.startswith("new version (this experiment's last run: shared/x-")
    assert decision.notes == ("text: 'a1' -> 'a2'",)
    # A script with no recorded run is compared with the latest version from any experiment, and says so.
    exp_c = _script(tmp_path / "exp_c.py", "c1")
    decision = _decision(exp_c, prefix)
    assert decision.reason.startswith("new version (latest recorded: shared/x-") and decision.notes == (
        "text: 'b1' -> 'c1'",
    )
    assert "from any experiment" not in decision.reason  # no run of exp_c at all: nothing else to compare with


@pytest.mark.slow
def test_a_step_the_last_run_did_not_have_is_compared_from_any_experiment(tmp_path):
    prefix, exp_a = _three_runs(tmp_path)
    exp_y = tmp_path / "exp_y.py"  # another experiment records 'shared/y'
    exp_y.write_text(SCRIPT.format(root=REPO_ROOT, text="y0").replace('"shared/x"', '"shared/y"'))
    _run(str(exp_y), prefix)
    path = tmp_path / "exp_a.py"  # exp_a gains 'shared/y', which its last run did not have
    path.write_text(
        path.read_text()
        .replace(
            "if __name__",
            'other = ExecutorStep(name="shared/y", fn=write_text, config=WriteConfig(this_output_path(), '
            'versioned("y1")))\nif __name__',
        )
        .replace("steps=[shared]", "steps=[shared, other]")
    )
    steps, _ = capture_steps(exp_a)
    executor = Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script=exp_a)
    plan = executor.plan(steps)
    by_name = {d.step.name: d for d in executor.decide(plan, plan.steps)}
    assert by_name["shared/x"].reason.startswith("new version (this experiment's last run: ")
    assert by_name["shared/x"].notes == ("text: 'a1' -> 'a2'",)
    assert by_name["shared/y"].reason.startswith("new version (latest recorded: shared/y-")
    assert by_name["shared/y"].reason.endswith(", from any experiment)")
    assert by_name["shared/y"].notes == ("text: 'y0' -> 'y1'",)


@pytest.mark.slow
def test_the_browser_explains_a_step_against_its_experiments_previous_run(tmp_path):
    prefix, exp_a = _three_runs(tmp_path)
    _run(exp_a, prefix)  # exp_a's second run, 'a2'
    browser = Browser(prefix, Roots.of([prefix]))
    identities: dict[str, list[str]] = {}  # script name -> the identities of 'shared/x' it recorded, newest first
    for listed in list_experiments(prefix):
        assert listed.record is not None and listed.record.script, listed.damage
        identities.setdefault(os.path.basename(listed.record.script), []).append(listed.steps[0]["identity"])
    a2, a1 = identities["exp_a.py"]
    (b1,) = identities["exp_b.py"]
    assert len({a1, a2, b1}) == 3
    explain = browser.step(f"{prefix}/{a2}")["explain"]
    assert explain["against"] == a1 and explain["last_run"].startswith("exp_a-") and explain["newer"] is False
    assert [(c["field"], c["old"], c["new"]) for c in explain["changes"]] == [("config.text", "a1", "a2")]
    # exp_b's only version has no earlier run of its own: it is compared with the latest other version, as before.
    other = browser.step(f"{prefix}/{b1}")["explain"]
    assert other["last_run"] is None and other["against"] == a1
