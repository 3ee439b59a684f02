"""`marin-lab gc`: lists unreferenced, failed, abandoned and scratch outputs with sizes; deletes only
with --yes; never a running step (live lease) or a referenced SUCCESS."""

from __future__ import annotations

import json
import os
import time

import pytest

from marin_lab.cli import main as cli_main
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path
from marin_lab.execution.state.status import LEASE_FILE, Status, write_status
from marin_lab.gc import GcError, find_garbage, parse_age
from marin_lab.store.layout import tmp_path as tmp_path_of
from marin_lab.store.layout import tmp_url
from tests.executor_steps import WriteConfig, write_text

DAY = 86400.0


def _step(prefix, rel, status=None, lease_age_s=None, payload=b"x" * 100, age_days=30.0):
    path = prefix / rel
    path.mkdir(parents=True)
    (path / "data.bin").write_bytes(payload)
    if status is not None:
        write_status(str(path), status)
    if lease_age_s is not None:
        (path / LEASE_FILE).write_text(
            json.dumps(
                {
                    "holder": "driver-x",
                    "host": "another-host",
                    "pid": 1,
                    "heartbeat": time.time() - lease_age_s,
                    "timeout_s": 60.0,
                }
            )
        )
    old = time.time() - age_days * DAY
    for f in path.iterdir():
        os.utime(f, (old, old))
    return str(path)


@pytest.fixture()
def store(tmp_path):
    p = tmp_path / "store"
    kept_success = _step(p, "a/kept-11111111", Status.SUCCESS)
    failed = _step(p, "b/failed-22222222", Status.FAILED)
    _step(p, "c/orphan-33333333", Status.SUCCESS, payload=b"y" * 5000)
    _step(p, "d/running-44444444", Status.RUNNING, lease_age_s=1)  # live: its driver heartbeats
    _step(p, "e/dead-55555555", Status.RUNNING, lease_age_s=3600)  # stale lease: abandoned
    _step(p, "f/fresh-66666666", Status.SUCCESS, age_days=0)  # unreferenced but recent
    _step(p, "tmp/scratch-1")
    (p / "experiments").mkdir()
    (p / "experiments" / "exp-abcdef12.json").write_text(
        json.dumps({"created": "2026-11-01", "steps": [{"output_path": kept_success}, {"output_path": failed}]})
    )
    return p


def test_lists_each_kind_with_sizes_and_keeps_what_is_needed(store):
    found, notes = find_garbage(str(store), 14 * DAY)
    got = {os.path.relpath(c.path, store): c.kind for c in found}
    assert got == {
        "b/failed-22222222": "failed",
        "c/orphan-33333333": "unreferenced",
        "e/dead-55555555": "abandoned",
        "tmp/scratch-1": "scratch",
    }
    assert next(c.size for c in found if c.path.endswith("orphan-33333333")) >= 5000
    assert notes == []


def test_lists_without_yes_and_deletes_only_with_it(store, capsys):
    before = sorted(str(p) for p in store.rglob("*"))
    assert cli_main(["gc", str(store)]) == 0
    out = capsys.readouterr().out
    assert "4 folder(s)" in out and "nothing deleted; pass --yes" in out and "unreferenced" in out
    assert sorted(str(p) for p in store.rglob("*")) == before
    assert cli_main(["gc", str(store), "--yes"]) == 0
    assert "deleted 4 folder(s)" in capsys.readouterr().out
    left = {
        d
        for d in (
            "a/kept-11111111",
            "b/failed-22222222",
            "c/orphan-33333333",
            "d/running-44444444",
            "e/dead-55555555",
            "f/fresh-66666666",
            "tmp/scratch-1",
        )
        if (store / d).exists()
    }
    assert left == {"a/kept-11111111", "d/running-44444444", "f/fresh-66666666"}
    assert (store / "experiments" / "exp-abcdef12.json").exists()


def test_a_damaged_experiment_record_means_nothing_is_unreferenced(store):
    (store / "experiments" / "broken-00000000.json").write_text("{not json")
    found, notes = find_garbage(str(store), 14 * DAY)
    assert "unreferenced" not in {c.kind for c in found} and "damaged" in notes[0]


