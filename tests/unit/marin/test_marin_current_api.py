"""Marin's current API (name@version ArtifactSteps, marin_lab.marin.lazy) on marin_lab's executor.

Marin's own tests of the API are in tests/marin_ported/execution and experiment; these cover what
is ours: one executor and one store for both identities (records, status, explain, gc, mixed
DAGs, retries, resources) and bad input that writes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.cli import main as cli_main
from marin_lab.cluster.resources import TpuResources
from marin_lab.execution import ExecutorMainConfig, ExecutorStep, output_path_of, this_output_path
from marin_lab.execution.executor import Executor
from marin_lab.execution.state.status import read_status
from marin_lab.gc import find_garbage
from marin_lab.marin.artifact import (
    Artifact,
    ArtifactTypeMismatchError,
    FingerprintMismatchError,
    read_record,
)
from marin_lab.marin.cli import experiment_main
from marin_lab.marin.lazy import OUT, ArtifactStep, apply, executor_step, lower, run
from marin_lab.marin.remote import remote
from marin_lab.marin.resources import ResourceConfig
from marin_lab.marin.step_runner import StepRunner, executor_steps
from marin_lab.store.errors import RecordError
from marin_lab.store.step_record import read_step_record

REPO = Path(__file__).resolve().parents[3]
HELLO = REPO / "tests" / "marin_ported" / "data" / "hello_world.py"
V = "2026.06.28"


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


# --- a Marin tutorial, end to end --------------------------------------------------------------


@pytest.mark.slow
def test_marin_hello_world_tutorial_runs_end_to_end(tmp_path, capsys, monkeypatch):
    """Marin's experiments/tutorials/hello_world.py (current API), imports changed only."""
    tmp_path, scratch = tmp_path / "store", tmp_path / "scratch"
    tmp_path.mkdir()
    env = {**os.environ, "MARIN_PREFIX": str(tmp_path), "PYTHONPATH": str(REPO)}
    for _ in range(2):  # the second run rebuilds its `dev` artifacts in place
        done = subprocess.run(
            [sys.executable, str(HELLO)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr[-3000:]
    stats = json.loads((tmp_path / "hello_world" / "stats" / "dev" / "stats.json").read_text())
    assert stats == {"sum": 4950, "min": 0, "max": 99}
    record = read_record(str(tmp_path / "hello_world" / "stats" / "dev"))
    assert record is not None and record.deps == ["hello_world/data@dev"] and len(record.fingerprint) == 8
    step = read_step_record(str(tmp_path / "hello_world" / "stats" / "dev"))
    # One attempt per run: the dev rebuild is recorded in the same history.
    assert step is not None and step.status == "SUCCESS" and len(step.attempts) == 2
    assert (read_status(str(tmp_path / "hello_world" / "data" / "dev")) or {}).get("status") == "SUCCESS"

    assert cli_main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "= hello_world/stats@dev (fingerprint" in out and "SUCCESS" in out
    candidates, _ = find_garbage(str(tmp_path), 0.0)
    assert [c.url for c in candidates if "hello_world" in c.url] == []

    # `marin-lab reproduce` reruns the recorded script into a scratch prefix and compares outputs.
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path))
    (experiment,) = (tmp_path / "experiments").glob("hello_world-*.json")
    assert cli_main(["reproduce", str(experiment), "--into", str(scratch), "--backend", "local"]) == 0
    assert "2 steps: 2 identical" in capsys.readouterr().out
    assert json.loads((scratch / "hello_world" / "stats" / "dev" / "stats.json").read_text())["sum"] == 4950


# --- one DAG, both identities ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WriteConfig:
    text: str
    output_path: str = this_output_path()


def write_text(config: WriteConfig) -> None:
    os.makedirs(config.output_path, exist_ok=True)
    Path(config.output_path, "text.txt").write_text(config.text)


@dataclasses.dataclass(frozen=True)
class CopyConfig:
    input_path: str
    output_path: str = this_output_path()


def copy_upper(config: CopyConfig) -> None:
    os.makedirs(config.output_path, exist_ok=True)
    text = Path(config.input_path, "text.txt").read_text()
    Path(config.output_path, "text.txt").write_text(text.upper() + "!")


