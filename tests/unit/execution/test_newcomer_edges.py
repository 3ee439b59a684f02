"""Small things a newcomer trips on: flag typos, `status | head`, colour codes, grammar."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marin_lab.execution import ExecutorMainConfig, ExecutorStep, this_output_path
from marin_lab.execution.errors import ExecutorConfigError
from marin_lab.execution.executor import Executor
from marin_lab.execution.main import parse_flags
from marin_lab.io.text import strip_ansi
from marin_lab.processing.extract import html_to_text
from tests.conftest import REPO_ROOT
from tests.executor_steps import WriteConfig, fail, five_step_dag


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("--dry-run", "--dry_run"), ("--prefx", "--prefix"), ("--force-run-failed", "--force_run_failed")],
)
def test_a_flag_typo_names_the_real_flag(typo, meant):
    with pytest.raises(ExecutorConfigError, match=f"unknown flag {typo}; did you mean {meant}\\?"):
        parse_flags([typo, "true"])


def test_a_real_flag_still_parses():
    assert parse_flags(["--dry_run", "true", "--prefix", "/p"]).dry_run is True


@pytest.mark.slow
def test_status_into_a_closed_pipe_is_quiet(tmp_path):
    store = tmp_path / "store" / "experiments"
    store.mkdir(parents=True)
    for i in range(3):
        (store / f"x-{i:08x}.json").write_text('{"steps": [], "created": "now"}')
    script = (
        f"import sys; sys.argv = ['marin-lab', 'status', {str(tmp_path / 'store')!r}]; "
        "from marin_lab.cli import main; sys.exit(main())"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=REPO_ROOT),
    )
    proc.stdout.close()  # the reader went away before anything was written (as `| head -0` does)
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "BrokenPipeError" not in err and "Traceback" not in err, err


@pytest.mark.slow
def test_a_prefix_with_no_experiments_gets_one_line_then_none(tmp_path, caplog):
    prefix = str(tmp_path / "store")
    with caplog.at_level(logging.WARNING, logger="marin_lab.execution.executor"):
        Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(), dry_run=True)
    assert sum("holds no experiments: all 5 steps will run" in r.getMessage() for r in caplog.records) == 1
    Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="marin_lab.execution.executor"):
        Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(), dry_run=True)
    assert not any("holds no experiments" in r.getMessage() for r in caplog.records)


def test_plain_text_files_are_documents_as_they_are():
    text, title = html_to_text(b"# Notes\n\nThe heron   waits.\n\n\n\nThe end.\n", method="text")
    assert text == "# Notes\n\nThe heron   waits.\n\nThe end." and title == "Notes"


def test_failed_previously_says_what_the_error_was(tmp_path):
    step = ExecutorStep(name="broken", fn=fail, config=WriteConfig(output_path=this_output_path(), text="shard 3"))
    ex = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local"))
    ex.run([step], raise_on_failure=False)
    (decision,) = (
        Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local"))
        .run([step], dry_run=True)
        .decisions
    )
    assert decision.action == "fail"
    assert "raised ValueError: boom in shard 3); pass --force_run_failed" in decision.reason


def test_terminal_colour_codes_never_reach_a_record():
    assert strip_ansi("\x1b[36m(raw/x pid=1)\x1b[0m ValueError: \x1b[1mboom\x1b[0m") == "(raw/x pid=1) ValueError: boom"


def _coloured_failure(tmp_path):
    """A FAILED step whose record and status hold Ray's colour codes, as records written before
    errors were stripped (or by other tools) do."""
    import json

    from marin_lab.store.layout import info_url as info_path
    from marin_lab.store.layout import status_url as status_path

    step = ExecutorStep(name="coloured", fn=fail, config=WriteConfig(output_path=this_output_path(), text="x"))
    report = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local")).run(
        [step], raise_on_failure=False
    )
    (ps,) = report.plan.steps
    red = "\x1b[31mValueError: boom in x\x1b[0m"
    record = json.loads(Path(info_path(ps.output_path)).read_text())
    record["error"] = record["attempts"][0]["error"] = red
    Path(info_path(ps.output_path)).write_text(json.dumps(record))
    st = json.loads(Path(status_path(ps.output_path)).read_text())
    st["error"] = red
    Path(status_path(ps.output_path)).write_text(json.dumps(st))
    (tmp_path / "store" / ps.identity / "logs").mkdir(parents=True, exist_ok=True)
    (tmp_path / "store" / ps.identity / "logs" / "attempt-1.log").write_text(f"{red}\n")
    return step, ps


def test_colour_codes_are_taken_out_of_what_the_browser_and_the_plan_show(tmp_path):
    from marin_lab.browser.logs import read_log
    from marin_lab.browser.paths import Roots
    from marin_lab.browser.records import Browser

    step, ps = _coloured_failure(tmp_path)
    prefix = str(tmp_path / "store")
    shown = Browser(prefix, Roots.of([prefix])).step(ps.identity)
    assert shown["record"]["error"] == shown["record"]["attempts"][0]["error"] == "ValueError: boom in x"
    assert shown["status_file"]["value"]["error"] == "ValueError: boom in x"
    assert read_log(Roots.of([prefix]), ps.output_path)["text"] == "ValueError: boom in x\n"
    (decision,) = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run([step], dry_run=True).decisions
    assert "failed previously (ValueError: boom in x); pass --force_run_failed" in decision.reason


def test_a_failure_report_has_no_colour_codes():
    from marin_lab.execution.run.watch import failure_report

    err = ValueError("\x1b[31mboom\x1b[0m")
    err.traceback_text = "Traceback:\n  \x1b[1mFile x\x1b[0m\nValueError: boom"  # type: ignore[attr-defined]
    report = failure_report("s-1", 1, err, "/tmp/s-1")
    assert "\x1b" not in report and "FAILED after 1 attempt(s): boom" in report


def test_counts_of_one_are_singular():
    from marin_lab.execution.review.plan_report import to_markdown
    from marin_lab.processing.shards import ShardPolicy, bad_shards_message

    md = to_markdown(
        {
            "script": "x.py",
            "prefix": "/p",
            "backend": "local",
            "counts": {"run": 1},
            "totals": {},
            "steps": [],
            "unchecked_regions": [],
        }
    )
    assert "## Plan for `x.py`: 1 step (1 run)" in md
    report = [{"shard": "part-0", "attempts": [{"kind": "worker_died", "error": "gone"}]}]
    assert "tokenize: the one shard lost its worker on every attempt (worker_died)" in bad_shards_message(
        "tokenize", report, 1, ShardPolicy(), None
    )
