"""`marin-lab rerun-shards`: a step FAILED for bad shards is run again through the executor from its
recorded script; only the bad shards run, the others keep their outputs, and it is SUCCESS only
when every shard is then done."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from marin_lab.cli import main as cli_main
from marin_lab.execution import Executor, ExecutorMainConfig
from marin_lab.execution.main import capture_steps
from marin_lab.execution.state.status import read_status
from marin_lab.processing.quarantine import REPORT_FILE, read_report

SCRIPT = textwrap.dedent("""
    import os

    from marin_lab.execution import ExecutorStep, executor_main, this_output_path, versioned
    from marin_lab.processing.quarantine import ShardPolicy
    from tests.bad_shard_steps import CopyShardsConfig, copy_shards

    step = ExecutorStep(name="copied/shards", fn=copy_shards, config=CopyShardsConfig(
        output_path=this_output_path(), shards=versioned(("s0", "s1", "s2", "s3")),
        poison_file=os.environ["POISON"], log_path=os.environ["SHARD_LOG"],
        shard_policy=ShardPolicy(retries=0, max_bad_shards=ALLOWED)))

    if __name__ == "__main__":
        executor_main(steps=[step])
""")


@pytest.fixture()
def experiment(tmp_path, monkeypatch):
    """(run, poison, ran): run(allowed) runs the experiment once; poison(*names) sets the failing
    shards; ran() lists the shards executed since the last call."""
    monkeypatch.setenv("POISON", str(tmp_path / "poison"))
    monkeypatch.setenv("SHARD_LOG", str(tmp_path / "ran.log"))
    prefix = str(tmp_path / "store")

    def poison(*names: str) -> None:
        (tmp_path / "poison").write_text("\n".join(names))

    def ran() -> list[str]:
        log = tmp_path / "ran.log"
        names = sorted(log.read_text().split()) if log.exists() else []
        log.unlink(missing_ok=True)
        return names

    def run(allowed: int = 0) -> str:
        script = tmp_path / "experiment.py"
        script.write_text(SCRIPT.replace("ALLOWED", str(allowed)))
        steps, _ = capture_steps(str(script))
        report = Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script=str(script)).run(
            steps, raise_on_failure=False
        )
        (ps,) = report.plan.steps
        return ps.output_path

    return run, poison, ran


def test_only_the_bad_shards_run_again_and_the_step_ends_success(experiment, capsys):
    run, poison, ran = experiment
    poison("s2")
    path = run()
    assert read_status(path)["status"] == "FAILED" and ran() == ["s0", "s1", "s2", "s3"]
    report = read_report(path)
    assert [b["shard"] for b in report["bad"]] == ["s2"] and report["rerun"] == f"marin-lab rerun-shards {path}"
    info = json.loads(Path(os.path.join(path, ".executor_info")).read_text())
    assert "copy_shards: 1 of 4 shards are bad" in json.dumps(info)  # the record names it too

    poison()  # the store answers again
    assert cli_main(["rerun-shards", path]) == 0
    out = capsys.readouterr().out
    assert "reran 1 bad shard(s): s2" in out and "SUCCESS (every shard done)" in out
    assert ran() == ["s2"]  # the finished shards were not run again
    assert read_status(path)["status"] == "SUCCESS" and not os.path.exists(os.path.join(path, REPORT_FILE))
    result = json.loads(Path(os.path.join(path, ".executor_info")).read_text())["result"]
    assert result["shards"] == 4 and result["reused"] == 3 and result["bad_shards"] == []
    assert sorted(os.listdir(os.path.join(path, "data"))) == sorted(
        [f"s{i}" for i in range(4)] + [f"s{i}.done" for i in range(4)]
    )


def test_a_rerun_allows_no_bad_shard_even_within_the_steps_allowance(experiment, capsys, tmp_path):
    """Allowance 1, two bad shards: FAILED. One comes back: the rerun is still FAILED (a rerun must
    finish every shard), naming the other. The original script deleted: the stored copy runs."""
    run, poison, ran = experiment
    poison("s1", "s3")
    path = run(allowed=1)
    assert read_status(path)["status"] == "FAILED"
    ran()
    poison("s3")
    (tmp_path / "experiment.py").unlink()
    assert cli_main(["rerun-shards", path]) == 1
    captured = capsys.readouterr()
    assert "reran 2 bad shard(s): s1, s3" in captured.out
    assert "FAILED" in captured.err and "still bad: s3" in captured.err
    assert ran() == ["s1", "s3"] and read_status(path)["status"] == "FAILED"
    poison()
    assert cli_main(["rerun-shards", path]) == 0
    assert ran() == ["s3"] and read_status(path)["status"] == "SUCCESS"


def test_what_cannot_be_rerun_is_one_line(experiment, capsys, tmp_path):
    run, poison, ran = experiment
    poison()
    path = run()
    assert cli_main(["rerun-shards", path]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {path} is SUCCESS, not FAILED: there are no bad shards to rerun"
    assert cli_main(["rerun-shards", str(tmp_path / "nowhere")]) == 1
    assert "no step status here" in capsys.readouterr().err


def _edit_report(path: str, bad: list) -> None:
    url = os.path.join(path, REPORT_FILE)
    report = json.loads(Path(url).read_text())
    report["bad"] = bad
    Path(url).write_text(json.dumps(report))


def test_a_report_whose_entries_are_not_objects_is_one_line_and_reruns_nothing(experiment, capsys):
    run, poison, ran = experiment
    poison("s2")
    path = run()
    ran()
    _edit_report(path, ["s2", 7])
    assert cli_main(["rerun-shards", path]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and REPORT_FILE in err and "bad[0] is str, not an object" in err, err
    assert ran() == [] and read_status(path)["status"] == "FAILED"


def test_a_shard_named_by_a_number_is_rerun_and_reported_in_one_line(experiment, capsys):
    run, poison, ran = experiment
    poison("s2")
    path = run()
    ran()
    _edit_report(path, [{"shard": 2, "error": "x"}])
    assert cli_main(["rerun-shards", path]) == 1  # the step still has a bad shard: FAILED again, said so
    captured = capsys.readouterr()
    assert "reran 1 bad shard(s): 2" in captured.out and "Traceback" not in captured.err
    assert "still bad: s2" in captured.err
    poison()
    _edit_report(path, [{"shard": 2}])
    assert cli_main(["rerun-shards", path]) == 0
    assert "reran 1 bad shard(s): 2" in capsys.readouterr().out and read_status(path)["status"] == "SUCCESS"
