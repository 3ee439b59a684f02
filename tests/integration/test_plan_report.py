"""The dry run as a reviewer reads it: Markdown and JSON plans, and the quickstart's against a golden file."""

from __future__ import annotations

import json
import os
import re

import pytest

from marin_lab.execution import Executor, ExecutorConfigError, ExecutorMainConfig
from marin_lab.execution.main import capture_steps, executor_main
from tests.conftest import REPO_ROOT
from tests.executor_steps import five_step_dag

GOLDEN = os.path.join(REPO_ROOT, "tests", "golden", "quickstart_plan.md")


def test_markdown_and_json_plans_say_what_runs_what_is_reused_and_what_changed(tmp_path, capsys):
    prefix = str(tmp_path / "store")
    Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(), run_only=["^proc/b$"])
    capsys.readouterr()
    executor_main(steps=five_step_dag(), args=["--prefix", prefix, "--dry_run", "true", "--format", "json"])
    plan = json.loads(capsys.readouterr().out)
    actions = {s["name"]: s["action"] for s in plan["steps"]}
    assert actions == {"raw/a": "skip", "proc/b": "skip", "proc/c": "run", "join/d": "run", "final/e": "run"}
    assert plan["counts"] == {"skip": 2, "run": 3}
    executor_main(steps=five_step_dag(text="A"), args=["--prefix", prefix, "--dry_run", "true", "--format", "markdown"])
    markdown = capsys.readouterr().out
    assert markdown.startswith("## Plan for ")
    assert "| run | `raw/a-" in markdown
    assert "### What changed against earlier versions" in markdown
    assert re.search(r"- text: 'a' -> 'A'", markdown), markdown


def test_unknown_format_is_one_clear_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        executor_main(steps=five_step_dag(), args=["--prefix", str(tmp_path), "--dry_run", "true", "--format", "yaml"])
    err = capsys.readouterr().err.strip()
    assert err == "error: --format 'yaml' is not known; use one of: text, markdown, json"
    with pytest.raises(ExecutorConfigError):
        Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run(
            five_step_dag(), dry_run=True, plan_format="yaml"
        )


def normalized(markdown: str) -> str:
    """Without what legitimately differs between machines: the prefix, hashes, CPU counts."""
    markdown = re.sub(r"-[0-9a-f]{8}\b", "-HASH", markdown)
    markdown = re.sub(r"Prefix `[^`]*`", "Prefix `PREFIX`", markdown)
    return re.sub(r"num_cpus=\d+", "num_cpus=N", markdown)


@pytest.mark.slow
def test_quickstart_markdown_plan_matches_the_golden_file(tmp_path, capsys):
    script = os.path.join(REPO_ROOT, "experiments", "quickstart.py")
    steps, _ = capture_steps(script)
    Executor(ExecutorMainConfig(prefix=str(tmp_path / "store")), script=os.path.relpath(script, REPO_ROOT)).run(
        steps, dry_run=True, plan_format="markdown"
    )
    got = normalized(capsys.readouterr().out)
    if os.environ.get("MARIN_UPDATE_GOLDEN"):
        with open(GOLDEN, "w") as f:
            f.write(got)
    with open(GOLDEN) as f:
        assert got == f.read(), "the quickstart's plan changed: if on purpose, rerun with MARIN_UPDATE_GOLDEN=1"
