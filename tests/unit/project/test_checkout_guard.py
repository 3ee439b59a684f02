"""The test session's guard (tests/conftest.py): a session that changes the checkout fails, naming
the files, with and without xdist; and the tests' default prefix is a temporary folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.conftest import REPO_ROOT, checkout_changes, checkout_files

WRITES_INTO_THE_STORE = """
import os

STORE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "marin_store", "experiments")


def test_writes():
    os.makedirs(STORE, exist_ok=True)
    with open(os.path.join(STORE, "x.json"), "w") as f:
        f.write("{}")


def test_clean(tmp_path):
    (tmp_path / "ok").write_text("ok")
"""


def test_changes_are_named_by_kind(tmp_path):
    (tmp_path / "kept").write_text("a")
    (tmp_path / "edited").write_text("a")
    (tmp_path / "gone").write_text("a")
    (tmp_path / "__pycache__").mkdir()
    before = checkout_files(str(tmp_path))
    (tmp_path / "edited").write_text("ab")
    (tmp_path / "gone").unlink()
    (tmp_path / "marin_store").mkdir()
    (tmp_path / "marin_store" / "new").write_text("a")
    (tmp_path / "__pycache__" / "x.pyc").write_text("a")  # caches are not the checkout's
    (tmp_path / "test-output" / "screenshots").mkdir(parents=True)  # the screenshots' folder, kept by CI
    (tmp_path / "test-output" / "screenshots" / "01.png").write_text("a")
    assert checkout_changes(before, checkout_files(str(tmp_path))) == [
        "changed edited",
        "removed gone",
        f"added {os.path.join('marin_store', 'new')}",
    ]


def _checkout_copy(root) -> str:
    """A checkout of only the tests' conftest and one test file that writes into its marin_store/."""
    checkout = root / "checkout"
    (checkout / "tests").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    shutil.copy(os.path.join(REPO_ROOT, "tests", "conftest.py"), checkout / "tests" / "conftest.py")
    (checkout / "tests" / "__init__.py").write_text("")
    (checkout / "tests" / "test_writes.py").write_text(WRITES_INTO_THE_STORE)
    return str(checkout)


@pytest.mark.slow
@pytest.mark.parametrize("xdist", [[], ["-n", "2", "--dist", "loadfile"]], ids=["one process", "xdist"])
def test_a_session_that_writes_into_the_checkout_fails(tmp_path, xdist):
    """Regression: `make test` left 12 experiment records in the checkout's marin_store/ and passed."""
    checkout = _checkout_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_LAB_CHECKOUT_GUARD", "PYTEST_XDIST_WORKER")}
    env["PYTHONPATH"] = REPO_ROOT  # marin_lab, as the real checkout has it
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist, "tests"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert "2 passed" in out, out
    assert proc.returncode == 1, out
    assert "the test session changed the checkout" in out
    assert f"added {os.path.join('marin_store', 'experiments', 'x.json')}" in out


def test_the_default_prefix_is_a_temporary_folder():
    prefix = os.environ["MARIN_PREFIX"]
    assert os.path.realpath(prefix).startswith(os.path.realpath(tempfile.gettempdir()))
    assert not os.path.realpath(prefix).startswith(os.path.realpath(REPO_ROOT))
