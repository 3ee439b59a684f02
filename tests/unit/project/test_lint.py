"""Unsorted imports and unused code are caught here, before review (`make test` runs ruff too)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_ruff_finds_no_unsorted_imports_or_unused_code():
    if importlib.util.find_spec("ruff") is None:
        raise AssertionError(
            "ruff is not installed in this environment: `.venv/bin/pip install -c "
            "requirements/constraints.txt ruff` (make venv installs it)"
        )
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (
        f"ruff check (fix with `.venv/bin/ruff check --fix .`):\n{result.stdout}{result.stderr}"
    )
