"""A versioned local path that does not exist is named by the dry run and the plan (step, field,
path, what to do), instead of failing later inside the step."""

from __future__ import annotations

import dataclasses
import json

from marin_lab.execution import ExecutorMainConfig, ExecutorStep, executor_main, this_output_path, versioned
from marin_lab.execution.executor import Executor


@dataclasses.dataclass(frozen=True)
class ReadConfig:
    source: str
    extra: list
    output_path: str


def read_source(cfg: ReadConfig) -> None:
    raise AssertionError("a dry run runs nothing")


def _step(source: str, extra: list | None = None) -> ExecutorStep:
    return ExecutorStep(
        name="raw/docs",
        fn=read_source,
        config=ReadConfig(source=versioned(source), extra=versioned(extra or []), output_path=this_output_path()),
    )


def test_the_dry_run_names_a_missing_local_source(tmp_path, capsys):
    """Regression: the dry run of a step whose local source folder did not exist said nothing about it."""
    missing = str(tmp_path / "corpus")
    Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local")).run([_step(missing)], dry_run=True)
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines() if "does not exist" in line]
    assert lines == [
        f"step 'raw/docs': field 'source' names the local path {missing!r}, which does not exist; "
        "create it or fix the path before running"
    ], out


def test_the_json_plan_names_missing_paths_inside_lists_too(tmp_path, capsys):
    present = tmp_path / "present"
    present.mkdir()
    (present / "a.txt").write_text("a")
    missing = f"file://{tmp_path}/gone"
    executor_main(
        [_step(str(present), extra=[str(present), missing])],
        args=["--prefix", str(tmp_path / "store"), "--dry_run", "true", "--backend", "local", "--format", "json"],
    )
    plan = json.loads(capsys.readouterr().out)
    (step,) = plan["steps"]
    missing_notes = [c for c in step["changes"] if "does not exist" in c]
    assert missing_notes == [
        f"step 'raw/docs': field 'extra[1]' names the local path {missing!r}, which does not exist; "
        "create it or fix the path before running"
    ]


def test_present_sources_and_names_that_are_not_paths_say_nothing(tmp_path, capsys):
    (tmp_path / "corpus").mkdir()
    Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local")).run(
        [_step(str(tmp_path / "corpus"), ["gpt2"])], dry_run=True
    )
    assert "does not exist" not in capsys.readouterr().out
