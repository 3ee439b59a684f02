"""`reproduce` checks the whole record and every location before the recorded script runs, and
never leaves its temporary copy of the script behind.

The records here are written by hand (no step runs): the stored script appends to a marker file
when executed, so each refusal can be shown to have happened before anything ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from pathlib import Path

import pytest

from marin_lab.cli import main as cli_main
from marin_lab.reproduce import DIFFERS, ReproduceError, reproduce

SCRIPT = textwrap.dedent("""
    import os

    with open(os.environ["REPRODUCE_MARKER"], "a") as f:
        f.write("ran\\n")

    from marin_lab.execution import ExecutorStep, executor_main, this_output_path, versioned
    from tests.executor_steps import WriteConfig, write_text

    a = ExecutorStep("raw/a", write_text, WriteConfig(this_output_path(), versioned("a")), override_output_path=PIN)
    executor_main(steps=[a])
""")


def _tree(root) -> dict[str, bytes]:
    return {os.path.join(d, f): Path(d, f).read_bytes() for d, _, fs in os.walk(root) for f in fs}


@pytest.fixture()
def world(tmp_path, monkeypatch):
    """An original prefix holding one hand-written experiment record and its stored script; a temp
    folder of reproduce's own; the marker the script writes when it runs."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    marker = tmp_path / "ran"
    monkeypatch.setenv("REPRODUCE_MARKER", str(marker))
    original = tmp_path / "original"
    record_url = write_record(original)
    os.symlink(original, tmp_path / "link")
    return {"tmp": tmp, "marker": marker, "original": original, "record": record_url, "root": tmp_path}


def write_record(original, *, pin: str | None = None, edit=None, script: str = SCRIPT) -> str:
    text = script.replace("PIN", repr(pin)).encode()
    digest = hashlib.sha256(text).hexdigest()
    scripts = original / "experiments" / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    (scripts / f"exp-{digest[:16]}.py").write_bytes(text)
    record = {
        "schema": 1,
        "prefix": str(original),
        "script": "exp.py",
        "steps": [{"name": "raw/a", "identity": "raw/a-00000000", "output_path": str(original / "raw/a-00000000")}],
        "code": {"script": "exp.py", "stored_script": f"scripts/exp-{digest[:16]}.py", "script_sha256": digest},
    }
    if edit:
        edit(record)
    path = original / "experiments" / "exp-00000000.json"
    path.write_text(json.dumps(record))
    return str(path)


def assert_nothing_ran(world, before=None):
    assert not world["marker"].exists(), "the recorded script ran before the refusal"
    assert os.listdir(world["tmp"]) == [], "reproduce left temporary files"
    if before is not None:
        assert _tree(world["original"]) == before


