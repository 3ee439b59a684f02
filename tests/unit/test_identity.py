"""Identity hashing and planning: golden paths, prefix independence, strictness, validation."""

from __future__ import annotations

import dataclasses
import enum
import pathlib

import pytest

from marin_lab.execution import (
    CycleError,
    EncodingError,
    Executor,
    ExecutorConfigError,
    ExecutorStep,
    InputName,
    MissingDependencyError,
    StepDefinitionError,
    output_path_of,
    this_output_path,
    versioned,
)
from marin_lab.execution.plan import build_plan
from tests.executor_steps import WriteConfig, five_step_dag, write_text


def _by_name(plan):
    return {s.name: s for s in plan.steps}


# Regression guard for the hashing scheme: changing any of these is a deliberate, documented
# change (every recorded output path in every prefix moves).
GOLDEN = {
    "raw/a": "raw/a-20e829c8",
    "proc/b": "proc/b-f5207c88",
    "proc/c": "proc/c-447a31cb",
    "join/d": "join/d-0a1a2b04",
    "final/e": "final/e-295bc36d",
}


def test_golden_output_paths_of_reference_dag():
    plan = build_plan(five_step_dag(), "/prefix")
    got = {s.name: s.identity for s in plan.steps}
    assert got == GOLDEN
    assert all(s.output_path == f"/prefix/{s.identity}" for s in plan.steps)


def test_version_shape_is_documented_shape():
    plan = build_plan(five_step_dag(), "/p")
    d = _by_name(plan)["join/d"]
    assert d.version == {
        "name": "join/d",
        "config": {"text": "d", "inputs.0": "DEP[0]", "inputs.1": "DEP[1]"},
        "dependencies": [GOLDEN["proc/b"], GOLDEN["proc/c"]],
    }


def test_same_suffixes_under_two_prefixes():
    a = build_plan(five_step_dag(), "/local/prefix")
    b = build_plan(five_step_dag(), "gs://bucket-in-another-region/deep/prefix")
    assert [s.identity for s in a.steps] == [s.identity for s in b.steps]
    assert _by_name(b)["final/e"].output_path == f"gs://bucket-in-another-region/deep/prefix/{GOLDEN['final/e']}"


def test_unversioned_change_keeps_identity():
    base = build_plan(five_step_dag(), "/p")
    knobs = build_plan(five_step_dag(log_path="/tmp/x.log", sleep_s=0.5), "/p")
    assert [s.identity for s in base.steps] == [s.identity for s in knobs.steps]


def test_versioned_change_propagates_downstream_only():
    base = _by_name(build_plan(five_step_dag(text="a"), "/p"))
    changed = _by_name(build_plan(five_step_dag(text="A"), "/p"))
    assert all(base[n].identity != changed[n].identity for n in base)  # a is the root of everything

    # Change only c: a and b keep their identities; c, d, e move.
    def dag(c_text):
        a = ExecutorStep("raw/a", write_text, WriteConfig(this_output_path(), versioned("a")))
        b = ExecutorStep("proc/b", write_text, WriteConfig(this_output_path(), versioned("b"), (output_path_of(a),)))
        c = ExecutorStep("proc/c", write_text, WriteConfig(this_output_path(), versioned(c_text), (output_path_of(a),)))
        d = ExecutorStep("join/d", write_text, WriteConfig(this_output_path(), versioned("d"),
                                                           (output_path_of(b), output_path_of(c))))
        return _by_name(build_plan([d], "/p"))

    one, two = dag("c"), dag("c2")
    assert one["raw/a"].identity == two["raw/a"].identity
    assert one["proc/b"].identity == two["proc/b"].identity
    assert one["proc/c"].identity != two["proc/c"].identity
    assert one["join/d"].identity != two["join/d"].identity


def test_subpath_of_dependency_enters_identity_and_resolves():
    a = ExecutorStep("raw/a", write_text, WriteConfig(this_output_path(), versioned("a")))
    b1 = ExecutorStep("b", write_text, WriteConfig(this_output_path("out"), versioned("b"), (output_path_of(a, "x"),)))
    b2 = ExecutorStep("b", write_text, WriteConfig(this_output_path("out"), versioned("b"), (a.cd("y"),)))
    p1, p2 = build_plan([b1], "/p"), build_plan([b2], "/p")
    assert _by_name(p1)["b"].identity != _by_name(p2)["b"].identity
    cfg = p1.resolve_config(_by_name(p1)["b"])
    assert cfg.inputs == (f"/p/{_by_name(p1)['raw/a'].identity}/x",)
    assert cfg.output_path == f"/p/{_by_name(p1)['b'].identity}/out"
    assert cfg.text == "b"


def test_duplicate_steps_are_one_step():
    a1 = ExecutorStep("raw/a", write_text, WriteConfig(this_output_path(), versioned("a")))
    a2 = ExecutorStep("raw/a", write_text, WriteConfig(this_output_path(), versioned("a")))
    b = ExecutorStep("b", write_text, WriteConfig(this_output_path(), versioned("b"),
                                                  (output_path_of(a1), output_path_of(a2))))
    plan = build_plan([b, a2], "/p")
    assert [s.name for s in plan.steps] == ["raw/a", "b"]
    assert _by_name(plan)["b"].version["dependencies"] == [_by_name(plan)["raw/a"].identity]


class Color(enum.Enum):
    RED = 1


@dataclasses.dataclass(frozen=True)
class Inner:
    n: int
    p: pathlib.Path


@dataclasses.dataclass(frozen=True)
class AnyConfig:
    output_path: str
    value: object = None


