"""Marin's executor semantics and spellings: regressions for the bugs a Marin user hit, and the API
Marin experiment files use (docs/coming_from_marin.md)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import NamedTuple

import pytest

from marin_lab.execution import (
    THIS_OUTPUT_PATH,
    Executor,
    ExecutorConfigError,
    ExecutorMainConfig,
    ExecutorStep,
    InputName,
    StepDefinitionError,
    ensure_versioned,
    get_executor_step,
    output_path_of,
    this_output_path,
    versioned,
)
from marin_lab.execution.plan.planner import build_plan
from marin_lab.execution.state.status import read_status
from marin_lab.marin import executor as marin_executor
from tests.executor_steps import WriteConfig, fail, write_text


def _by_name(plan):
    return {s.name: s for s in plan.steps}


def _step(name, text, inputs=(), fn=write_text):
    return ExecutorStep(name, fn, WriteConfig(this_output_path(), versioned(text), tuple(inputs)))


def test_run_only_matches_names_not_hash_suffixes():
    # Find a step "b" whose hash suffix holds a "c" (computed, not hard-coded: hashes may change).
    b = next(s for s in (_step("b", f"b{i}") for i in range(100)) if "c" in build_plan([s], "/p").steps[0].hash)
    c = _step("c", "c")
    plan = build_plan([b, c], "/p")
    assert [s.name for s in plan.select(["c"])] == ["c"]
    assert [s.name for s in plan.select(["^b$"])] == ["b"]


class Pair(NamedTuple):
    x: str
    y: int


@dataclasses.dataclass(frozen=True)
class PairConfig:
    output_path: str
    pair: Pair
    pairs: tuple[Pair, ...] = ()


def test_named_tuple_survives_placeholder_resolution():
    a = _step("a", "a")
    step = ExecutorStep(
        "p", write_text, PairConfig(this_output_path(), Pair(output_path_of(a, "f"), 1), (Pair("k", versioned(2)),))
    )
    plan = build_plan([step], "/p")
    cfg = plan.resolve_config(_by_name(plan)["p"])
    assert isinstance(cfg.pair, Pair) and cfg.pair.x == f"{_by_name(plan)['a'].output_path}/f"
    assert isinstance(cfg.pairs[0], Pair) and cfg.pairs[0].y == 2


def test_same_identity_with_another_function_is_a_plan_time_error():
    with pytest.raises(StepDefinitionError, match="their functions differ"):
        build_plan([_step("x", "t"), _step("x", "t", fn=fail)], "/p")


def test_two_closures_of_one_factory_are_one_step():
    def make():
        def fn(cfg):
            return cfg

        return fn

    plan = build_plan([_step("x", "t", fn=make()), _step("x", "t", fn=make())], "/p")
    assert len(plan.steps) == 1


def test_nonblocking_input_is_a_pseudo_dependency():
    parent = _step("parent", "p")
    child = ExecutorStep("child", write_text, WriteConfig(this_output_path(), "c", (parent.cd("ckpt").nonblocking(),)))
    plan = build_plan([child], "/p")
    by = _by_name(plan)
    assert by["child"].dependencies == [] and by["child"].pseudo_dependencies == [by["parent"]]
    assert by["child"].version["pseudo_dependencies"] == [by["parent"].identity]
    assert [s.name for s in plan.select(None)] == ["child"]  # the parent is not run ...
    assert [s.name for s in plan.select(["parent"])] == ["parent"]  # ... unless asked for
    assert plan.resolve_config(by["child"]).inputs == (f"{by['parent'].output_path}/ckpt",)
    blocking = ExecutorStep("child", write_text, WriteConfig(this_output_path(), "c", (parent.cd("ckpt"),)))
    assert _by_name(build_plan([blocking], "/p"))["child"].identity != by["child"].identity


def test_marin_spellings_resolve_like_output_path_of():
    a = _step("a", "a")
    refs = (
        output_path_of(a) / "x" / "y",
        a / "x/y",
        a.cd("x").cd("y"),
        InputName(step=a, name="x/y"),
        a.as_input_name() / "x/y",
    )
    step = ExecutorStep("b", write_text, WriteConfig(this_output_path(), "b", refs))
    plan = build_plan([step], "/p")
    assert set(plan.resolve_config(_by_name(plan)["b"]).inputs) == {f"{_by_name(plan)['a'].output_path}/x/y"}
    assert get_executor_step(refs[0]) is a and get_executor_step(a) is a
    assert ensure_versioned(ensure_versioned(3)) == versioned(3)
    pinned = a.with_output_path("elsewhere/a")
    assert build_plan([pinned], "/p").steps[0].output_path == "/p/elsewhere/a" and a.override_output_path is None


@dataclasses.dataclass(frozen=True)
class DefaultOutputConfig:
    x: int = 0
    output_path: str = THIS_OUTPUT_PATH


def test_this_output_path_as_field_default_and_config_none():
    plan = build_plan([ExecutorStep("d", write_text, DefaultOutputConfig()), ExecutorStep("n", write_text, None)], "/p")
    by = _by_name(plan)
    assert plan.resolve_config(by["d"]).output_path == by["d"].output_path
    assert plan.resolve_config(by["n"]) is None


def test_ray_remote_function_becomes_function_plus_resources():
    import ray

    remote = ray.remote(num_cpus=2)(write_text)
    ps = build_plan([_step("r", "r", fn=remote)], "/p").steps[0]
    assert ps.step.fn is write_text and ps.step.resources == {"num_cpus": 2}
    assert ps.fn_path.endswith(":write_text")


def test_pip_dependency_groups_become_a_locked_environment():
    step = dataclasses.replace(_step("g", "g"), pip_dependency_groups=["test", "some-package==1.0"])
    env = build_plan([step], "/p").steps[0].step.environment
    assert "pytest==9.2.0" in env.requirements and "some-package==1.0" in env.requirements
    assert "draccus==0.11.6" in env.requirements  # the base environment, as with Ray's runtime_env
    assert env.constraints.endswith(os.path.join("requirements", "constraints.txt"))
    lam = dataclasses.replace(_step("h", "h", fn=lambda c: c), pip_dependency_groups=["test"])
    with pytest.raises(StepDefinitionError, match="lambda or a nested function"):
        build_plan([lam], "/p")


@pytest.mark.parametrize(
    "text,expected",
    [
        (
            '{"date": "2024-09-28T13:29:20", "status": "WAITING", "message": null}\n'
            '{"date": "2024-09-28T13:29:21", "status": "RUNNING", "message": null}\n'
            '{"date": "2024-09-28T13:29:47", "status": "SUCCESS", "message": null}\n',
            "SUCCESS",
        ),
        (
            '{"date": "2024-09-28T13:29:21", "status": "RUNNING"}\n'
            '{"date": "2024-09-28T13:29:47", "status": "FAILED"}\n',
            "FAILED",
        ),
        ("SUCCESS", "SUCCESS"),
        ("not a status {", "CORRUPT"),
    ],
)
def test_marin_status_files_are_read(tmp_path, text, expected):
    (tmp_path / ".executor_status").write_text(text)
    assert read_status(str(tmp_path))["status"] == expected


def test_a_finished_marin_output_is_reused_and_never_written(tmp_path):
    marin_out = tmp_path / "marin" / "tokenized" / "docs-8c2f3a"
    marin_out.mkdir(parents=True)
    (marin_out / "part-0.jsonl").write_text("{}\n")
    (marin_out / ".executor_status").write_text(
        '{"date": "2024-09-28T13:29:21", "status": "RUNNING", "message": null}\n'
        '{"date": "2024-09-28T13:29:47", "status": "SUCCESS", "message": null}\n'
    )
    (marin_out / ".executor_info").write_text(json.dumps({"name": "tokenized/docs", "config": {}}))
    before = {p.name: p.stat().st_mtime_ns for p in marin_out.iterdir()}
    pinned = ExecutorStep(
        "tokenized/docs", fail, WriteConfig(this_output_path(), versioned("x")), override_output_path=str(marin_out)
    )
    report = Executor(ExecutorMainConfig(prefix=str(tmp_path / "ours"), backend="local")).run([pinned])
    assert report.executed == [] and report.failed == []
    assert {p.name: p.stat().st_mtime_ns for p in marin_out.iterdir()} == before


@pytest.mark.slow
def test_closure_and_local_config_run_on_the_local_backend(tmp_path):
    @dataclasses.dataclass(frozen=True)
    class Local:
        output_path: str
        word: str

    def fn(cfg):
        with open(os.path.join(cfg.output_path, "w.txt"), "w") as f:
            f.write(cfg.word)

    step = ExecutorStep("closure", fn, Local(this_output_path(), versioned("hi")))
    executor = marin_executor.Executor(str(tmp_path), backend="local")
    executor.run([step])
    assert Path(os.path.join(executor.output_paths[step], "w.txt")).read_text() == "hi"


def test_marin_executor_shows_the_last_plan_keyed_by_step_objects(tmp_path):
    a = _step("a", "a")
    b = _step("b", "b", inputs=[output_path_of(a)])
    twin = _step("a", "a")  # the same version as `a`: one planned step, two objects
    executor = marin_executor.Executor(str(tmp_path), backend="local")
    with pytest.raises(ExecutorConfigError, match="has not planned anything yet"):
        executor.output_paths  # noqa: B018
    plan = executor.plan([b, twin])
    by = _by_name(plan)
    assert executor.steps == [a, b]
    assert executor.output_paths[twin] == executor.output_paths[a] == by["a"].output_path
    assert executor.dependencies[b] == [a] and executor.dependencies[a] == []
    assert executor.versions[b] == by["b"].version and json.loads(executor.version_strs[b]) == by["b"].version
    assert executor.configs[b].inputs == (by["a"].output_path,)
    again = executor.plan([a])
    assert executor.steps == [a] and executor.last_plan is again


def test_core_executor_points_marin_attributes_to_the_marin_executor(tmp_path):
    executor = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local"))
    executor.plan([_step("a", "a")])
    with pytest.raises(AttributeError, match=r"Executor.output_paths is Marin's view .*marin_lab.marin.executor"):
        executor.output_paths  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'no_such_thing'"):
        executor.no_such_thing  # noqa: B018
    assert executor.last_plan is not None and not hasattr(executor, "steps")


def test_marin_resources_path_is_the_compat_module():
    import marin_lab.resources
    from marin_lab.marin import resources

    assert marin_lab.resources.CpuOnlyConfig is resources.CpuOnlyConfig
    assert marin_lab.resources.step_resources(resources.CpuOnlyConfig(num_cpus=3)) == ({"num_cpus": 3}, None, 1)


@dataclasses.dataclass(frozen=True)
class CheckpointsConfig:
    output_path: str
    marker: str
    """Unversioned rendezvous file: the evaluator writes it once it has read a checkpoint."""
    checkpoints: str | None = None


def _wait_for(path: str, what: str) -> None:
    import time

    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def train_until_evaluated(cfg: CheckpointsConfig) -> None:
    os.makedirs(os.path.join(cfg.output_path, "ckpt"))
    with open(os.path.join(cfg.output_path, "ckpt", "step-1"), "w") as f:
        f.write("1")
    _wait_for(cfg.marker, "the evaluator never ran while training was running")


def evaluate_checkpoint(cfg: CheckpointsConfig) -> None:
    _wait_for(os.path.join(cfg.checkpoints, "step-1"), "no checkpoint appeared")
    with open(cfg.marker, "w") as f:
        f.write("seen step-1")


@pytest.mark.slow
def test_nonblocking_input_runs_beside_a_training_step_still_running(tmp_path):
    """Marin's use of `.nonblocking()`: evaluate the checkpoints of a run that has not finished.
    Waiting for the trainer would deadlock here (it finishes only after the evaluator has run)."""
    marker = str(tmp_path / "evaluated")
    train = ExecutorStep("train", train_until_evaluated, CheckpointsConfig(this_output_path(), marker))
    evaluate = ExecutorStep(
        "eval", evaluate_checkpoint, CheckpointsConfig(this_output_path(), marker, train.cd("ckpt").nonblocking())
    )
    report = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local", max_concurrent=2)).run(
        [train, evaluate]
    )
    assert len(report.executed) == 2 and report.failed == []
    assert Path(marker).read_text() == "seen step-1"


def test_marin_executor_module_holds_every_name_a_marin_import_line_needs():
    import marin_lab.execution

    for name in marin_executor.__all__:
        assert hasattr(marin_executor, name), name
    assert marin_executor.ExecutorStep is marin_lab.execution.ExecutorStep
    assert marin_executor.executor_main is marin_lab.execution.executor_main
    assert issubclass(marin_executor.Executor, marin_lab.execution.Executor)
