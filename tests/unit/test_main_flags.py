"""executor_main's flags, parsed with draccus, and its errors (exit 1 with a message, nothing run)."""

import pytest

from marin_lab.execution.main import _normalize_run_only, executor_main
from tests.executor_steps import executions, five_step_dag


@pytest.mark.parametrize("argv,expected", [
    (["--run_only", "tok.*"], ["--run_only", "[tok.*]"]),
    (["--run_only", "[a,b]"], ["--run_only", "[a,b]"]),
    (["--run_only=raw/a"], ["--run_only=[raw/a]"]),
    (["--dry_run", "true"], ["--dry_run", "true"]),
])
def test_run_only_accepts_a_bare_regex(argv, expected):
    assert _normalize_run_only(argv) == expected


def test_dry_run_flag_prints_plan_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    log = str(tmp_path / "log")
    report = executor_main(five_step_dag(log_path=log), args=["--prefix", str(tmp_path / "p"), "--dry_run", "true",
                                                              "--run_only", "proc/b", "--backend", "local"])
    out = capsys.readouterr().out
    assert "2 run, 3 unselected" in out
    assert report.experiment_path is None and executions(log) == []


def test_prefix_defaults_to_env(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "from-env"))
    executor_main(five_step_dag(), args=["--dry_run", "true"])
    assert str(tmp_path / "from-env") in capsys.readouterr().out


def test_bad_flag_values_exit_1_with_message(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        executor_main(five_step_dag(), args=["--prefix", str(tmp_path), "--run_only", "(", "--dry_run", "true"])
    assert exit_info.value.code == 1
    assert "not a valid regular expression" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        executor_main(five_step_dag(), args=["--prefix", str(tmp_path), "--backend", "slurm", "--dry_run", "true"])
    assert "--backend 'slurm' is not known" in capsys.readouterr().err
