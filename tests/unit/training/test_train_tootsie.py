"""experiments/tootsie_8b.py --dry_run prints the plan with estimates, offline."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.mark.slow
def test_tootsie_dry_run_prints_phases_with_estimates(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", NO_GCE_CHECK="true")
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "experiments", "tootsie_8b.py"),
            "--dry_run",
            "true",
            "--prefix",
            str(tmp_path / "prefix"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    for phase in ("kestrel", "ocelot", "jellyfish"):
        assert f"checkpoints/tootsie-8b/{phase}-" in out
    assert "params=8030261248" in out
    assert "steps=640000" in out and "accelerator=v5e-256 x2" in out and "accelerator=v4-2048 x1" in out
    assert "raw/tootsie/dclm-" in out and "evaluation/tootsie-8b/jellyfish-" in out
    # A dry run writes no step output.
    assert not (tmp_path / "prefix" / "checkpoints").exists()
