"""docs/getting_started.md runs as written: its `bash` blocks in order in a fresh folder, its
`python` blocks written to the file their first line names. About 4 minutes on 2 cores under load 10
(three data steps, a 10-step training run twice, explain and status)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

GUIDE = os.path.join(REPO_ROOT, "docs", "getting_started.md")
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    with open(GUIDE, encoding="utf-8") as f:
        return [(m.group(1), m.group(2)) for m in BLOCK.finditer(f.read())]


def test_the_guide_has_runnable_blocks():
    kinds = [k for k, _ in blocks()]
    assert kinds.count("bash") >= 4 and kinds.count("python") == 1


@pytest.mark.slow
def test_getting_started_runs_as_written(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # `python` and `marin-lab` as the guide's reader has them after `source .venv/bin/activate`.
    (bindir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bindir / "python").chmod(0o755)
    (bindir / "marin-lab").write_text(f'#!/bin/sh\nexec {sys.executable} -m marin_lab.cli "$@"\n')
    (bindir / "marin-lab").chmod(0o755)
    work = tmp_path / "project"
    work.mkdir()
    (work / "pyproject.toml").write_text("")  # the project root, where marin_store goes
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", PYTHONPATH=REPO_ROOT)
    env.pop("MARIN_PREFIX", None)
    outputs = []
    for kind, text in blocks():
        if kind == "python":
            name = text.splitlines()[0].lstrip("# ").strip()
            (work / name).write_text(text)
        elif kind == "bash":
            proc = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", text], cwd=work, env=env, capture_output=True, text=True, timeout=900
            )
            assert proc.returncode == 0, f"{text}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            outputs.append(proc.stdout + proc.stderr)
    run_twice, explain_rerun = outputs[1], outputs[2]
    assert "0 executed" in run_twice  # the second run reuses every step
    assert "learning_rate" in explain_rerun and "1 executed" in explain_rerun
    assert not (work / "marin_store").exists()  # cleaned up


@pytest.mark.slow
def test_the_readme_experiment_plans(tmp_path):
    """README.md's one `python` block plans as written (its `console` blocks install and run the suite)."""
    with open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8") as f:
        found = [m.group(2) for m in BLOCK.finditer(f.read()) if m.group(1) == "python"]
    assert len(found) == 1
    (tmp_path / "my_texts").mkdir()
    for i in range(3):
        (tmp_path / "my_texts" / f"note-{i}.txt").write_text(f"note {i}: the heron waits by the mill\n")
    (tmp_path / "experiment.py").write_text(found[0])
    proc = subprocess.run(
        [sys.executable, "experiment.py", "--dry_run", "true", "--prefix", str(tmp_path / "store")],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=REPO_ROOT),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "notes-model" in proc.stdout and "Traceback" not in proc.stderr
