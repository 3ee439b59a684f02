"""Every experiment file shipped under experiments/ plans offline on a fresh machine.

Each file runs as a new user would run it (`python experiments/x.py --dry_run true`) in a clean
environment: an empty home folder and Hugging Face cache, the hub offline, no W&B login, and the
project on the path only. A plan never downloads, so a vocabulary it needs comes from the model or
the known-tokenizer table, never from the network. About 4-8 s of CPU per file (imports of JAX and
the data libraries), one subprocess each.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

EXPERIMENTS = sorted(
    os.path.relpath(path, REPO_ROOT)
    for path in glob.glob(os.path.join(REPO_ROOT, "experiments", "**", "*.py"), recursive=True)
    if "executor_main(" in Path(path).read_text(encoding="utf-8")
)


def clean_env(home: str) -> dict[str, str]:
    """What a fresh machine has: no caches, no credentials, no network for the hub."""
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(
        HOME=home,
        HF_HOME=os.path.join(home, "hf"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        XDG_CACHE_HOME=os.path.join(home, ".cache"),
        PYTHONPATH=REPO_ROOT,
        WANDB_MODE="offline",
        RAY_USAGE_STATS_ENABLED="0",
        MARIN_LAB_CORPUS=os.path.join(home, "corpus"),
    )
    return env


def test_every_experiment_file_is_found():
    assert "experiments/quickstart.py" in EXPERIMENTS
    assert "experiments/tutorial/train_tiny_model_cpu.py" in EXPERIMENTS


@pytest.mark.slow
@pytest.mark.parametrize("script", EXPERIMENTS)
def test_experiment_plans_offline_on_a_fresh_machine(script, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    prefix = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, script), "--dry_run", "true", "--prefix", str(prefix)],
        cwd=tmp_path,
        env=clean_env(str(home)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "run" in proc.stdout  # the plan itself was printed
    # A plan fetches nothing: the empty caches stay empty of downloads.
    assert not (home / "hf" / "hub").exists() or not any((home / "hf" / "hub").iterdir())
    assert not (home / "corpus").exists()
