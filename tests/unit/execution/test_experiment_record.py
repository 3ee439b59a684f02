"""The experiment record has one parser (`marin_lab.store.experiment_record`), used by the writer
and by every reader; records written before it existed read and write back byte for byte."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.cli import main as cli_main
from marin_lab.execution import Executor, ExecutorMainConfig
from marin_lab.execution.record.experiments import list_experiments
from marin_lab.io.fs import write_json
from marin_lab.store.errors import RecordError
from marin_lab.store.experiment_record import ExperimentRecord, parse_experiment_record, read_experiment_record
from tests.executor_steps import five_step_dag

GOLDEN = Path(__file__).parents[2] / "golden" / "experiment_record_v1.json"
"""An experiment record as the executor wrote it before the typed record (a five-step run started
by `marin-lab launch`: it carries `run` and `launch`)."""


def test_a_record_written_before_reads_and_writes_back_the_same_bytes(tmp_path):
    raw = GOLDEN.read_bytes()
    record = parse_experiment_record(raw, str(GOLDEN))
    assert (record.schema, record.name, record.hash, record.run) == (1, "five", "147fcfbf", record.run)
    assert record.launch == {"run_id": "launch-1", "attempt": 0} and len(record.steps) == 5 and not record.extra
    out = tmp_path / "again.json"
    write_json(str(out), record.to_json())
    assert out.read_bytes() == raw


def test_the_executor_writes_the_fields_in_the_order_it_always_did(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["experiments/five.py"])
    result = Executor(
        ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local"), script="experiments/five.py"
    ).run(five_step_dag(log_path=str(tmp_path / "log")))
    written = json.loads(Path(result.experiment_path).read_text())
    golden = json.loads(GOLDEN.read_text())
    assert list(written) == [k for k in golden if k != "launch"]  # not launched: no `launch`
    assert [list(s) for s in written["steps"]] == [list(s) for s in golden["steps"]]
    assert read_experiment_record(result.experiment_path).to_json() == written


def test_unknown_fields_are_kept_and_an_old_record_without_schema_is_read_leniently():
    old = {"name": "old", "created": 7, "steps": [], "later": {"x": 1}}
    record = parse_experiment_record(json.dumps(old).encode(), "old.json")
    assert record.schema is None and record.created is None and record.extra == {"created": 7, "later": {"x": 1}}


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"\xff\xfe", "e.json: unreadable (UnicodeDecodeError: "),
        (b"{garbage", "e.json: unreadable (JSONDecodeError: "),
        (b"[]", "e.json: is list, not a JSON object"),
        (b'{"schema": 1, "steps": {}}', "e.json: field 'steps' is not a list"),
        (b'{"schema": 1}', "e.json: field 'steps' is not a list"),
        (b'{"schema": 1, "steps": [], "created": 5}', "e.json: field 'created' is int, expected a string; rerun"),
    ],
)
def test_damage_is_one_line_naming_the_file_and_field(raw, message):
    with pytest.raises(RecordError) as err:
        parse_experiment_record(raw, "e.json")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_the_cli_gc_and_the_browser_agree_on_a_damaged_record(tmp_path, capsys):
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "bad-12345678.json").write_text(json.dumps({"schema": 1, "name": "bad", "steps": {"a": 1}}))
    (folder / "good-87654321.json").write_text(json.dumps(ExperimentRecord(name="good", steps=[]).to_json()))
    listed = {e.url.rsplit("/", 1)[-1]: e.damage for e in list_experiments(str(tmp_path))}
    assert listed == {"bad-12345678.json": "`steps` is not a list", "good-87654321.json": None}
    cli_main(["status", str(tmp_path)])
    assert "CORRUPT experiment record: `steps` is not a list" in capsys.readouterr().out
    browser = Browser(str(tmp_path), Roots.of([str(tmp_path)]))
    states = {e["id"]: (e["state"], e["error"]) for e in browser.experiments()}
    assert states["good-87654321"] == ("ok", None)
    assert states["bad-12345678"][0] == "corrupt" and "field 'steps' is not a list" in states["bad-12345678"][1]
    page = browser.experiment("bad-12345678")
    assert page["state"] == "corrupt" and page["steps"] == []
