"""The step record's one reader (execution/records.py), and the browser using execution's
explain and redaction instead of copies of its own."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.errors import RecordError
from marin_lab.execution.review.baseline import RecordIndex
from marin_lab.io.secrets import redact
from marin_lab.store.step_record import StepRecord, read_step_record
from tests.executor_steps import WriteConfig, write_text

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from browser_fixtures import SECRET_VALUE, build_prefix  # noqa: E402


def _step(text: str = "x") -> ExecutorStep:
    return ExecutorStep(
        name="records/a", fn=write_text, config=WriteConfig(output_path=this_output_path(), text=versioned(text))
    )


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("records")
    report = Executor(ExecutorMainConfig(prefix=str(prefix), backend="local")).run([_step()])
    return pathlib.Path(report.plan.steps[0].output_path)


def test_a_written_record_reads_typed_and_writes_back_the_same_bytes(done):
    raw = (done / ".executor_info").read_text()
    record = read_step_record(str(done))
    assert record.status == "SUCCESS" and record.attempts[0].status == "SUCCESS"
    assert record.status_history[-1].status == "SUCCESS" and record.manifest["count"] == 1
    assert record.timings.duration_s is not None and record.extra == {}
    assert json.dumps(record.to_json(), indent=2) + "\n" == raw
    assert read_step_record(str(done / ".executor_info")).identity == record.identity


def test_the_success_status_carries_what_the_step_wrote_for_the_graph(done):
    """The experiment page's graph reads statuses only: the files and bytes ride with SUCCESS."""
    status = json.loads((done / ".executor_status").read_text())
    record = read_step_record(str(done))
    assert status["status"] == "SUCCESS"
    assert (status["files"], status["bytes"]) == (record.manifest["count"], record.manifest["total_bytes"])
    assert status["files"] >= 1 and status["bytes"] > 0
    browser = Browser(str(done.parent.parent), Roots.of([str(done.parent.parent)]))
    exp_id = next((done.parent.parent / "experiments").glob("*.json")).stem
    row = next(r for r in browser.experiment(exp_id)["steps"] if r["name"] == "records/a")
    assert (row["files"], row["bytes"], row["error"]) == (status["files"], status["bytes"], None)


def test_unknown_fields_are_kept_and_written_back(done, tmp_path):
    data = json.loads((done / ".executor_info").read_text())
    data["from_the_future"] = {"x": 1}
    data["attempts"][0]["gpu_seconds"] = 3.5
    data["timings"]["queued"] = "2026-01-01T00:00:00Z"
    (tmp_path / ".executor_info").write_text(json.dumps(data))
    record = read_step_record(str(tmp_path))
    assert record.extra == {"from_the_future": {"x": 1}}
    assert record.attempts[0].extra == {"gpu_seconds": 3.5} and record.timings.extra["queued"]
    assert record.to_json() == data


def test_each_attempt_keeps_the_hardware_it_ran_on_and_writes_back_the_same_bytes(done, tmp_path):
    data = json.loads((done / ".executor_info").read_text())
    assert "hardware" not in data["attempts"][0]  # a local step's attempts name none: bytes as before
    ok = data["attempts"][0]

    def slice_of(*nodes: str) -> dict:
        return {
            "kind": "tpu",
            "type": "v4-16",
            "slices": 1,
            "hosts": 2,
            "slice_names": ["slice-0"],
            "nodes": [{"slice": "slice-0", "worker_id": i, "node_id": n} for i, n in enumerate(nodes)],
        }

    data["attempts"] = [
        {
            **ok,
            "attempt": 1,
            "kind": "preemption",
            "status": "FAILED",
            "error": "ActorDiedError",
            "hardware": slice_of("n0", "n1"),
        },
        {**ok, "attempt": 2, "kind": "failure", "status": "FAILED", "error": "ValueError"},  # lost before placing
        {**ok, "attempt": 3, "hardware": slice_of("n0", "n2"), "gpu_seconds": 3.5},
    ]
    data["hardware"] = slice_of("n0", "n2")
    raw = json.dumps(data, indent=2) + "\n"
    (tmp_path / ".executor_info").write_text(raw)
    record = read_step_record(str(tmp_path))
    assert [a.hardware and [n["node_id"] for n in a.hardware["nodes"]] for a in record.attempts] == [
        ["n0", "n1"],
        None,
        ["n0", "n2"],
    ]
    assert record.attempts[2].extra == {"gpu_seconds": 3.5} and record.hardware == record.attempts[2].hardware
    assert json.dumps(record.to_json(), indent=2) + "\n" == raw


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("attempts", "twice", "field 'attempts' is str"),
        ("attempts", [1], "field 'attempts[0]' is int"),
        ("attempts", [{"attempt": 1, "hardware": "v4-16"}], "field 'attempts[0].hardware' is str"),
        ("timings", [], "field 'timings' is list"),
        ("version", "v1", "field 'version' is str"),
        ("identity", 7, "field 'identity' is int"),
    ],
)
def test_a_corrupt_field_is_an_error_naming_the_file_and_the_field(done, tmp_path, field, value, named):
    data = json.loads((done / ".executor_info").read_text())
    data[field] = value
    (tmp_path / ".executor_info").write_text(json.dumps(data))
    with pytest.raises(RecordError) as err:
        read_step_record(str(tmp_path))
    message = str(err.value)
    assert message.startswith(f"{tmp_path}/.executor_info: ") and named in message
    assert "rerun the step" in message and len(message.splitlines()) == 1


