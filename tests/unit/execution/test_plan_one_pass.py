"""The planner settles common steps as their discovery finishes (`plan._settle`) and leaves the rest
to its last pass: both routes give the same plan, and the errors come in the order they always did."""

from __future__ import annotations

import dataclasses
import logging
import random

import pytest

from marin_lab.execution import (
    CycleError,
    ExecutorMainConfig,
    ExecutorStep,
    InputName,
    MissingDependencyError,
    StepDefinitionError,
    output_path_of,
    this_output_path,
    versioned,
)
from marin_lab.execution.executor import Executor
from marin_lab.execution.plan import planner as plan_module
from marin_lab.execution.plan.planner import build_plan
from tests.executor_steps import WriteConfig, write_text
from tests.unit.execution.test_identity_golden_varied import _dag as varied_dag


def _other_fn(config: WriteConfig) -> None:
    """A second function with the same config type, to collide with `write_text`."""


def _mixed_dag() -> list[ExecutorStep]:
    """Plain steps first, then each kind the fast route declines, then plain steps again."""
    rng = random.Random(1)
    plain = [ExecutorStep(f"p/{i}", write_text, WriteConfig(this_output_path(), versioned(i))) for i in range(6)]
    for i in range(6, 30):
        deps = rng.sample(plain, 2)
        plain.append(
            ExecutorStep(
                f"p/{i}", write_text, WriteConfig(this_output_path(), versioned(i), tuple(map(output_path_of, deps)))
            )
        )
    pinned = ExecutorStep(
        "k/pinned",
        write_text,
        WriteConfig(this_output_path(), versioned("x"), (output_path_of(plain[3]),)),
        override_output_path="fixed/place",
    )
    pseudo = ExecutorStep(
        "k/pseudo",
        write_text,
        WriteConfig(
            this_output_path(), versioned("y"), (output_path_of(plain[4]).nonblocking(), output_path_of(plain[5]))
        ),
    )
    fixed = ExecutorStep(
        "k/fixed",
        write_text,
        WriteConfig(
            this_output_path(), versioned("z"), (InputName.hardcoded("rel/dir"), InputName.hardcoded("gs://b/x"))
        ),
    )
    twice = ExecutorStep(
        "k/twice",
        write_text,
        WriteConfig(this_output_path(), versioned("t"), (output_path_of(plain[7]), output_path_of(plain[7], "sub"))),
    )
    same = ExecutorStep("p/2", write_text, WriteConfig(this_output_path(), versioned(2)))  # identical to plain[2]
    by_name = ExecutorStep(
        "k/named", write_text, WriteConfig(this_output_path(), versioned("n"), (output_path_of("p/9"),))
    )
    after = ExecutorStep(
        "q/after",
        write_text,
        WriteConfig(
            this_output_path(),
            versioned("a"),
            tuple(map(output_path_of, (pinned, pseudo, fixed, twice, same, plain[9], by_name, plain[-1]))),
        ),
    )
    return [*plain, pinned, pseudo, fixed, twice, same, by_name, after]


def _summary(plan):
    return (
        [
            (
                s.identity,
                s.output_path,
                s.version,
                [d.identity for d in s.dependencies],
                [d.identity for d in s.pseudo_dependencies],
                s.step,
            )
            for s in plan.steps
        ],
        [s.identity for s in plan.roots],
        [id(o) for o in plan.objects],
        {k: v.identity for k, v in plan.object_map.items()},
        {k: v.identity for k, v in plan.named_map.items()},
    )


@pytest.mark.parametrize("dag", [_mixed_dag, varied_dag])
@pytest.mark.parametrize("roots", ["all", "reversed", "last"])
def test_settled_steps_are_planned_as_the_last_pass_plans_them(dag, roots, monkeypatch):
    steps = dag()
    chosen = {"all": steps, "reversed": steps[::-1], "last": steps[-1:]}[roots]
    fast = build_plan(chosen, "/p")
    settled = []
    original = plan_module._settle
    monkeypatch.setattr(plan_module, "_settle", lambda *a: settled.append(a[0]) or original(*a))
    build_plan(chosen, "/p")
    assert settled or dag is varied_dag  # its first root names a step: the last pass plans it all
    monkeypatch.setattr(plan_module, "_settle", lambda *a: False)  # every step through the last pass
    slow = build_plan(chosen, "/p")
    assert _summary(fast) == _summary(slow)


def test_a_cycle_found_after_an_identity_clash_is_still_the_error():
    a = ExecutorStep("a", write_text, WriteConfig(this_output_path(), versioned("a")))
    clash = ExecutorStep("a", _other_fn, WriteConfig(this_output_path(), versioned("a")))
    c = ExecutorStep("c", write_text, WriteConfig(this_output_path(), versioned("c"), inputs=[]))
    d = ExecutorStep("d", write_text, WriteConfig(this_output_path(), versioned("d"), (output_path_of(c),)))
    c.config.inputs.append(output_path_of(d))
    with pytest.raises(CycleError, match="'c' -> 'd' -> 'c'"):
        build_plan([a, clash, c], "/p")
    with pytest.raises(StepDefinitionError, match="their functions differ"):
        build_plan([a, clash], "/p")


def test_a_missing_name_found_after_an_identity_clash_is_still_the_error():
    a = ExecutorStep("a", write_text, WriteConfig(this_output_path(), versioned("a")))
    clash = ExecutorStep("a", _other_fn, WriteConfig(this_output_path(), versioned("a")))
    b = ExecutorStep("b", write_text, WriteConfig(this_output_path(), versioned("b"), (output_path_of("nowhere"),)))
    with pytest.raises(MissingDependencyError, match="step 'b': field 'inputs\\[0\\]' depends on step 'nowhere'"):
        build_plan([a, clash, b], "/p")


