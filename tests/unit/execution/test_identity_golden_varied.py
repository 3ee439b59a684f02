"""Fixed identities and versions for a varied set of configs: a regression guard for the identity
walk, the canonical encoder and the planner's bookkeeping (any speed-up must keep every byte)."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import pathlib

import pytest

from marin_lab.execution import ExecutorStep, InputName, output_path_of, this_output_path, versioned
from marin_lab.execution.plan.hashing import canonical_json
from marin_lab.execution.plan.planner import build_plan
from marin_lab.versioning import added_field, versioned_field
from tests.executor_steps import write_text


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@dataclasses.dataclass(frozen=True)
class Inner:
    width: int = 4
    rate: float = 0.5
    tags: tuple[str, ...] = ("a", "b")
    note: str = added_field("off")


@dataclasses.dataclass(frozen=True)
class Outer:
    output_path: str
    inputs: list = dataclasses.field(default_factory=list)
    model: Inner = versioned_field(default_factory=Inner)
    mix: dict = versioned_field(default_factory=dict)
    knob: int = 1
    extra: str = added_field("off")
    label: object = None


def _dag() -> list[ExecutorStep]:
    raw = ExecutorStep("raw/a", write_text, Outer(this_output_path(), label=versioned("é ü \u2603")))
    raw2 = ExecutorStep("raw/b", write_text, Outer(this_output_path("sub"), label=versioned(1.25), extra="on"))
    mid = ExecutorStep(
        "mid/c",
        write_text,
        Outer(
            this_output_path(),
            inputs=[
                output_path_of(raw),
                output_path_of(raw2, "x/y"),
                InputName.hardcoded("gs://bkt/data"),
                InputName.hardcoded("rel/dir"),
            ],
            model=Inner(width=8, rate=1e-3, tags=("z",), note="on"),
            mix={"web.en": 0.7, "code": [1, 2, {"k": None}], "0": True},
            label=versioned(Mode.FAST),
        ),
    )
    side = ExecutorStep(
        "mid/d",
        write_text,
        Outer(
            this_output_path(),
            inputs=[raw / "part", output_path_of(raw).nonblocking()],
            label=versioned({"path": pathlib.PurePosixPath("a/b"), "n": [1.5, -2, "s"]}),
        ),
    )
    by_name = ExecutorStep(
        "top/e",
        write_text,
        Outer(
            this_output_path(),
            inputs=[output_path_of("mid/c"), side, mid.cd("deep"), output_path_of(raw2).nonblocking()],
            mix={"nested": {"a.b": Mode.SLOW}},
            knob=7,
            label=versioned([]),
        ),
    )
    same = ExecutorStep("raw/a", write_text, Outer(this_output_path(), label=versioned("é ü \u2603"), knob=3))
    return [by_name, mid, same]


GOLDEN = {
    "raw/a": "raw/a-e03ab1cc",
    "raw/b": "raw/b-696ddee1",
    "mid/c": "mid/c-6857dda2",
    "mid/d": "mid/d-1ef9b791",
    "top/e": "top/e-5f7bcf1a",
}
VERSIONS_SHA256 = "9bc45f4a3b9e773c4d394af6e92249825ca3d3bdd00a37ef36ee2210ba07e2a4"
BENCH_SHA256 = "dde8fb1dc061c629d6540c3138ed3f527fc38928b5d36a48f52aac414122248d"


def test_varied_identities_are_fixed():
    plan = build_plan(_dag(), "gs://bucket/prefix")
    got = {s.name: s.identity for s in plan.steps}
    assert got == GOLDEN
    assert all(s.output_path == f"gs://bucket/prefix/{s.identity}" for s in plan.steps)


def test_varied_versions_encode_to_fixed_bytes():
    plan = build_plan(_dag(), "/local/prefix")
    blob = "\n".join(canonical_json(s.version) for s in plan.steps)
    assert hashlib.sha256(blob.encode("utf-8")).hexdigest() == VERSIONS_SHA256
    assert json.loads(canonical_json(plan.steps[0].version))["name"] == plan.steps[0].name


def test_benchmark_dag_identities_are_fixed():
    """2,000 steps of the planning benchmark's shape (10 layers, fan-in 1-2): every identity."""
    import random

    rng = random.Random(0)
    steps, previous = [], []
    for layer in range(10):
        current = []
        for i in range(200):
            deps = rng.sample(previous, rng.choice((1, 2))) if previous else []
            cfg = Outer(this_output_path(), inputs=[output_path_of(d) for d in deps], label=versioned(i))
            current.append(ExecutorStep(f"bench/l{layer:02d}/s{i:05d}", write_text, cfg))
        steps.extend(current)
        previous = current
    plan = build_plan(steps, "/p")
    assert len(plan.steps) == 2000
    blob = "\n".join(f"{s.identity} {s.output_path}" for s in plan.steps)
    assert hashlib.sha256(blob.encode("utf-8")).hexdigest() == BENCH_SHA256


def test_pinned_path_colliding_with_a_computed_or_pinned_one_is_an_error():
    from marin_lab.execution import StepDefinitionError

    a = ExecutorStep("raw/a", write_text, Outer(this_output_path(), label=versioned("a")))
    ident = build_plan([a], "/p").steps[0].identity
    onto_computed = ExecutorStep(
        "raw/z", write_text, Outer(this_output_path(), label=versioned("z")), override_output_path=ident
    )
    with pytest.raises(StepDefinitionError, match=f"both write to /p/{ident}"):
        build_plan([a, onto_computed], "/p")
    one = ExecutorStep("x/one", write_text, Outer(this_output_path()), override_output_path="shared/out")
    two = ExecutorStep("x/two", write_text, Outer(this_output_path()), override_output_path="/p/shared/out/")
    with pytest.raises(StepDefinitionError, match="both write to /p/shared/out"):
        build_plan([one, two], "/p")
    assert len(build_plan([a, one], "/p").steps) == 2


def test_reference_by_name_is_checked_even_beside_a_step_object():
    from marin_lab.execution import MissingDependencyError

    a = ExecutorStep("raw/a", write_text, Outer(this_output_path()))
    b = ExecutorStep("b", write_text, Outer(this_output_path(), inputs=[InputName(step=a, step_name="raw/none")]))
    with pytest.raises(MissingDependencyError, match="depends on step 'raw/none'"):
        build_plan([b], "/p")
    c = ExecutorStep("c", write_text, Outer(this_output_path(), inputs=[output_path_of("raw/a")]))
    plan = build_plan([c, a], "/p")
    assert plan.named_map["raw/a"].identity == plan.steps[0].identity
