"""Code provenance: an uncommitted experiment file is dirty, its text and the diff are recorded."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.record.code_provenance import MAX_DIFF_BYTES, git_state, store_script
from marin_lab.io.fs import read_json
from tests.executor_steps import WriteConfig, write_text


def _git(repo, *args):
    subprocess.run(
        ["git", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


@pytest.fixture()
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "experiments").mkdir(parents=True)
    (root / "experiments" / "helpers.py").write_text("WIDTH = 1\n")
    (root / ".gitignore").write_text("*.log\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    return root


def test_clean_tree_is_clean(repo):
    state = git_state(str(repo / "experiments" / "helpers.py"))
    assert len(state["commit"]) == 40
    assert state["dirty"] is False and state["diff"] == "" and state["changed"] == []


def test_uncommitted_experiment_file_makes_the_tree_dirty_and_its_text_is_in_the_diff(repo):
    script = repo / "experiments" / "new_experiment.py"
    script.write_text("print('a brand new experiment')\n")
    (repo / "notes.txt").write_text("scratch outside the package and experiments/: not code\n")
    (repo / "experiments" / "run.log").write_text("ignored by .gitignore\n")
    state = git_state(str(script))
    assert state["dirty"] is True
    assert state["changed"] == ["?? experiments/new_experiment.py"]
    assert "+print('a brand new experiment')" in state["diff"]


def test_an_untracked_script_named_through_a_symlink_to_the_repository_is_still_dirty(repo, tmp_path):
    (repo / "runs").mkdir()
    (repo / "runs" / "mine.py").write_text("print('not committed')\n")
    os.symlink(repo, tmp_path / "via-link")
    state = git_state(str(tmp_path / "via-link" / "runs" / "mine.py"))
    assert state["dirty"] is True and state["changed"] == ["?? runs/mine.py"]


def test_tracked_edit_is_dirty_with_a_capped_diff(repo):
    (repo / "experiments" / "helpers.py").write_text("WIDTH = 2\n" + "# padding\n" * (MAX_DIFF_BYTES // 8))
    state = git_state(str(repo / "experiments" / "helpers.py"))
    assert state["dirty"] is True and state["changed"] == [" M experiments/helpers.py"]
    assert "-WIDTH = 1" in state["diff"] and "+WIDTH = 2" in state["diff"]
    assert state["diff_truncated"] is True and state["diff_bytes"] > MAX_DIFF_BYTES >= len(state["diff"].encode())


def test_credentials_never_reach_the_diff_or_the_stored_script(repo, tmp_path):
    script = repo / "experiments" / "leaky.py"
    script.write_text("TOKEN = 'hf_" + "a" * 30 + "'\n")
    assert "hf_aaaa" not in git_state(str(script))["diff"]
    stored = store_script(str(tmp_path / "exp"), str(script))
    assert stored["script_redacted"] is True
    assert "hf_aaaa" not in (tmp_path / "exp" / stored["stored_script"]).read_text()


def test_script_is_stored_once_by_content(repo, tmp_path):
    script = repo / "experiments" / "exp.py"
    script.write_text("x = 1\n")
    first = store_script(str(tmp_path / "exp"), str(script))
    again = store_script(str(tmp_path / "exp"), str(script))
    assert first == again and first["script_sha256"] == hashlib.sha256(b"x = 1\n").hexdigest()
    script.write_text("x = 2\n")
    changed = store_script(str(tmp_path / "exp"), str(script))
    assert changed["stored_script"] != first["stored_script"]
    assert (tmp_path / "exp" / first["stored_script"]).read_text() == "x = 1\n"  # never overwritten


def _run_new_script(repo, tmp_path, name, text):
    """Run one step from an experiment script written now (not committed) into a fresh store."""
    script = repo / "experiments" / name
    script.write_text(text)
    prefix = str(tmp_path / "store")
    step = ExecutorStep(f"raw/{name[:-3]}", write_text, WriteConfig(this_output_path(), versioned(name)))
    return script, prefix, Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script=str(script)).run([step])


def test_experiment_record_holds_the_script_the_diff_and_package_versions(repo, tmp_path):
    script, prefix, report = _run_new_script(repo, tmp_path, "fresh.py", "# an experiment nobody committed yet\n")
    record = read_json(report.experiment_path)
    code = record["code"]
    assert code["dirty"] is True and "?? experiments/fresh.py" in code["changed"]
    stored = os.path.join(prefix, "experiments", code["stored_script"])
    assert Path(stored).read_text() == script.read_text()
    assert code["script_sha256"] == hashlib.sha256(script.read_bytes()).hexdigest()
    assert "marin_lab" in record["packages"]
    step_record = read_json(os.path.join(report.plan.steps[0].output_path, ".executor_info"))
    assert step_record["git"]["dirty"] is True
    assert step_record["code"]["script_sha256"] == code["script_sha256"]
    assert json.dumps(step_record).count("an experiment nobody committed") == 0  # the text lives once


@pytest.mark.slow
def test_browser_shows_the_experiment_script_and_its_diff(repo, tmp_path):
    from marin_lab.browser.paths import Roots
    from marin_lab.browser.records import Browser

    script, prefix, report = _run_new_script(repo, tmp_path, "shown.py", "# shown in the browser\nSTEPS = 1\n")
    exp_id = os.path.basename(report.experiment_path)[: -len(".json")]
    code = Browser(prefix, Roots.of([prefix])).experiment(exp_id)["code"]
    assert code["script_text"] == script.read_text()
    assert code["dirty"] is True and "+STEPS = 1" in code["diff"]


def test_package_versions_read_from_the_metadata_headers_are_importlibs():
    """Package versions come from each distribution's metadata headers alone (the description after
    them is not parsed): the same names and versions `importlib.metadata` reads from the whole file."""
    import importlib.metadata

    from marin_lab.execution.record.provenance import package_versions

    expected = {d.name: d.version for d in importlib.metadata.distributions() if d.name}
    assert package_versions() == expected and len(expected) > 10
