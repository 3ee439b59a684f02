"""The quickstart says, before its plan, that training and evaluation run one after the other."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from experiments import quickstart
from marin_lab.execution.plan.planner import build_plan
from tests.conftest import REPO_ROOT
from tests.unit.execution.test_experiments_plan_offline import clean_env


def test_the_note_says_one_after_the_other_and_the_plan_makes_it_so(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    note = quickstart.schedule_note()
    assert note.startswith("Schedule on 2 cores: training takes 2 CPUs, then the evaluation (1 CPU)")
    assert "one after the other" in note
    # What makes the note true: the evaluation depends on the training step, whatever the cores.
    plan = build_plan([quickstart.evaluation], str(tmp_path / "store"))
    evaluation = plan.planned_of(quickstart.evaluation)
    assert quickstart.model.name in {p.name for p in plan.ancestors([evaluation]) if p is not evaluation}


def test_the_dry_run_prints_it_on_stderr_and_keeps_a_json_plan_on_stdout(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    script = os.path.join(REPO_ROOT, "experiments", "quickstart.py")
    args = ["--dry_run", "true", "--prefix", str(tmp_path / "store"), "--format", "json"]
    proc = subprocess.run(
        [sys.executable, script, *args], cwd=tmp_path, env=clean_env(str(home)), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "the two run one after the other" in proc.stderr.splitlines()[0]
    assert {s["name"] for s in json.loads(proc.stdout)["steps"]} >= {"checkpoints/quickstart-nano"}
