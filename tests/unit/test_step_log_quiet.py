"""A step's log and console carry marin_lab's lines and everyone's warnings; libraries' INFO lines
only with --verbose (MARIN_LAB_VERBOSE=1)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from marin_lab.execution import main
from marin_lab.execution.run.logs import VERBOSE_ENV, LogSpec, capture


def _log_lines(url: str) -> str:
    with capture(LogSpec(url=url, label="s/x-1234", echo=False)):
        logging.getLogger("datasets").info("JAX version 0.10.2 available.")
        logging.getLogger("datasets").warning("a library's warning")
        logging.getLogger("marin_lab.processing.tokenize").info("tokenize: 362 documents")
        logging.getLogger("experiments.my_steps").info("the user's own step says hello")
    return Path(url).read_text(encoding="utf-8")


def test_libraries_info_lines_stay_out_unless_verbose(tmp_path, monkeypatch):
    # As in a step's worker process: no handler of pytest's on the root logger, so the capture adds its own.
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    # fd 2, which the capture takes.
    monkeypatch.setattr(sys, "stderr", open(2, "w", closefd=False, buffering=1))  # noqa: SIM115 (is sys.stderr)
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    # `datasets` sets its logger to WARNING when imported (another test may have imported it): the
    # filter is what is tested here, so the logger itself lets INFO through.
    monkeypatch.setattr(logging.getLogger("datasets"), "level", logging.INFO)
    quiet = _log_lines(str(tmp_path / "quiet.log"))
    assert "tokenize: 362 documents" in quiet and "a library's warning" in quiet
    assert "the user's own step says hello" in quiet
    assert "JAX version" not in quiet
    monkeypatch.setenv(VERBOSE_ENV, "1")
    verbose = _log_lines(str(tmp_path / "verbose.log"))
    assert "JAX version 0.10.2 available." in verbose and "tokenize: 362 documents" in verbose


@pytest.mark.parametrize("argv, expected", [(["--verbose"], True), (["--verbose", "false"], False), ([], False)])
def test_the_verbose_flag(argv, expected):
    assert main.parse_flags(argv).verbose is expected