@pytest.mark.parametrize("value", [
    None, True, 3, 2.5, "s", [1, "x"], (1, 2), {"k": [1, {"j": None}]}, Color.RED, pathlib.Path("/a/b"),
    Inner(1, pathlib.Path("x")),
])
def test_encoder_accepts_json_like_values(value):
    step = ExecutorStep("s", write_text, AnyConfig(this_output_path(), versioned(value)))
    build_plan([step], "/p")


@pytest.mark.parametrize("value,fragment", [
    (lambda x: x, "is a function"),
    (object(), "is a object"),
    ({1: "a"}, "dict key 1"),
    ({"ok": {2, 3}}, "field 'value'['ok'] is a set"),
    (float("nan"), "must be finite"),
    (b"bytes", "is a bytes"),
])
def test_encoder_rejects_with_step_and_field(value, fragment):
    step = ExecutorStep("tokenize/docs", write_text, AnyConfig(this_output_path(), versioned(value)))
    with pytest.raises(EncodingError) as err:
        build_plan([step], "/p")
    assert "step 'tokenize/docs'" in str(err.value)
    assert "value" in str(err.value)
    assert fragment in str(err.value)


def test_cycle_is_detected_and_named():
    a = ExecutorStep("a", write_text, WriteConfig(this_output_path(), versioned("a"), inputs=[]))
    b = ExecutorStep("b", write_text, WriteConfig(this_output_path(), versioned("b"), (output_path_of(a),)))
    a.config.inputs.append(output_path_of(b))  # only a mutable config can close a cycle
    with pytest.raises(CycleError, match="'a' -> 'b' -> 'a'|'b' -> 'a' -> 'b'"):
        build_plan([b], "/p")


def test_dependency_by_name_not_in_dag():
    b = ExecutorStep("b", write_text, WriteConfig(this_output_path(), versioned("b"), (output_path_of("raw/missing"),)))
    with pytest.raises(MissingDependencyError, match="step 'b': field 'inputs.0' depends on step 'raw/missing'"):
        build_plan([b], "/p")


def test_dependency_by_name_resolves():
    a = ExecutorStep("raw/a", write_text, WriteConfig(this_output_path(), versioned("a")))
    b = ExecutorStep("b", write_text, WriteConfig(this_output_path(), versioned("b"), (output_path_of("raw/a", "f"),)))
    plan = build_plan([b, a], "/p")
    assert plan.resolve_config(_by_name(plan)["b"]).inputs == (f"{_by_name(plan)['raw/a'].output_path}/f",)


@pytest.mark.parametrize("name", ["", "/abs", "a/../b", "has space", "a//b"])
def test_bad_names(name):
    with pytest.raises(StepDefinitionError):
        build_plan([ExecutorStep(name, write_text, WriteConfig(this_output_path(), versioned("a")))], "/p")


def test_non_dataclass_config_is_an_error():
    with pytest.raises(StepDefinitionError, match="must be a dataclass"):
        build_plan([ExecutorStep("x", write_text, {"output_path": this_output_path()})], "/p")


def test_override_output_path_pins_path_and_keeps_identity(caplog):
    s = ExecutorStep("raw/a", write_text, WriteConfig(this_output_path(), versioned("a")),
                     override_output_path="pinned/raw-a")
    plan = build_plan([s], "/p")
    ps = plan.steps[0]
    assert ps.output_path == "/p/pinned/raw-a"
    assert ps.identity == GOLDEN["raw/a"]
    assert "pinned" in caplog.text


def test_hardcoded_input_is_relative_to_prefix_and_prefix_free_in_identity():
    s = ExecutorStep("b", write_text, WriteConfig(this_output_path(), versioned("b"),
                                                  (InputName.hardcoded("raw/external"),)))
    p1, p2 = build_plan([s], "/one"), build_plan([s], "/two")
    assert p1.steps[0].identity == p2.steps[0].identity
    assert p1.resolve_config(p1.steps[0]).inputs == ("/one/raw/external",)


def test_bad_run_only_regex_and_no_match(tmp_path):
    ex = Executor(str(tmp_path), backend="local")
    plan = ex.plan(five_step_dag())
    with pytest.raises(ExecutorConfigError, match="not a valid regular expression"):
        ex.select(plan, ["("])
    with pytest.raises(ExecutorConfigError, match="matches no step"):
        ex.select(plan, ["nothing-like-this"])
    chosen = ex.select(plan, ["^proc/b$"])
    assert [s.name for s in chosen] == ["raw/a", "proc/b"]


def test_unknown_resources_key_is_an_error():
    s = ExecutorStep("x", write_text, WriteConfig(this_output_path(), versioned("a")), resources={"tpus": 4})
    with pytest.raises(StepDefinitionError, match="unknown keys"):
        Executor("/tmp/never", backend="local").plan([s])


def test_plan_of_wide_dag_is_linear_not_recursive():
    # 24 layers deep, 50 wide: planning must not blow up with depth (Marin embeds full versions).
    layer = [ExecutorStep(f"l0/s{i}", write_text, WriteConfig(this_output_path(), versioned(str(i)))) for i in range(50)]
    for depth in range(1, 24):
        layer = [ExecutorStep(f"l{depth}/s{i}", write_text, WriteConfig(
            this_output_path(), versioned(str(i)), (output_path_of(layer[i]), output_path_of(layer[(i + 1) % 50]))))
            for i in range(50)]
    plan = build_plan(layer, "/p")
    assert len(plan.steps) == 1200
    deepest = _by_name(plan)["l23/s0"]
    assert len(str(deepest.version)) < 400  # identities, not nested versions
