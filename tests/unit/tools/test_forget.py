"""`marin-lab forget` drops an abandoned experiment's record so gc collects what only it named;
`marin-lab gc` defaults to the store, as `status` and `browse` do."""

from __future__ import annotations

import os

from marin_lab.cli import main as cli_main
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from tests.executor_steps import WriteConfig, write_text


def _step(name: str) -> ExecutorStep:
    config = WriteConfig(output_path=this_output_path(), text=versioned(name))
    return ExecutorStep(name=name, fn=write_text, config=config)


def _run(prefix: str, script: str, names: list[str]) -> list[str]:
    executor = Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script=script)
    report = executor.run([_step(n) for n in names])
    return [ps.output_path for ps in report.plan.steps]


def test_forget_frees_what_only_that_experiment_named_and_gc_defaults_to_the_store(tmp_path, monkeypatch, capsys):
    store = str(tmp_path / "store")
    monkeypatch.setenv("MARIN_PREFIX", store)
    shared, only_old = _run(store, str(tmp_path / "abandoned.py"), ["keep/shared", "drop/mine"])
    _run(store, str(tmp_path / "current.py"), ["keep/shared"])

    # Named by a record: gc, on the default store, collects nothing.
    assert cli_main(["gc", "--older_than", "0s"]) == 0
    assert "nothing to collect under " + store in capsys.readouterr().out

    # Listed only without --yes (by script name, as a person remembers it).
    assert cli_main(["forget", "abandoned.py"]) == 0
    out = capsys.readouterr().out
    assert "1 output(s) no other experiment names become collectable" in out and "1 stay" in out
    assert "nothing forgotten; pass --yes" in out
    records = sorted(os.listdir(os.path.join(store, "experiments")))
    old_id = next(n for n in records if n.startswith("abandoned-") and n.endswith(".json"))[: -len(".json")]

    assert cli_main(["forget", old_id, "--yes"]) == 0
    assert not os.path.exists(os.path.join(store, "experiments", old_id + ".json"))
    assert not os.path.exists(os.path.join(store, "experiments", old_id))  # its run history too
    capsys.readouterr()

    assert cli_main(["gc", "--older_than", "0s", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "unreferenced" in out and only_old in out and shared not in out
    assert not os.path.exists(only_old) and os.path.exists(shared)


def test_forget_an_unknown_experiment_is_one_line(tmp_path, capsys):
    store = str(tmp_path / "store")
    _run(store, str(tmp_path / "current.py"), ["keep/shared"])
    assert cli_main(["forget", "nope", "--prefix", store]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no experiment 'nope' under" in err[0] and "current-" in err[0]
