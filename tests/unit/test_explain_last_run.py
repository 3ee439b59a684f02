"""`marin-lab explain` compares with the same experiment's last run, not with a step of the same
name that another script recorded later; without a recorded run of the script it says so and
compares with the latest recorded version of each name."""

from __future__ import annotations

from marin_lab.cli import main as cli_main
from marin_lab.execution.executor import Executor
from marin_lab.execution.main import capture_steps
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
    Executor(prefix, backend="local", script=script).run(steps)


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
    assert (f"no earlier run of {exp_c} is recorded under {prefix}: each step is compared with the latest "
            "recorded version of its name, from any experiment") in out
    assert "differs from the latest recorded version shared/x-" in out and "text: 'a1' -> 'c1'" in out