def test_no_pinned_path_warning_before_a_discovery_error(caplog):
    pinned = ExecutorStep("a", write_text, WriteConfig(this_output_path(), versioned("a")), override_output_path="x/y")
    bad = ExecutorStep("b b", write_text, WriteConfig(this_output_path(), versioned("b")))
    with caplog.at_level(logging.WARNING), pytest.raises(StepDefinitionError, match="step 'b b'"):
        build_plan([pinned, bad], "/p")
    assert "pinned" not in caplog.text
    build_plan([pinned], "/p")
    assert "pinned" in caplog.text


def test_a_step_that_names_its_dependency_and_holds_it_is_checked_by_name():
    a = ExecutorStep("a", write_text, WriteConfig(this_output_path(), versioned("a")))
    both = ExecutorStep(
        "b", write_text, WriteConfig(this_output_path(), versioned("b"), (InputName(step=a, step_name="elsewhere"),))
    )
    with pytest.raises(MissingDependencyError, match="depends on step 'elsewhere'"):
        build_plan([both], "/p")


def test_settled_plan_reads_its_inputs(tmp_path):
    """A plan made by the fast route resolves configs as before (dependency output paths)."""
    a = ExecutorStep("a", write_text, WriteConfig(this_output_path(), versioned("a")))
    b = ExecutorStep("b", write_text, WriteConfig(this_output_path(), versioned("b"), (output_path_of(a, "f"),)))
    plan = build_plan([a, b], str(tmp_path))
    pa, pb = plan.object_map[id(a)], plan.object_map[id(b)]
    assert plan.resolve_config(pb).inputs == (f"{pa.output_path}/f",)
    assert pb.dependencies == [pa]


def _wide_dag(n: int) -> list[ExecutorStep]:
    first = ExecutorStep("w/0", write_text, WriteConfig(this_output_path(), versioned(0)))
    return [first] + [
        ExecutorStep(f"w/{i}", write_text, WriteConfig(this_output_path(), versioned(i), (output_path_of(first),)))
        for i in range(1, n)
    ]


def test_planning_leaves_no_young_generation_to_rescan_and_frees_cycles_later():
    import gc

    class Node:
        pass

    steps = _wide_dag(3000)
    gc.collect()
    a, b = Node(), Node()
    a.other, b.other = b, a  # cyclic garbage made before planning, dropped below
    del a, b
    assert gc.isenabled()
    build_plan(steps, "/p")
    assert gc.isenabled()
    assert gc.get_count()[0] < 100  # planning's objects were not left young (thousands of them)
    assert gc.get_freeze_count() == 0  # nothing stays exempt from collection
    assert gc.collect() >= 2  # the cycle is still found by a full collection


def test_a_process_that_froze_objects_keeps_them_frozen():
    import gc

    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        build_plan(_wide_dag(50), "/p")
        # A few frozen objects may die meanwhile (a process-wide cache dropping its oldest entry, late
        # in a long session: 2 of 1.4 million once); what must not happen is the frozen set moved back
        # into the collected generations (`gc.unfreeze()`: a count of 0).
        assert 0 <= frozen - gc.get_freeze_count() < 100
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_planning_with_the_collector_off_leaves_it_off():
    import gc

    gc.disable()
    try:
        build_plan(_wide_dag(50), "/p")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_plan_lists_every_step_that_may_pin_a_path_or_carry_resources():
    """`Plan.uncommon` is what the executor's resource check and the egress guard visit instead of
    every step: each step with a pinned path or resources is in it, by both planning routes."""
    steps = _mixed_dag()
    odd = ExecutorStep(
        "k/resources", write_text, WriteConfig(this_output_path(), versioned("r")), resources={"bogus": 1}
    )
    for settle in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            if not settle:
                mp.setattr(plan_module, "_settle", lambda *a: False)
            plan = build_plan([*steps, odd], "/p")
        special = [s.identity for s in plan.steps if s.step.override_output_path or s.step.resources is not None]
        assert len(special) == 2 and set(special) <= {s.identity for s in plan.uncommon}
        assert plan.names_urls  # k/fixed reads gs://b/x
    assert not build_plan(steps[:30], "/p").names_urls
    with pytest.raises(StepDefinitionError, match=r"step 'k/resources': resources has unknown keys \['bogus'\]"):
        Executor(ExecutorMainConfig(prefix="/tmp/plan-one-pass", backend="local")).plan([*steps[:30], odd])


@dataclasses.dataclass(frozen=True)
class _ValueStep(ExecutorStep):
    """A step type that compares (and would hash) by value, as a dataclass subclass does by default."""


def test_a_step_type_that_compares_by_value_is_still_one_node_per_object():
    """The planner keys an `ExecutorStep` by the object (identity hash) and any other type by `id`:
    two equal-looking objects of a by-value subclass stay two objects of the DAG (one identity)."""
    config = WriteConfig(this_output_path(), versioned(["a list: unhashable"]))
    a, b = _ValueStep("v/same", write_text, config), _ValueStep("v/same", write_text, config)
    assert a == b and a is not b
    top = ExecutorStep(
        "v/top", write_text, WriteConfig(this_output_path(), versioned(1), (output_path_of(a), output_path_of(b)))
    )
    plan = build_plan([top], "/p")
    assert [id(o) for o in plan.objects] == [id(a), id(b), id(top)]
    assert plan.planned_of(a) is plan.planned_of(b) is plan.object_map[id(b)]
    assert [s.name for s in plan.steps] == ["v/same", "v/top"]