def _upper(input_path: str, output_path: str) -> None:
    os.makedirs(output_path, exist_ok=True)
    Path(output_path, "text.txt").write_text(Path(input_path, "text.txt").read_text().upper())


@pytest.mark.slow
def test_one_dag_mixes_hashed_steps_and_name_version_artifacts(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path))
    hashed = ExecutorStep(name="raw/text", fn=write_text, config=WriteConfig(text="hello"))
    artifact = apply("data/upper", _upper, version=V, input_path=hashed, output_path=OUT)
    # The ExecutorStep enters the artifact's fingerprint by its hashed identity.
    assert "raw/text@raw/text-" in artifact.fingerprint_payload()

    run(artifact)
    art_path = tmp_path / "data" / "upper" / V
    assert (art_path / "text.txt").read_text() == "HELLO"
    hashed_dirs = [p.name for p in (tmp_path / "raw").iterdir()]
    assert len(hashed_dirs) == 1 and hashed_dirs[0].startswith("text-")  # {prefix}/{name}-{hash8}
    # One reader for both: an ExecutorStep's own record (.executor_info) reads as an ArtifactRecord.
    hashed_record = read_record(str(tmp_path / "raw" / hashed_dirs[0]))
    assert hashed_record is not None and hashed_record.name == "raw/text"
    assert hashed_record.output_path == str(tmp_path / "raw" / hashed_dirs[0])

    # The reverse: an ExecutorStep reading the artifact, run by executor_main (the artifact is reused).
    consumer = ExecutorStep(
        name="final/copy", fn=copy_upper, config=CopyConfig(input_path=output_path_of(executor_step(artifact)))
    )
    Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run([consumer])
    copied = next((tmp_path / "final").iterdir())
    assert (copied / "text.txt").read_text() == "HELLO!"
    assert read_record(str(art_path)).name == "data/upper"


# --- retries, records, resources ---------------------------------------------------------------


def _flaky(marker: str, output_path: str) -> None:
    if not os.path.exists(marker):
        Path(marker).write_text("failed once")
        raise RuntimeError("transient failure")
    os.makedirs(output_path, exist_ok=True)


def test_a_failed_attempt_is_retried_within_the_failure_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    handle = apply("data/flaky", _flaky, version=V, marker=str(tmp_path / "marker"), output_path=OUT)
    StepRunner(max_failure_retries=1).run([lower(handle)])
    step = read_step_record(str(tmp_path / "store" / "data" / "flaky" / V))
    assert step is not None and step.status == "SUCCESS"
    assert [a.status for a in step.attempts] == ["FAILED", "SUCCESS"]


def _noop(**_kwargs):
    return None


