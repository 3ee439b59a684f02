"""Marin's current API under hostile input: versions outside Marin's grammar, two recipes at one
address, endless step iterables, and the fingerprint's strict mode and registered forms."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import marin_lab.marin.fingerprint as fingerprint_module
from marin_lab.execution.errors import StepDefinitionError
from marin_lab.execution.review.regions import CrossRegionError, Regions
from marin_lab.marin.artifact import Artifact
from marin_lab.marin.fingerprint import canonical_json, register_fingerprint, set_strict
from marin_lab.marin.lazy import ArtifactStep, lower, run
from marin_lab.marin.step_runner import StepRunner
from marin_lab.marin.step_spec import StepSpec


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def _step(name: str, version: str, value: int = 1) -> ArtifactStep:
    return ArtifactStep(
        name=name,
        version=version,
        artifact_type=Artifact,
        run=lambda config: None,
        build_config=lambda ctx: {"value": value},
    )


@pytest.mark.parametrize("version", ["team/exp-dev", "a/dev-dev", "-dev", "my label-dev", "é-dev"])
def test_a_dev_label_outside_marins_grammar_is_refused(version):
    """Regression: `lab@team/exp-dev` was accepted and shared its folder with `lab/team@exp-dev`."""
    with pytest.raises(ValueError, match=r"ArtifactStep 'lab': version .*one path segment") as err:
        _step("lab", version)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("version", ["dev", "exp-dev", "my.exp_2-dev", "a-b-dev", "2026.01.01", "2026.01.01.3"])
def test_versions_in_marins_grammar_are_accepted(version):
    assert _step("lab", version).version == version


# --- two recipes at one address ------------------------------------------------------------------


def _recipe(value: int, built: list[int], name: str = "twin", version: str = "2026.01.01") -> ArtifactStep:
    def build(config: dict) -> None:
        built.append(config["value"])

    return ArtifactStep(
        name=name, version=version, artifact_type=Artifact, run=build, build_config=lambda ctx: {"value": value}
    )


def test_two_recipes_at_one_address_are_refused_naming_both_before_anything_is_written(tmp_path, monkeypatch):
    """Regression: twin@2026.01.01 twice with different recipes ran one and served it to both."""
    prefix = tmp_path / "store"
    monkeypatch.setenv("MARIN_PREFIX", str(prefix))
    built: list[int] = []
    first, second = _recipe(1, built), _recipe(2, built)
    with pytest.raises(StepDefinitionError) as err:
        run(first, second)
    text = str(err.value)
    assert "\n" not in text and f"{prefix}/twin/2026.01.01" in text
    assert f"twin@2026.01.01 (fingerprint {first.fingerprint()})" in text
    assert f"twin@2026.01.01 (fingerprint {second.fingerprint()})" in text
    assert "bump the version" in text
    assert built == [] and _files(prefix) == []


def test_one_recipe_built_by_two_handles_is_one_step(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path))
    built: list[int] = []
    run(_recipe(1, built), _recipe(1, built))
    assert built == [1]


def test_two_plain_steps_pinned_to_one_path_are_refused(tmp_path):
    out = (tmp_path / "out").as_posix()
    a = StepSpec(name="a", override_output_path=out, hash_attrs={"x": 1}, fn=lambda p: None)
    b = StepSpec(name="a", override_output_path=out, hash_attrs={"x": 2}, fn=lambda p: None)
    with pytest.raises(StepDefinitionError, match=r"two different steps at .*/out: step 'a' .* and step 'a'"):
        StepRunner(prefix=str(tmp_path)).run([a, b])
    assert not (tmp_path / "out").exists()


# --- steps consumed lazily -----------------------------------------------------------------------


def test_an_endless_generator_is_read_in_bounded_batches(tmp_path):
    """Regression: the runner flattened its iterable first, so an endless generator grew until the
    OOM killer ended the process. Here the generator refuses to run that far ahead."""
    batch = 4
    ran: list[str] = []
    pulled_when_first_ran: list[int] = []
    pulled = 0
    stop = threading.Event()

    def step(i: int) -> StepSpec:
        def fn(output_path: str) -> None:
            if not ran:
                pulled_when_first_ran.append(pulled)
            ran.append(output_path)
            if len(ran) >= 10:
                stop.set()

        return StepSpec(name=f"s{i}", override_output_path=(tmp_path / f"s{i}").as_posix(), fn=fn)

    def endless():
        nonlocal pulled
        while not stop.is_set():
            if pulled - len(ran) > 10 * batch:
                raise AssertionError(f"pulled {pulled} steps while {len(ran)} ran: the iterable is read ahead")
            pulled += 1
            yield step(pulled)

    StepRunner(prefix=str(tmp_path), batch_size=batch).run(endless())
    assert len(ran) >= 10
    assert pulled_when_first_ran[0] <= 2 * batch + 2
    assert pulled - len(ran) <= 2 * batch + 2  # what was read was run, but for the steps in flight


def test_a_generator_may_wait_for_an_earlier_steps_output(tmp_path):
    """A sweep that reads step k's result before yielding step k+1 is served: the iterable is read
    beside the running batch, not before it."""
    first = tmp_path / "first"

    def sweep():
        yield StepSpec(name="first", override_output_path=first.as_posix(), fn=lambda p: (first / "x").write_text("7"))
        deadline = time.monotonic() + 60
        while not (first / "x").exists():
            if time.monotonic() > deadline:
                raise AssertionError("the first step never ran while the iterable waited for it")
            time.sleep(0.01)
        value = (first / "x").read_text()
        yield StepSpec(
            name="second",
            override_output_path=(tmp_path / "second").as_posix(),
            fn=lambda p: Path(p, "x").write_text(value * 2),
        )

    StepRunner(prefix=str(tmp_path)).run(sweep())
    assert (tmp_path / "second" / "x").read_text() == "77"


def test_a_later_batch_may_not_put_another_recipe_at_an_address_built_earlier(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path))
    built: list[int] = []
    steps = (lower(h) for h in (_recipe(1, built), _recipe(2, built)))
    with pytest.raises(StepDefinitionError, match=r"twin@2026\.01\.01 \(fingerprint .*\) and twin@2026\.01\.01"):
        StepRunner(batch_size=1).run(steps)
    assert built == [1]  # the first batch ran; the second, refused, wrote nothing


def test_a_mutable_dependency_shared_across_batches_builds_once_per_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path))
    built: list[int] = []
    shared = _recipe(0, built, name="shared", version="exp-dev")

    def child(i: int) -> ArtifactStep:
        return ArtifactStep(
            name=f"child{i}",
            version="exp-dev",
            artifact_type=Artifact,
            run=lambda config: built.append(config["i"]),
            build_config=lambda ctx: {"i": i, "dep": ctx.artifact_path(shared)},
            deps=(shared,),
        )

    StepRunner(batch_size=1).run(lower(child(i)) for i in (1, 2, 3))
    assert sorted(built) == [0, 1, 2, 3]
    StepRunner(batch_size=1).run(lower(child(i)) for i in (1, 2))  # a new run rebuilds dev once more
    assert sorted(built) == [0, 0, 1, 1, 2, 2, 3]


def test_an_error_in_the_iterable_is_raised_after_the_steps_it_yielded(tmp_path):
    ran: list[str] = []

    def broken():
        yield StepSpec(name="ok", override_output_path=(tmp_path / "ok").as_posix(), fn=ran.append)
        raise ValueError("the sweep's own bug")

    with pytest.raises(ValueError, match="the sweep's own bug"):
        StepRunner(prefix=str(tmp_path), batch_size=1).run(broken())
    assert ran == [(tmp_path / "ok").as_posix()]


def test_each_batch_passes_the_egress_guard_before_it_runs(tmp_path):
    """A cross-region read in a later batch is refused before that batch runs (the earlier ran)."""
    regions = Regions({"us-data": "us-central1", "eu-data": "europe-west4"}.__getitem__, size=lambda url: 10)
    ran: list[str] = []
    eu = StepSpec(name="eu/raw", override_output_path="gs://eu-data/raw", fn=ran.append)

    def steps():
        yield StepSpec(name="local", override_output_path=(tmp_path / "local").as_posix(), fn=ran.append)
        yield StepSpec(name="us/copy", override_output_path="gs://us-data/copy", deps=[eu], fn=ran.append)

    with pytest.raises(CrossRegionError, match="gs://eu-data/raw"):
        StepRunner(prefix=str(tmp_path), batch_size=1, regions=regions).run(steps())
    assert ran == [(tmp_path / "local").as_posix()]


# --- fingerprint: strict mode and registered forms -------------------------------------------------


@pytest.fixture
def _strict_restored():
    saved = fingerprint_module._STRICT_OVERRIDE
    yield
    fingerprint_module._STRICT_OVERRIDE = saved


def test_strict_mode_refuses_a_callable_in_a_recipe_naming_the_artifact(tmp_path, monkeypatch, _strict_restored):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    handle = ArtifactStep(
        name="fn", version="dev", artifact_type=Artifact, run=lambda c: None, build_config=lambda ctx: {"f": len}
    )
    assert handle.fingerprint()  # advisory by default, as in Marin: a stand-in, no error
    set_strict(True)
    with pytest.raises(TypeError, match=r"^ArtifactStep fn@dev: cannot fingerprint .*a callable") as err:
        run(handle)
    assert "\n" not in str(err.value)
    assert _files(tmp_path / "store") == []
    set_strict(False)
    monkeypatch.setenv("MARIN_FINGERPRINT_STRICT", "yes")
    assert handle.fingerprint()  # set_strict overrides the environment


def test_the_environment_switch_turns_strict_mode_on(monkeypatch, _strict_restored):
    fingerprint_module._STRICT_OVERRIDE = None
    monkeypatch.setenv("MARIN_FINGERPRINT_STRICT", "true")
    with pytest.raises(TypeError, match="MARIN_FINGERPRINT_STRICT=0"):
        canonical_json({"o": object()})
    monkeypatch.setenv("MARIN_FINGERPRINT_STRICT", "0")
    assert canonical_json({"o": 1}) == '{"o": 1}'


def test_a_registered_form_applies_to_subclasses_and_fixes_the_fingerprint(_strict_restored):
    class Tokenizer:
        def __init__(self, name: str) -> None:
            self.name = name
            self.cache = object()  # would fork a stand-in's fingerprint from one process to the next

    class FastTokenizer(Tokenizer):
        pass

    register_fingerprint(Tokenizer, lambda t: {"tokenizer": t.name})
    set_strict(True)
    assert canonical_json({"t": FastTokenizer("gpt2")}) == '{"t": {"tokenizer": "gpt2"}}'
