"""The store layout has one owner: the default prefix and the status vocabulary are the same for the
executor, `marin-lab status` and the data browser."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from marin_lab import cli
from marin_lab.browser import server
from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.execution.executor import Executor
from marin_lab.execution.record.experiments import list_experiments, step_statuses
from marin_lab.store import default_prefix
from marin_lab.store.layout import project_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from browser_fixtures import build_prefix  # noqa: E402

from marin_lab.execution import ExecutorMainConfig


@pytest.mark.parametrize("env", [None, ""])
def test_unset_or_empty_marin_prefix_means_the_default_everywhere(monkeypatch, env):
    """Regression: an empty MARIN_PREFIX meant "unset" to the executor but "" to `marin-lab browse`,
    and the browser had no default at all."""
    if env is None:
        monkeypatch.delenv("MARIN_PREFIX", raising=False)
    else:
        monkeypatch.setenv("MARIN_PREFIX", env)
    default = project_store()
    assert default_prefix() == default and os.path.isabs(default)
    assert (
        Executor(ExecutorMainConfig(backend="local")).prefix
        == Executor(ExecutorMainConfig(prefix=default, backend="local")).prefix
    )
    assert cli._prefix(cli.build_parser().parse_args(["browse"])) == default

    served = {}
    monkeypatch.setattr(server, "serve", lambda prefix, **kw: served.setdefault("prefix", prefix))
    server.main([])
    assert served["prefix"] == default


def test_the_default_store_is_at_the_project_root_from_any_subfolder(tmp_path):
    project = tmp_path / "project"
    (project / "experiments" / "deep").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    assert project_store(str(project / "experiments" / "deep")) == str(project / "marin_store")
    assert project_store(str(project)) == str(project / "marin_store")


def test_an_explicit_prefix_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", "/from/env")
    assert default_prefix() == "/from/env"
    assert default_prefix("/given") == "/given"
    assert cli._prefix(cli.build_parser().parse_args(["status", "/given"])) == "/given"


def test_marin_lab_status_and_the_browser_name_every_step_status_alike(tmp_path):
    """Regression: a step with no status was NOT_STARTED in `marin-lab status` and MISSING in the browser."""
    fx = build_prefix(tmp_path)
    listed = {
        # A damaged record lists no steps (the browser shows it with none counted).
        exp.url.rsplit("/", 1)[-1][: -len(".json")]: Counter(
            st for _, st in (step_statuses(exp.record) if exp.record is not None else [])
        )
        for exp in list_experiments(str(fx.prefix))
    }
    browsed = {
        exp["id"]: Counter(exp["status_counts"])
        for exp in Browser(str(fx.prefix), Roots.of([str(fx.prefix)])).experiments()
    }
    assert listed == browsed
    assert any("MISSING" in counts for counts in listed.values())
