"""A step's log and console carry marin_lab's lines and everyone's warnings; libraries' INFO lines
only with --verbose (MARIN_LAB_VERBOSE=1)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

from marin_lab.execution import main
from marin_lab.execution.run.logs import PROGRESS_BAR_ENV, VERBOSE_ENV, LogSpec, capture


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


class _Bars:
    """A library's progress-bar switch, as datasets and huggingface_hub.utils expose it."""

    def __init__(self) -> None:
        self.on = True

    def disable_progress_bars(self) -> None:
        self.on = False

    def enable_progress_bars(self) -> None:
        self.on = True

    def is_progress_bar_enabled(self) -> bool:
        return self.on

    def are_progress_bars_disabled(self) -> bool:
        return not self.on


@pytest.fixture()
def bar_switches(monkeypatch):
    for variable in PROGRESS_BAR_ENV.values():
        monkeypatch.delenv(variable, raising=False)
    switches = {"datasets": _Bars(), "huggingface_hub.utils": _Bars()}
    for name, module in switches.items():
        monkeypatch.setitem(sys.modules, name, module)
    return switches


def test_libraries_progress_bars_are_off_in_a_step_unless_verbose(tmp_path, monkeypatch, bar_switches):
    """Regression: datasets' `Map:` bars reached the console of every step that mapped a dataset."""
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    with capture(LogSpec(url=str(tmp_path / "quiet.log"), label="s/x-1234", echo=False)):
        # Libraries imported during the step (or in its subprocesses) read the variables.
        assert all(os.environ.get(variable) == "1" for variable in PROGRESS_BAR_ENV.values())
        assert not any(switch.on for switch in bar_switches.values())  # those already imported are told
    assert all(switch.on for switch in bar_switches.values())
    assert not any(variable in os.environ for variable in PROGRESS_BAR_ENV.values())

    monkeypatch.setenv(VERBOSE_ENV, "1")
    with capture(LogSpec(url=str(tmp_path / "verbose.log"), label="s/x-1234", echo=False)):
        assert all(switch.on for switch in bar_switches.values())
        assert not any(variable in os.environ for variable in PROGRESS_BAR_ENV.values())


def test_a_progress_bar_variable_the_person_set_is_left_alone(tmp_path, monkeypatch, bar_switches):
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    monkeypatch.setenv("HF_DATASETS_DISABLE_PROGRESS_BARS", "0")
    with capture(LogSpec(url=str(tmp_path / "quiet.log"), label="s/x-1234", echo=False)):
        assert os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "0" and bar_switches["datasets"].on
        assert not bar_switches["huggingface_hub.utils"].on
    assert os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "0"


@pytest.mark.slow
def test_a_datasets_map_draws_no_bar_in_a_steps_log(tmp_path, monkeypatch):
    import datasets  # a dependency of marin_lab; imported here because it takes seconds

    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    monkeypatch.setattr(sys, "stderr", open(2, "w", closefd=False, buffering=1))  # noqa: SIM115 (is sys.stderr)
    log = tmp_path / "map.log"
    with capture(LogSpec(url=str(log), label="s/x-1234", echo=False)):
        datasets.Dataset.from_dict({"x": list(range(36))}).map(lambda row: row)
    assert "Map" not in log.read_text(encoding="utf-8")
    assert datasets.is_progress_bar_enabled()
