"""A damaged record is shown as damaged and treated as not done: never a traceback, never a jam."""

from __future__ import annotations

import json
import pathlib

import pytest

from marin_lab.cli import main as cli_main
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.errors import RecordError
from marin_lab.execution.state.status import CORRUPT, read_status
from marin_lab.processing.shards import done_marker, mark_shard_done, read_shard_done
from marin_lab.store.step_record import read_step_record
from tests.executor_steps import WriteConfig, write_text

GARBAGE = {
    "not_json": b"{garbage",
    "not_utf8": b"\xff\xfe{}",
    "wrong_type": b'{"status": 17}',
    "not_an_object": b"[1, 2]",
    "deeply_nested": b"[" * 100_000,
}


def _step(workers: int = 1) -> ExecutorStep:
    return ExecutorStep(
        name="damaged/a",
        fn=write_text,
        config=WriteConfig(output_path=this_output_path(), text=versioned("x"), workers=workers),
    )


@pytest.fixture
def done_step(tmp_path):
    report = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run([_step()])
    return tmp_path, pathlib.Path(report.plan.steps[0].output_path)


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_damaged_status_file_reads_as_corrupt_naming_the_file(tmp_path, kind):
    (tmp_path / ".executor_status").write_bytes(GARBAGE[kind])
    st = read_status(str(tmp_path))
    assert st["status"] == CORRUPT and ".executor_status" in st["damage"]


@pytest.mark.parametrize("kind", ["not_json", "not_utf8", "not_an_object", "deeply_nested"])
def test_success_beside_a_damaged_record_is_not_done(tmp_path, kind):
    (tmp_path / ".executor_status").write_text('{"status": "SUCCESS"}')
    (tmp_path / ".executor_info").write_bytes(GARBAGE[kind])
    st = read_status(str(tmp_path))
    assert st["status"] == CORRUPT and ".executor_info" in st["damage"]
    with pytest.raises(RecordError) as err:
        read_step_record(str(tmp_path))
    assert str(err.value) == st["damage"]


@pytest.mark.slow
def test_garbage_record_and_status_do_not_jam_the_step(done_step):
    prefix, out = done_step
    (out / ".executor_info").write_text("{garbage")
    (out / ".executor_status").write_text("{garbage")
    report = Executor(ExecutorMainConfig(prefix=str(prefix), backend="local")).run([_step()])
    (decision,) = report.decisions
    assert decision.action == "run" and "damaged" in decision.reason and ".executor_status" in decision.reason
    assert report.executed and json.loads((out / ".executor_info").read_text())["status"] == "SUCCESS"
    again = Executor(ExecutorMainConfig(prefix=str(prefix), backend="local")).run([_step()])
    assert again.decisions[0].action == "skip" and not again.executed


@pytest.mark.slow
def test_success_with_damaged_record_and_changed_unversioned_field_runs_again(done_step):
    prefix, out = done_step
    (out / ".executor_info").write_text("{garbage")
    report = Executor(ExecutorMainConfig(prefix=str(prefix), backend="local")).run([_step(workers=2)])
    assert report.decisions[0].action == "run" and ".executor_info" in report.decisions[0].reason
    assert report.executed and read_step_record(str(out)).status == "SUCCESS"


def _write_experiment(prefix: pathlib.Path, name: str, content: bytes) -> None:
    (prefix / "experiments").mkdir(parents=True, exist_ok=True)
    (prefix / "experiments" / name).write_bytes(content)


@pytest.mark.slow
def test_status_command_shows_damaged_experiments_and_steps(done_step, capsys):
    prefix, out = done_step
    _write_experiment(prefix, "garbage-00000001.json", b"{garbage")
    _write_experiment(prefix, "notalist-00000002.json", b'{"steps": {"a": 1}}')
    _write_experiment(
        prefix,
        "fields-00000003.json",
        json.dumps({"steps": [{"name": "x"}, 5, {"identity": "damaged/a-x", "output_path": str(out)}]}).encode(),
    )
    (out / ".executor_status").write_text('{"status": 17}')
    capsys.readouterr()
    assert cli_main(["status", str(prefix)]) == 1
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err
    lines = printed.out.splitlines()
    assert any("garbage-00000001.json" in line and "CORRUPT experiment record" in line for line in lines)
    assert any("notalist-00000002.json" in line and "`steps` is not a list" in line for line in lines)
    assert "steps[0] has no output_path" in printed.out and "steps[1] has no output_path" in printed.out
    assert "not an object with a string `status`" in printed.out
    assert not any("0 steps" in line for line in lines)


@pytest.mark.parametrize(
    "content, says",
    [
        (b"{garbage", "not valid JSON"),
        (b"\xff", "not UTF-8"),
        (b"[1]", "not a JSON object"),
        (b'{"manifest": {"files": "x"}}', "recorded manifest is damaged"),
        (b'{"manifest": {"files": [{"path": "a", "size": "big"}]}}', "files[0] (a)"),
    ],
)
def test_verify_names_a_damaged_record_without_a_traceback(tmp_path, capsys, content, says):
    (tmp_path / ".executor_info").write_bytes(content)
    assert cli_main(["verify", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err and ".executor_info" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["not_json", "not_utf8", "not_an_object", "deeply_nested"])
def test_damaged_shard_marker_means_redo_the_shard(tmp_path, kind):
    out = str(tmp_path / "part-0.jsonl.gz")
    mark_shard_done(out, {"read": 3})
    assert read_shard_done(out) == {"read": 3}
    pathlib.Path(done_marker(out)).write_bytes(GARBAGE[kind])
    assert read_shard_done(out) is None
