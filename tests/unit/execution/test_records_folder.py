"""Where an experiment record goes: under the prefix, or beside its steps when every one of them is
pinned outside the prefix (so a run of pinned steps never writes into a store none of them is in)."""

from __future__ import annotations

import os

import pytest

from marin_lab.execution import ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.executor import Executor
from marin_lab.execution.record.experiments import records_folder
from tests.executor_steps import WriteConfig, write_text


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        (["/p/a-1", "/t/x"], "/p/experiments"),  # one step under the prefix: the prefix's folder
        (["/t/x/out1", "/t/x/out2"], "/t/x/experiments"),
        (["/t/x/out1"], "/t/x/experiments"),  # beside the step's folder, never inside it
        (["/t/x/a/out", "/t/x/b/c/out"], "/t/x/experiments"),
        (["/a/out1", "/b/out2"], "/p/experiments"),  # only the root in common
        (["gs://b/x/o", "gs://b/x/y/o"], "gs://b/x/experiments"),
        (["gs://b/o", "gs://c/o"], "/p/experiments"),  # two buckets
        (["/t/x/out1", "gs://b/o"], "/p/experiments"),  # two filesystems
        ([], "/p/experiments"),
    ],
)
def test_records_folder(outputs, expected):
    assert records_folder("/p", outputs) == expected


def _pinned(name: str, path: str) -> ExecutorStep:
    return ExecutorStep(
        name=name,
        fn=write_text,
        config=WriteConfig(output_path=this_output_path(), text=versioned(name)),
        override_output_path=path,
    )


def test_a_run_of_pinned_steps_records_its_experiment_beside_them(tmp_path):
    """Regression: a run whose steps all had explicit output paths wrote its experiment record
    under the default prefix (the checkout's marin_store/, from the test suite), where none of its
    steps were."""
    store = tmp_path / "store"
    pinned = tmp_path / "pinned"
    executor = Executor(ExecutorMainConfig(prefix=str(store), backend="local"))
    report = executor.run([_pinned("a", str(pinned / "a")), _pinned("b", str(pinned / "b"))])
    assert report.experiment_path is not None
    assert os.path.dirname(report.experiment_path) == str(pinned / "experiments")
    assert os.path.isfile(report.experiment_path)
    assert not store.exists() or not (store / "experiments").exists()


def test_a_run_with_a_step_under_the_prefix_records_under_the_prefix(tmp_path):
    store = tmp_path / "store"
    step = ExecutorStep(name="c", fn=write_text, config=WriteConfig(output_path=this_output_path(), text="c"))
    report = Executor(ExecutorMainConfig(prefix=str(store), backend="local")).run(
        [step, _pinned("a", str(tmp_path / "pinned" / "a"))]
    )
    assert os.path.dirname(report.experiment_path or "") == str(store / "experiments")


def test_an_explicit_records_folder_is_kept(tmp_path):
    records = tmp_path / "records"
    executor = Executor(
        ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local", executor_info_base_path=str(records))
    )
    report = executor.run([_pinned("a", str(tmp_path / "pinned" / "a"))])
    assert os.path.dirname(report.experiment_path or "") == str(records)