@pytest.mark.parametrize(
    "into",
    [
        "{root}/link",  # a symlink to the original
        "file://{root}/original",  # a file:// URL of it
        "{root}/link/scratch",  # inside it, through the symlink
        "{root}/original/../original",  # a '..' spelling
        "{root}",  # around it: the scratch would hold the original
    ],
)
def test_a_scratch_prefix_reaching_the_original_is_refused_before_anything_runs(world, into, capsys):
    before = _tree(world["original"])
    assert cli_main(["reproduce", world["record"], "--into", into.format(root=world["root"])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --into ") and "reaches the original prefix" in err and err.count("\n") == 1, err
    assert_nothing_ran(world, before)


def test_a_record_named_through_a_symlinked_prefix_is_placed_at_its_real_path(world):
    before = _tree(world["original"])
    via_link = str(world["root"] / "link" / "experiments" / "exp-00000000.json")
    with pytest.raises(ReproduceError, match=f"reaches the original prefix {world['original']}"):
        reproduce(via_link, into=str(world["original"] / "scratch"))
    assert_nothing_ran(world, before)


def test_a_stored_script_outside_the_records_folder_is_never_run(world):
    outside = world["root"] / "elsewhere"
    outside.mkdir()
    text = SCRIPT.replace("PIN", "None").encode()
    (outside / "evil.py").write_bytes(text)
    digest = hashlib.sha256(text).hexdigest()

    def climbing(record):
        record["code"].update(stored_script="../../elsewhere/evil.py", script_sha256=digest)

    record = write_record(world["original"], edit=climbing)
    with pytest.raises(ReproduceError, match="code.stored_script.*leads outside the record's folder"):
        reproduce(record)
    # The same climb through a symlink planted in the scripts folder.
    os.symlink(outside, world["original"] / "experiments" / "scripts" / "planted")

    def through_link(record):
        record["code"].update(stored_script="scripts/planted/evil.py", script_sha256=digest)

    record = write_record(world["original"], edit=through_link)
    with pytest.raises(ReproduceError, match="leads outside the record's folder"):
        reproduce(record)
    assert_nothing_ran(world)


def _set(path: str, value):
    def edit(record):
        *parents, last = path.split(".")
        node = record
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return edit


_DELETE = object()


@pytest.mark.parametrize(
    "edit, message",
    [
        (_set("steps", {"raw/a": "raw/a-00000000"}), "field 'steps' is not a list"),
        (_set("steps.0", "raw/a"), r"field 'steps\[0\]' is str, expected an object"),
        (_set("steps.0.identity", 7), r"field 'steps\[0\].identity' is int, expected a string"),
        (_set("code.stored_script", ["scripts/x.py"]), "field 'code.stored_script' is list"),
        (_set("code.script_sha256", _DELETE), "field 'code.script_sha256' is NoneType"),
        (_set("code.script", {"name": "x"}), "field 'code.script' is dict"),
        (_set("code", "scripts/x.py"), "field 'code' is str, expected an object"),
    ],
)
def test_a_record_with_fields_of_the_wrong_type_is_one_line_before_anything_runs(world, edit, message, capsys):
    record = write_record(world["original"], edit=edit)
    with pytest.raises(ReproduceError, match=message):
        reproduce(record)
    assert cli_main(["reproduce", record]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {record}") and err.count("\n") == 1, err
    assert_nothing_ran(world)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"{not json", "unreadable .*JSONDecodeError"),
        (b'{"steps": "\x80"}', "unreadable .*UnicodeDecodeError"),
        (b"[1, 2]", "not a JSON object"),
        (b"[" * 100_000, "unreadable"),
    ],
)
def test_a_record_that_is_not_json_is_one_line(world, content, message):
    bad = world["original"] / "experiments" / "bad.json"
    bad.write_bytes(content)
    with pytest.raises(ReproduceError, match=message):
        reproduce(str(bad))
    assert_nothing_ran(world)


def test_a_record_outside_experiments_needs_its_prefix_field(world):
    moved = world["root"] / "moved"
    moved.mkdir()
    record = json.loads(Path(world["record"]).read_text())
    del record["prefix"]
    (moved / "exp.json").write_text(json.dumps(record))
    with pytest.raises(ReproduceError, match="lies outside an experiments/ folder and names no prefix"):
        reproduce(str(moved / "exp.json"))
    assert_nothing_ran(world)


@pytest.mark.parametrize("steps, message", [("(", "is not a regular expression"), ("^nothing/", "matches no step")])
def test_a_bad_steps_regex_is_refused_before_the_script_runs(world, steps, message, capsys):
    assert cli_main(["reproduce", world["record"], "--steps", steps]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert_nothing_ran(world)


def test_a_pinned_output_path_outside_the_scratch_is_refused_before_any_step_runs(world):
    pinned = str(world["original"] / "raw" / "pinned")
    record = write_record(world["original"], pin=pinned)
    before = _tree(world["original"])
    with pytest.raises(ReproduceError, match="outside the scratch prefix"):
        reproduce(record, into=str(world["root"] / "scratch"))
    assert world["marker"].exists()  # the script had to run to plan; no step ran
    assert not os.path.exists(pinned) and _tree(world["original"]) == before
    assert os.listdir(world["tmp"]) == []


def test_the_temporary_script_is_removed_after_success_and_after_failure(world):
    report = reproduce(world["record"])  # planned, nothing to run: the recorded identity differs
    assert [s.verdict for s in report.steps] == [DIFFERS] and world["marker"].exists()
    assert os.listdir(world["tmp"]) == [os.path.basename(report.scratch)]  # the scratch is kept, the script not
    os.rmdir(report.scratch)
    broken = write_record(world["original"], script="raise RuntimeError('gone')\n")
    with pytest.raises(ReproduceError, match="no longer runs here: RuntimeError: gone"):
        reproduce(broken)
    assert os.listdir(world["tmp"]) == []  # neither the script nor the (empty) default scratch