def test_an_older_record_without_newer_fields_reads_with_defaults(tmp_path):
    older = {
        "schema": 1,
        "name": "old/a",
        "identity": "old/a-0000abcd",
        "status": "SUCCESS",
        "version": {"name": "old/a", "config": {"x": 1}, "dependencies": []},
        "status_history": [{"status": "SUCCESS", "time": "2025-01-01T00:00:00Z"}],
    }
    (tmp_path / ".executor_info").write_text(json.dumps(older))
    record = read_step_record(str(tmp_path))
    assert record.attempts == [] and record.code is None and record.manifest is None
    assert record.recency == "2025-01-01T00:00:00Z"
    assert read_step_record(str(tmp_path / "nothing-here")) is None


def test_a_record_without_a_schema_is_read_leniently_keeping_odd_fields(tmp_path):
    marin = {"name": "m/a", "fn_name": "pkg.fn", "dependencies": ["gs://b/x"], "attempts": "n/a"}
    record = StepRecord.from_json(marin, "marin/.executor_info")
    assert record.schema is None and record.dependencies == ["gs://b/x"]
    assert record.extra == {"fn_name": "pkg.fn", "attempts": "n/a"} and record.attempts == []


def test_a_damaged_success_record_reruns_the_step(done):
    prefix = done.parent.parent
    data = json.loads((done / ".executor_info").read_text())
    (done / ".executor_info").write_text(json.dumps({**data, "attempts": "garbage"}))
    report = Executor(ExecutorMainConfig(prefix=str(prefix), backend="local")).run([_step()])
    assert report.decisions[0].action == "run" and "field 'attempts'" in report.decisions[0].reason
    assert read_step_record(str(done)).attempts[-1].status == "SUCCESS"


def _versions(prefix: pathlib.Path, specs: list[tuple[str, str, str, str]]) -> None:
    """Records of `tok/docs` with (hash, tokenizer, started, ended)."""
    for h, tok, started, ended in specs:
        out = prefix / "tok" / f"docs-{h}"
        out.mkdir(parents=True)
        (out / ".executor_info").write_text(
            json.dumps(
                {
                    "schema": 1,
                    "name": "tok/docs",
                    "identity": f"tok/docs-{h}",
                    "status": "SUCCESS",
                    "version": {"name": "tok/docs", "config": {"tokenizer": tok}, "inputs": {}, "dependencies": []},
                    "timings": {"started": started, "ended": ended},
                }
            )
        )


def test_browser_and_explain_compare_with_the_same_previous_version(tmp_path):
    # b started after a but ended before it: "latest by end" and "latest by start" disagree.
    _versions(
        tmp_path,
        [
            ("aaaa0001", "gpt2", "2026-01-01T00:00:00Z", "2026-01-03T00:00:00Z"),
            ("aaaa0002", "llama3", "2026-01-02T00:00:00Z", "2026-01-02T01:00:00Z"),
            ("aaaa0003", "mistral", "2026-01-04T00:00:00Z", "2026-01-04T01:00:00Z"),
        ],
    )
    index = RecordIndex(str(tmp_path))
    browser = Browser(str(tmp_path), Roots.of([str(tmp_path)]))
    for h in ("aaaa0002", "aaaa0003"):
        mine = index.record(str(tmp_path / "tok" / f"docs-{h}"))
        expected = index.previous_version("tok/docs", mine.identity, mine.recency)
        shown = browser.step(str(tmp_path / "tok" / f"docs-{h}"))["explain"]
        assert shown["against"] == expected.identity
    # A step not run yet (the dry run, `marin-lab explain`) is compared with the latest started.
    assert index.previous_version("tok/docs", "tok/docs-ffff0000").identity == "tok/docs-aaaa0003"
    assert browser.step(str(tmp_path / "tok" / "docs-aaaa0003"))["explain"]["against"] == "tok/docs-aaaa0002"


def test_browser_redacts_exactly_like_the_record_writer(tmp_path):
    fx = build_prefix(tmp_path)
    browser = Browser(str(fx.prefix), Roots.of([str(fx.prefix)]))
    raw = json.loads((fx.raw / ".executor_info").read_text())
    shown = browser.step(str(fx.raw))["record"]
    assert shown == redact(raw) and SECRET_VALUE not in json.dumps(shown)
    assert shown["config"] == raw["config"]  # nothing but secrets changes