def test_remote_resources_become_the_steps_executor_resources(monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", "gs://bucket/prefix")
    handle = ArtifactStep(
        name="train/x",
        version=V,
        artifact_type=Artifact,
        run=remote(_noop, resources=ResourceConfig.with_tpu("v5p-8", slice_count=2)),
        build_config=lambda ctx: {"out": ctx.output_path},
    )
    (step,) = executor_steps([lower(handle)])
    assert isinstance(step.resources, TpuResources)
    assert (step.resources.tpu, step.resources.slices) == ("v5p-8", 2)
    assert step.override_output_path == f"train/x/{V}"


# --- explain: recipe drift field by field ------------------------------------------------------

_EXPERIMENT = """
import os
from marin_lab.marin.lazy import OUT, apply
from marin_lab.marin.cli import experiment_main


def make(output_path, lr, steps):
    os.makedirs(output_path, exist_ok=True)


def build():
    return apply("models/toy", make, output_path=OUT, lr=float(os.environ["TOY_LR"]), steps=10)


if __name__ == "__main__":
    experiment_main(build)()
"""


@pytest.mark.slow
def test_explain_names_the_recipe_fields_that_drifted(tmp_path, monkeypatch, capsys, caplog):
    script = tmp_path / "toy_experiment.py"
    script.write_text(_EXPERIMENT)
    prefix = tmp_path / "store"
    monkeypatch.setenv("MARIN_PREFIX", str(prefix))
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOY_LR": "0.001"}
    done = subprocess.run(
        [sys.executable, str(script), "--version", V, "--run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    monkeypatch.setenv("TOY_LR", "0.003")
    assert cli_main(["explain", "--prefix", str(prefix), str(script), "--", "--version", V, "--run"]) == 0
    out = capsys.readouterr().out
    assert f"models/toy/{V}" in out and "holds another version" in out
    assert "recipe.lr" in out and "0.001" in out and "0.003" in out


# --- bad input: Marin's errors, nothing written --------------------------------------------------


class Value(Artifact):
    x: int = 0


class OtherValue(Artifact):
    note: str = ""


def _value(version: str, x: int, kind: type[Artifact] = Value) -> ArtifactStep:
    return ArtifactStep(
        name="values/v",
        version=version,
        artifact_type=kind,
        run=lambda config: kind(**({"x": config["x"]} if kind is Value else {})),
        build_config=lambda ctx: {"x": x},
    )


def test_bad_input_fails_before_anything_is_written(tmp_path, monkeypatch):
    prefix = tmp_path / "store"
    monkeypatch.setenv("MARIN_PREFIX", str(prefix))
    with pytest.raises(ValueError, match="calendar version"):
        _value("v1", 1)
    dev = _value("dev", 1)
    parent = ArtifactStep(
        name="values/p",
        version=V,
        artifact_type=Value,
        run=lambda c: Value(),
        build_config=lambda ctx: {"d": ctx.artifact_path(dev)},
        deps=(dev,),
    )
    with pytest.raises(ValueError, match="depends on mutable"):
        run(parent)
    orphan = _value(V, 1)
    undeclared = ArtifactStep(
        name="values/u",
        version=V,
        artifact_type=Value,
        run=lambda c: Value(),
        build_config=lambda ctx: {"d": ctx.artifact_path(orphan)},
    )
    with pytest.raises(ValueError, match="not a declared dependency"):
        run(undeclared)
    no_arg = ArtifactStep(
        name="values/r",
        version=V,
        artifact_type=Value,
        run=lambda c: Value(),
        build_config=lambda ctx: {"tpu": ctx.runtime_arg("tpu")},
    )
    with pytest.raises(KeyError, match="runtime arg 'tpu' is not declared"):
        run(no_arg)
    with pytest.raises(RuntimeError, match="cannot adopt"):
        run(ArtifactStep.adopt("values/a", V, source="nowhere"))
    with pytest.raises(FingerprintMismatchError, match="expected_fingerprint pins deadbeef"):
        run(dataclasses.replace(_value(V, 1), expected_fingerprint="deadbeef"))
    result = CliRunner().invoke(
        experiment_main(lambda: apply("values/c", _noop, x=1)),
        ["--version", V, "--override", "values/typo=2026.01.01", "--run"],
    )
    assert result.exit_code != 0 and "values/typo" in result.output
    assert _files(prefix) == []


def test_drift_under_a_pin_and_a_changed_result_type_write_nothing(tmp_path, monkeypatch):
    prefix = tmp_path / "store"
    monkeypatch.setenv("MARIN_PREFIX", str(prefix))
    run(_value(V, 1))
    before = {p: (prefix / p).read_bytes() for p in _files(prefix)}

    changed = _value(V, 2)
    with pytest.raises(FingerprintMismatchError, match="pinned to expected_fingerprint"):
        run(dataclasses.replace(changed, expected_fingerprint=changed.fingerprint()))
    with pytest.raises(ArtifactTypeMismatchError, match="recorded result_type is"):
        run(_value(V, 1, kind=OtherValue))
    assert {p: (prefix / p).read_bytes() for p in _files(prefix)} == before


# --- the browser ---------------------------------------------------------------------------------


def test_browser_shows_name_version_fingerprint_and_drift(tmp_path, monkeypatch, caplog):
    prefix = tmp_path / "store"
    monkeypatch.setenv("MARIN_PREFIX", str(prefix))
    run(_value(V, 1))
    run(_value(V, 2))  # same name@version, another recipe: the built output is reused, with a warning
    assert "recipe drift" in caplog.text

    browser = Browser(str(prefix), Roots.of([str(prefix)]))
    experiments = browser.experiments()
    rows = [row for e in experiments for row in browser.experiment(e["id"])["steps"]]
    by_fp = {row["artifact"]["fingerprint"]: row["artifact"] for row in rows}
    first, second = _value(V, 1).fingerprint(), _value(V, 2).fingerprint()
    assert by_fp[first] == {
        "address": f"values/v@{V}",
        "fingerprint": first,
        "built_fingerprint": first,
        "drift": False,
    }
    assert by_fp[second]["drift"] is True and by_fp[second]["built_fingerprint"] == first
    step = browser.step(str(prefix / "values" / "v" / V))
    assert (step["artifact"]["name"], step["artifact"]["version"], step["artifact"]["fingerprint"]) == (
        "values/v",
        V,
        first,
    )
    assert step["artifact"]["result"] == {"x": 1}


def _dev_parent():
    dev = apply("values/dev", _noop, version="dev", x=1)
    return apply("values/fixed", _noop, data=dev)


def test_experiment_cli_reports_bad_input_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    result = CliRunner().invoke(experiment_main(_dev_parent), ["--version", V, "--run"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: values/fixed@2026.06.28 is a fixed version but depends on mutable")
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert _files(tmp_path / "store") == []


def _tokens() -> ArtifactStep:
    return apply("data/tokens", _upper, version=V, input_path="/nowhere", output_path=OUT)


def test_a_builder_called_twice_is_one_step_in_an_executor_dag(tmp_path):
    # Marin's experiments call builders freely: two handle objects of one name@version are one step.
    steps = [executor_step(_tokens()), executor_step(_tokens())]
    plan = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).plan(steps)
    assert [ps.output_path for ps in plan.steps] == [str(tmp_path / "data" / "tokens" / V)]


def test_read_record_reads_marin_ray_era_info_and_ours_only_when_done(tmp_path):
    marin = tmp_path / "marin_cache"
    marin.mkdir()
    (marin / ".executor_info").write_text(
        json.dumps(
            {
                "name": "tokenized/dclm",
                "output_path": str(marin),
                "dependencies": ["gs://b/raw/dclm-abc123"],
                "config": {"tokenizer": "meta-llama/Meta-Llama-3.1-8B", "format": "text"},
                "version": {"x": 1},
            }
        )
    )
    record = read_record(str(marin))
    assert (record.name, record.config["tokenizer"], record.deps) == (
        "tokenized/dclm",
        "meta-llama/Meta-Llama-3.1-8B",
        ["gs://b/raw/dclm-abc123"],
    )
    ours = tmp_path / "ours"
    ours.mkdir()
    running = {"schema": 1, "name": "data/x", "output_path": str(ours), "status": "RUNNING", "config": {"n": 1}}
    (ours / ".executor_info").write_text(json.dumps(running))
    assert read_record(str(ours)) is None  # a step still running has no record to serve
    (ours / ".executor_info").write_text(json.dumps({**running, "status": "SUCCESS"}))
    assert read_record(str(ours)).config == {"n": 1}


def test_one_parser_reads_artifact_records_for_the_api_and_the_browser(tmp_path):
    out = tmp_path / "data" / "x" / V
    out.mkdir(parents=True)
    record = {"name": "data/x", "version": V, "fingerprint": "f1", "result_type": "m.T", "deps": ["raw/y@" + V]}
    (out / ".artifact.json").write_text(json.dumps(record))
    assert read_record(str(out)).deps == ["raw/y@" + V]
    browser = Browser(str(tmp_path), Roots.of([str(tmp_path)]))
    assert browser._artifact_record(str(out))["fingerprint"] == "f1"
    (out / ".artifact.json").write_text(json.dumps({**record, "deps": "raw/y"}))
    with pytest.raises(RecordError, match=r"\.artifact\.json: field 'deps' is str, expected a list of strings"):
        read_record(str(out))
    assert browser._artifact_record(str(out)) is None
