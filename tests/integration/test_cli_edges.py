"""The command line's rough edges, each now one behaviour or one clear line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request

import pytest

from marin_lab.cli import main as cli_main
from marin_lab.cluster.cli import main as cluster_main
from marin_lab.execution import Executor, ExecutorMainConfig
from marin_lab.execution.main import executor_main
from tests.conftest import REPO_ROOT
from tests.executor_steps import five_step_dag

CLUSTER = os.path.join(REPO_ROOT, "infra", "clusters", "us-west4.yaml")


@pytest.mark.parametrize(
    "flags", [["--dry_run"], ["--dry_run", "true"], ["--dry_run=true"], ["--dry_run", "--force_run_failed"]]
)
def test_experiment_boolean_flags_work_bare_and_with_a_value(tmp_path, capsys, flags):
    report = executor_main(steps=five_step_dag(), args=[*flags, "--prefix", str(tmp_path)])
    assert report.outcomes == {}  # a dry run: nothing ran
    assert "Plan: 5 steps" in capsys.readouterr().out


def test_a_bad_flag_value_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        executor_main(steps=five_step_dag(), args=["--dry_run", "maybe", "--prefix", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: bad command-line flag `dry_run`: Couldn't parse 'maybe' into a bool (see --help)"]


@pytest.mark.parametrize("flags", [["--dry_run"], ["--dry_run", "true"], ["--dry_run=yes"]])
def test_cluster_dry_run_takes_a_value_too(flags):
    lines: list[str] = []
    assert cluster_main(["render", "--config", CLUSTER, *flags], emit=lines.append) == 0
    assert "cluster_name" in "\\n".join(lines)


@pytest.mark.parametrize("with_infra", [False, True])
def test_cluster_render_writes_under_the_working_directory(tmp_path, monkeypatch, with_infra):
    monkeypatch.chdir(tmp_path)
    if with_infra:
        (tmp_path / "infra").mkdir()
    lines: list[str] = []
    assert cluster_main(["render", "--config", CLUSTER], emit=lines.append) == 0
    written = [p for p in tmp_path.rglob("*.yaml")]
    assert len(written) == 1 and written[0].parent == (tmp_path / "infra" if with_infra else tmp_path)
    assert cluster_main(["render", "--config", CLUSTER, "--ray_config", "elsewhere.yaml"], emit=lines.append) == 0
    assert (tmp_path / "elsewhere.yaml").exists()


def test_status_and_verify_default_to_the_prefix_and_take_relative_paths(tmp_path, monkeypatch, capsys):
    prefix = str(tmp_path / "store")
    report = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag())
    monkeypatch.setenv("MARIN_PREFIX", prefix)
    assert cli_main(["status"]) == 0
    assert "5 SUCCESS" in capsys.readouterr().out
    identity = report.plan.steps[0].identity
    monkeypatch.chdir(tmp_path)  # `raw/a-...` does not exist here: it is read under the prefix
    assert cli_main(["verify", identity]) == 0
    assert capsys.readouterr().out.startswith(f"{prefix}/{identity}: OK")
    monkeypatch.delenv("MARIN_PREFIX")
    assert cli_main(["verify", identity, "--prefix", prefix]) == 0


def test_explain_of_a_missing_file_is_one_line(tmp_path, capsys):
    assert cli_main(["explain", "experiments/nope.py", "--prefix", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: experiments/nope.py: no such experiment file")


def test_browse_on_a_port_in_use_is_one_line(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli_main(["browse", "--prefix", str(tmp_path), "--port", str(port)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: port {port} on 127.0.0.1 is in use (another browser?); pass --port N, or --port 0 for any free port"
    ]


def test_browse_port_0_prints_the_real_port(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "marin_lab.cli", "browse", "--prefix", str(tmp_path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    try:
        line = proc.stdout.readline()
        url = line.split()[2]
        assert not url.endswith(":0/"), line
        with urllib.request.urlopen(url + "api/health", timeout=60) as answer:
            assert answer.status == 200
    finally:
        proc.kill()
        proc.wait(timeout=30)
