"""docs/executor.md's tutorial (experiments/word_lengths.py) works as the page says."""

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "experiments", "word_lengths.py")


def _run(*args, cwd):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_tutorial_runs_skips_and_explains(tmp_path):
    prefix = str(tmp_path / "store")
    first = _run(SCRIPT, "--backend", "local", "--prefix", prefix, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "3 executed" in first.stderr
    second = _run(SCRIPT, "--backend", "local", "--prefix", prefix, cwd=tmp_path)
    assert "0 executed, 3 reused" in second.stderr
    changed = tmp_path / "word_lengths.py"
    changed.write_text(Path(SCRIPT).read_text().replace("min_chars=versioned(40)", "min_chars=versioned(80)"))
    explain = _run("-m", "marin_lab.cli", "explain", str(changed), "--prefix", prefix, cwd=tmp_path)
    assert explain.returncode == 0, explain.stderr
    assert "min_chars: 40 -> 80" in explain.stdout
    assert "dependency wl/docs changed" in explain.stdout
