"""A reused step whose function's source changed since it ran gets one line saying so."""

from __future__ import annotations

import functools
import importlib
import json
import linecache
import sys
import textwrap
from pathlib import Path

import pytest

from marin_lab.execution import ExecutorMainConfig
from marin_lab.execution.executor import Executor
from marin_lab.execution.record.code_provenance import function_fingerprint
from marin_lab.store.layout import status_url as status_path
from marin_lab.store.step_record import read_step_record
from tests.executor_steps import five_step_dag, write_text

STEPS_V1 = """
def helper(x):
    return x + 1


def unrelated():
    return "a"


def step_fn(cfg):
    return helper(cfg)
"""


def _load(tmp_path, monkeypatch, source: str, name: str = "changed_code_steps"):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    linecache.checkcache(str(path))
    module = importlib.import_module(name)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def test_the_fingerprint_follows_the_function_and_its_helpers_only(tmp_path, monkeypatch):
    v1 = function_fingerprint(_load(tmp_path, monkeypatch, STEPS_V1).step_fn)
    assert v1 is not None and v1["function"] == "step_fn" and v1["file"].endswith("changed_code_steps.py")
    same = _load(tmp_path, monkeypatch, STEPS_V1.replace('return "a"', 'return "b"') + "\n\nX = 1\n")
    assert function_fingerprint(same.step_fn)["sha256"] == v1["sha256"]  # other code of the file
    helper = _load(tmp_path, monkeypatch, STEPS_V1.replace("x + 1", "x + 2"))
    assert function_fingerprint(helper.step_fn)["sha256"] != v1["sha256"]  # a helper it calls
    body = _load(tmp_path, monkeypatch, STEPS_V1.replace("return helper(cfg)", "return helper(cfg) * 2"))
    assert function_fingerprint(body.step_fn)["sha256"] != v1["sha256"]
    # Through a partial, and nothing for what has no source.
    partial = function_fingerprint(functools.partial(body.step_fn))
    assert partial["sha256"] == function_fingerprint(body.step_fn)["sha256"]
    assert function_fingerprint(len) is None


@pytest.mark.slow
def test_a_reused_step_whose_code_changed_gets_one_line(tmp_path, capsys):
    prefix = str(tmp_path / "store")
    report = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag())
    ps = next(s for s in report.plan.steps if s.name == "proc/b")
    st = json.loads(Path(status_path(ps.output_path)).read_text())
    current = function_fingerprint(write_text)
    assert st["code_fingerprint"] == current["sha256"]
    assert read_step_record(ps.output_path).code["function"] == current

    quiet = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(), dry_run=True)
    assert not any(d.notes for d in quiet.decisions)

    # The step ran with other code than what is there now (the status is as that run left it).
    st["code_fingerprint"] = "0" * 16
    Path(status_path(ps.output_path)).write_text(json.dumps(st))
    plan = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(), dry_run=True)
    noted = {d.step.name: d.notes for d in plan.decisions if d.notes}
    assert noted == {
        "proc/b": (
            f"reused, but its code changed since it ran ({current['file']}: write_text); "
            "use --force_run '^proc/b$' to run it again",
        )
    }
    assert "reused, but its code changed since it ran" in capsys.readouterr().out
    # Not an identity: every step is still reused.
    assert {d.action for d in plan.decisions} == {"skip"}


@pytest.mark.slow
def test_a_status_without_a_fingerprint_says_nothing(tmp_path):
    prefix = str(tmp_path / "store")
    report = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag())
    for ps in report.plan.steps:
        st = json.loads(Path(status_path(ps.output_path)).read_text())
        st.pop("code_fingerprint")
        Path(status_path(ps.output_path)).write_text(json.dumps(st))
    plan = Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(), dry_run=True)
    assert not any(d.notes for d in plan.decisions)


def test_the_fingerprint_does_not_depend_on_the_module_name(tmp_path, monkeypatch):
    as_module = function_fingerprint(_load(tmp_path, monkeypatch, STEPS_V1, name="steps_one").step_fn)
    as_other = function_fingerprint(_load(tmp_path, monkeypatch, STEPS_V1, name="steps_two").step_fn)
    assert as_module["sha256"] == as_other["sha256"]


def test_a_source_that_cannot_be_read_is_no_fingerprint_never_a_failed_step(monkeypatch):
    """Seen on a busy machine: CPython 3.11's parser raised SystemError ("AST constructor recursion
    depth mismatch") when two driver threads read sources at once. The fingerprints are now taken one
    at a time, and whatever reading a source raises makes the hint absent, not the step failed."""
    import inspect

    from marin_lab.execution.record import code_provenance

    def step_fn(cfg):  # a function of its own: not in the per-process cache yet
        return cfg

    def broken(obj):
        raise SystemError("AST constructor recursion depth mismatch (before=42, after=30)")

    monkeypatch.setattr(inspect, "getsource", broken)
    assert code_provenance.function_fingerprint(step_fn) is None


def test_fingerprints_taken_from_many_threads_at_once_agree():
    import threading

    from marin_lab.execution.record import code_provenance
    from marin_lab.processing import download, tokenize

    fns = [download.download, download.moving_source, tokenize.tokenize, tokenize.train_tokenizer]
    code_provenance._FINGERPRINTS.clear()
    results: list[list] = [[] for _ in range(6)]

    def work(out):
        out.extend(function_fingerprint(fn) for fn in fns)

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == results[0] for r in results) and all(f is not None for f in results[0])