def test_a_prefix_gc_cannot_list_is_one_line_and_nothing_is_deleted(tmp_path, capsys):
    assert cli_main(["gc", str(tmp_path / "nope"), "--yes"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot list" in err and "nope" in err
    with pytest.raises(GcError, match="--older_than '2 weeks'"):
        parse_age("2 weeks")
    assert parse_age("14d") == 14 * DAY and parse_age("12h") == 12 * 3600


def test_tmp_path_names_a_scratch_folder_under_the_prefix_and_refuses_escapes():
    assert tmp_path_of("lr-probe/run-1") == "tmp/lr-probe/run-1"
    assert tmp_url("gs://b/p/", "x") == "gs://b/p/tmp/x"
    for bad in ("", "../x", "a/../../b", "/abs", "gs://b/x", "a//b"):
        with pytest.raises(ValueError, match=r"tmp_path\(.*\): give a relative name"):
            tmp_path_of(bad)


def test_a_step_pinned_with_tmp_path_lands_in_the_scratch_area_that_gc_expires(tmp_path, capsys):
    """The planner puts `override_output_path=tmp_path(...)` under the run's prefix; gc lists it as
    scratch once old, deletes it with --yes, and keeps one that a running step still holds."""
    prefix = tmp_path / "store"
    step = ExecutorStep(
        name="probe/lr",
        fn=write_text,
        config=WriteConfig(output_path=this_output_path(), text="x"),
        override_output_path=tmp_path_of("lr-probe/run-1"),
    )
    (planned,) = Executor(ExecutorMainConfig(prefix=str(prefix), backend="local")).plan([step]).steps
    assert planned.output_path == str(prefix / "tmp" / "lr-probe" / "run-1")
    _step(prefix, "tmp/lr-probe/run-1", Status.SUCCESS)
    _step(prefix, "tmp/sweep/trial-3", Status.RUNNING, lease_age_s=1)  # a running step, deep in tmp/
    _step(prefix, "tmp/fresh-scratch", age_days=0)
    found, _ = find_garbage(str(prefix), 14 * DAY)
    assert {os.path.relpath(c.path, prefix): c.kind for c in found} == {"tmp/lr-probe": "scratch"}
    assert cli_main(["gc", str(prefix), "--yes"]) == 0
    assert "deleted 1 folder(s)" in capsys.readouterr().out
    assert not (prefix / "tmp" / "lr-probe").exists()
    assert (prefix / "tmp" / "sweep" / "trial-3").exists() and (prefix / "tmp" / "fresh-scratch").exists()


@pytest.mark.parametrize("entry", [{"output_path": None}, {"name": "a/kept"}, "a/kept-11111111", {"output_path": 7}])
def test_a_record_with_a_damaged_step_entry_keeps_every_step(store, capsys, entry):
    """One entry that names no output path: which step it meant is unknown, so gc --yes deletes no SUCCESS."""
    record = store / "experiments" / "exp-abcdef12.json"
    data = json.loads(record.read_text())
    data["steps"][0] = entry
    record.write_text(json.dumps(data))
    found, notes = find_garbage(str(store), 14 * DAY)
    assert "unreferenced" not in {c.kind for c in found}
    assert "damaged" in notes[0] and "exp-abcdef12.json" in notes[0] and "steps[0]" in notes[0]
    assert cli_main(["gc", str(store), "--yes"]) == 0
    capsys.readouterr()
    assert (store / "a/kept-11111111").exists() and (store / "c/orphan-33333333").exists()


def test_a_record_whose_steps_is_not_a_list_keeps_every_step(store):
    (store / "experiments" / "exp-abcdef12.json").write_text(json.dumps({"created": "2026-11-01", "steps": {"x": 1}}))
    found, notes = find_garbage(str(store), 14 * DAY)
    assert "unreferenced" not in {c.kind for c in found} and "damaged" in notes[0]


def test_a_file_given_as_the_prefix_is_one_line(tmp_path, capsys):
    f = tmp_path / "a-file"
    f.write_text("hello")
    assert cli_main(["gc", str(f), "--yes"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "a-file" in err and "not a folder" in err
    assert f.read_text() == "hello"
