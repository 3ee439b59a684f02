"""executor_main's flags, parsed with draccus, and its errors (exit 1 with a message, nothing run)."""

import sys

import pytest

from marin_lab.execution import Executor, ExecutorConfigError, ExecutorMainConfig
from marin_lab.execution.main import executor_main, parse_flags
from tests.executor_steps import executions, five_step_dag


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--run_only", "tok.*"], ["tok.*"]),
        (["--run_only", "a", "b", "--dry_run", "true"], ["a", "b"]),
        (["--run_only", '["a", "b"]'], ["a", "b"]),
        (["--run_only=raw/a", "--run_only", "c"], ["raw/a", "c"]),
        # Regression: these went through draccus' YAML parser (ParserError, or re.compile(None) for null).
        (["--run_only", "ok/one-[0-9a-f]{8}"], ["ok/one-[0-9a-f]{8}"]),
        (["--run_only", "null"], ["null"]),
        (["--run_only", "[a-c]x"], ["[a-c]x"]),
        # A bracketed value is a list, in YAML's flow style too, as Marin's draccus reads it.
        (["--run_only", "[^a$]"], ["^a$"]),
        (["--run_only", "[a, b/c.*]"], ["a", "b/c.*"]),
        (["--dry_run", "true"], None),
    ],
)
def test_run_only_values_are_regexes_not_yaml(argv, expected):
    assert parse_flags(argv).run_only == expected


def test_a_bracketed_run_only_runs_the_steps_it_lists_as_in_marin(tmp_path):
    """Regression: Marin's `--run_only "[^a$]"` (a YAML list to draccus) was taken as one regex,
    a character class that matches no step name, and refused."""
    log = str(tmp_path / "log")
    executor_main(
        five_step_dag(log_path=log),
        args=["--prefix", str(tmp_path / "p"), "--run_only", "[^raw/a$]", "--backend", "local"],
    )
    (ran,) = executions(log)
    assert "/raw/a-" in ran


@pytest.mark.parametrize("bad", ["[x", "*ok", "("])
def test_bad_run_only_regex_is_one_clear_line(bad):
    with pytest.raises(ExecutorConfigError, match=r"--run_only .* is not a valid regular expression") as err:
        parse_flags(["--run_only", bad])
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_executor_info_base_path_flag(tmp_path, capsys, monkeypatch):
    # The experiment script is `__main__`'s file: pytest's own, or none in a pytest-xdist worker.
    script = tmp_path / "experiment.py"
    script.write_text("# an experiment script\n")
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(script), raising=False)
    info = tmp_path / "infos"
    report = executor_main(
        five_step_dag(),
        args=["--prefix", str(tmp_path / "p"), "--backend", "local", "--executor_info_base_path", str(info)],
    )
    assert report.experiment_path.startswith(str(info) + "/")
    assert [p.name for p in info.glob("*.json")] == [report.experiment_path.rsplit("/", 1)[1]]
    assert (info / "scripts").is_dir()  # the experiment script's text is stored beside its record


def test_executor_main_takes_a_config_as_marin_does(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["x.py", "--dry_run", "false"])  # ignored: the config is given
    config = ExecutorMainConfig(prefix=str(tmp_path / "p"), dry_run=True, run_only=["proc/b"], backend="local")
    report = executor_main(config, steps=five_step_dag())
    assert "2 run, 3 unselected" in capsys.readouterr().out and report.experiment_path is None


def test_dry_run_flag_prints_plan_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    log = str(tmp_path / "log")
    report = executor_main(
        five_step_dag(log_path=log),
        args=["--prefix", str(tmp_path / "p"), "--dry_run", "true", "--run_only", "proc/b", "--backend", "local"],
    )
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


def test_help_shows_each_flags_real_type(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_flags(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for shown in (
        "--dry_run bool",
        "--force_run_failed bool",
        "--max_concurrent [int]",
        "--lease_timeout_s float",
        "--max_failure_retries int",
        "--transfer_budget_bytes [int]",
        "--run_only [list[str]]",
        "--force_run [list[str]]",
        "--prefix PATH",
        "--executor_info_base_path PATH",
        "--format {text,markdown,json}",
        "--backend {ray,local}",
        "--ray_address ADDRESS",
        "--prices FILE",
    ):
        assert shown in out, shown
    # A path, an address or a choice is shown as what it is, never as a bare Python type.
    assert " [str]" not in out and not any(f"{flag} str" in out for flag in ("--prefix", "--format", "--backend"))


def test_a_metavar_changes_only_the_help(tmp_path):
    config = parse_flags(
        [
            "--prefix",
            str(tmp_path / "p"),
            "--format",
            "json",
            "--backend",
            "local",
            "--ray_address",
            "auto",
            "--prices",
            "prices.toml",
        ]
    )
    assert (config.prefix, config.format, config.backend, config.ray_address, config.prices) == (
        str(tmp_path / "p"),
        "json",
        "local",
        "auto",
        "prices.toml",
    )
    assert parse_flags([]).prefix is None


def test_the_executor_is_built_from_its_config(tmp_path, monkeypatch):
    prices = tmp_path / "prices.json"
    prices.write_text('{"prices": {"tpu-v5e": 9.5}, "currency": "EUR"}')
    config = ExecutorMainConfig(
        prefix=str(tmp_path / "p"),
        backend="local",
        max_concurrent=3,
        force_run_failed=True,
        force_run=["tok"],
        lease_timeout_s=5.0,
        max_preemption_retries=2,
        max_failure_retries=1,
        executor_info_base_path=str(tmp_path / "infos"),
        transfer_budget_bytes=7,
        unschedulable_timeout_s=11.0,
        prices=str(prices),
    )
    executor = Executor(config, description="d", script="x.py")
    assert (executor.prefix, executor.backend_name, executor.max_concurrent) == (str(tmp_path / "p"), "local", 3)
    assert executor.force_run_failed and executor.force_run == ["tok"]
    settings = executor.step_settings
    assert (
        settings.lease_timeout_s,
        settings.max_preemption_retries,
        settings.max_failure_retries,
        settings.unschedulable_timeout_s,
    ) == (5.0, 2, 1, 11.0)
    assert executor.executor_info_base_path == str(tmp_path / "infos")
    assert (executor.description, executor.script, executor.transfer_budget_bytes) == ("d", "x.py", 7)
    assert executor.prices.currency == "EUR"
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "env"))
    assert Executor(ExecutorMainConfig(backend="local")).prefix == str(tmp_path / "env")
