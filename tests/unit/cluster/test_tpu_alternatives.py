"""TPU alternatives without Ray: spelled, checked and planned before anything is booked.

Running on the first shape Ray places, and resuming on another one, is exercised on a local TPU
cluster in tests/integration/test_cluster_slices.py."""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest

from experiments.models import lab_nano
from marin_lab.cluster import TpuAlternatives, TpuRequestError, TpuResources, resources_from_dict
from marin_lab.cluster.alternatives import parse_shape, shape_label, with_slice_count
from marin_lab.cluster.tpu_topology import topologies_for_resources
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path
from marin_lab.execution.record.usage import declared_accelerator
from marin_lab.host_env import MESH_FOLLOWS_HARDWARE, NUM_SLICES
from marin_lab.marin.resources import ResourceConfig, step_resources
from marin_lab.testing.simulate import ToyTrainConfig, toy_train
from marin_lab.training import DataConfig, MeshConfig, TrainLmConfig
from marin_lab.training.distributed import mesh_for_hardware


def test_shapes_are_spelled_as_slice_requests():
    assert parse_shape("v4-128") == TpuResources(tpu="v4-128")
    assert parse_shape("2 x v5e-256") == TpuResources(tpu="v5e-256", slices=2)
    assert parse_shape(" 2xv5e-256 ") == TpuResources(tpu="v5e-256", slices=2)
    assert [shape_label(parse_shape(s)) for s in ("v4-128", "2 x v5e-256")] == ["v4-128", "2 x v5e-256"]
    assert with_slice_count(["v5p-64", "3 x v4-128"], 2) == ["2 x v5p-64", "3 x v4-128"]
    for bad in ("two x v4-8", "v4", "x v4-8"):
        with pytest.raises(TpuRequestError, match="is not a slice shape") as raised:
            parse_shape(bad)
        assert "\n" not in str(raised.value) and "'2 x v5e-256'" in str(raised.value)


@pytest.mark.parametrize(
    "options, message",
    [
        ([], "options is empty"),
        (["v4-128", "v5e-300"], "TPU alternative 'v5e-300'.*does not exist"),
        (["v4-128", "1 x v4-128"], "v4-128 listed twice"),
        (["2 x v5e-4"], "TPU alternative '2 x v5e-4'.*cannot form a multislice job"),
    ],
)
def test_a_bad_alternative_is_one_line_naming_it(options, message):
    with pytest.raises(TpuRequestError, match=message) as raised:
        TpuAlternatives(options).validate()
    assert "\n" not in str(raised.value)


def test_alternatives_the_cluster_cannot_hold_are_dropped_and_none_is_refused(tmp_path):
    config = tmp_path / "cluster.yaml"
    config.write_text(
        "cluster_name: lab\nproject: p\nregion: us-central2\nzone: us-central2-b\nimage: img\n"
        "tpu_workers:\n  v4-128:\n    max_slices: 1\n"
    )
    either = TpuAlternatives(
        [TpuResources("v5p-64", cluster_config=str(config)), TpuResources("v4-128", cluster_config=str(config))]
    )
    either.validate()
    assert [s.tpu for s in either.holdable()] == ["v4-128"]  # the cluster has no v5p workers

    too_big = TpuAlternatives(
        [
            TpuResources("v4-128", slices=2, cluster_config=str(config)),
            TpuResources("v5p-64", cluster_config=str(config)),
        ]
    )
    with pytest.raises(TpuRequestError, match="none of the TPU alternatives 2 x v4-128, v5p-64 fits the cluster"):
        too_big.validate()


def _train_config(**overrides) -> TrainLmConfig:
    model = dataclasses.replace(lab_nano, num_layers=2, vocab_size=512)
    fields = dict(
        output_path=this_output_path(),
        data=DataConfig(caches={}),
        model=model,
        batch_size=16,
        seq_len=128,
        mesh=MeshConfig(fsdp=-1),
    )
    return TrainLmConfig(**{**fields, **overrides})


def test_the_plan_refuses_an_alternative_the_batch_cannot_split_over(tmp_path):
    from marin_lab.main.train_lm import train_lm

    fits = ExecutorStep(
        name="train/fits", fn=train_lm, config=_train_config(), resources=TpuAlternatives(["v5e-8", "2 x v5e-8"])
    )
    executor = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local"))
    executor.plan([fits])  # 8 and 16 chips both divide a batch of 16

    odd = ExecutorStep(
        name="train/odd",
        fn=train_lm,
        config=_train_config(batch_size=8),
        resources=TpuAlternatives(["v5e-8", "2 x v5e-8"]),
    )
    with pytest.raises(TpuRequestError) as raised:
        executor.plan([odd])
    message = str(raised.value)
    assert "\n" not in message and message.startswith("step 'train/odd': field batch_size=8 does not split")
    assert "2 x v5e-8 (16 chips)" in message


def _toy(name: str, resources) -> ExecutorStep:
    return ExecutorStep(
        name=name, fn=toy_train, config=ToyTrainConfig(output_path=this_output_path()), resources=resources
    )


def test_the_identity_does_not_depend_on_the_alternatives(tmp_path):
    executor = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local"))
    one = executor.plan([_toy("train/toy", TpuResources("v4-16"))]).steps[0]
    several = executor.plan([_toy("train/toy", TpuAlternatives(["v5p-64", "2 x v4-16", "v4-16"]))]).steps[0]
    assert one.identity == several.identity and one.output_path == several.output_path


def test_the_dry_run_and_estimates_read_the_first_alternative(tmp_path, capsys):
    resources = TpuAlternatives(["2 x v5e-256", "v4-2048"])
    described = resources.describe()
    assert (described["tpu"], described["slices"]) == ("v5e-256", 2)
    assert [a["shape"] for a in described["alternatives"]] == ["2 x v5e-256", "v4-2048"]
    assert declared_accelerator(described)[1] == 512
    Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run(
        [_toy("train/toy", resources)], dry_run=True
    )
    assert "2 x v5e-256" in capsys.readouterr().out


def test_other_spellings_of_alternatives():
    from_dict = resources_from_dict({"tpu": ["v5p-64", "v4-128"], "slices": 2, "wait_s": 60})
    assert isinstance(from_dict, TpuAlternatives) and from_dict.wait_s == 60
    assert [shape_label(s) for s in from_dict.shapes()] == ["2 x v5p-64", "2 x v4-128"]
    with pytest.raises(TpuRequestError, match=r"unknown TPU alternatives field\(s\) \['wait'\]"):
        resources_from_dict({"tpu": ["v5p-64"], "wait": 60})

    marin, tpu, slices = step_resources(ResourceConfig.with_tpu(["v5p-64", "v4-128"], preemptible=False))
    assert isinstance(marin, TpuAlternatives) and (tpu, slices) == ("v5p-64", 1)
    assert [s.preemptible for s in marin.shapes()] == [False, False]
    assert isinstance(step_resources(ResourceConfig.with_tpu("v5p-64"))[0], TpuResources)  # one type: as before


def test_compile_targets_every_alternative():
    targets = topologies_for_resources(TpuAlternatives(["v5e-8", "2 x v5e-8"]))
    assert [(t.chips, t.slices) for t in targets] == [(8, 1), (16, 2)]
    assert [t.chips for t in topologies_for_resources(TpuResources("v5e-8"))] == [8]
    assert topologies_for_resources({"num_cpus": 1}) == []


def test_the_mesh_follows_the_slices_only_when_alternatives_ask():
    mesh = MeshConfig(fsdp=-1)
    assert mesh_for_hardware(mesh, {NUM_SLICES: "2"}) == mesh
    assert mesh_for_hardware(mesh, {NUM_SLICES: "2", MESH_FOLLOWS_HARDWARE: "1"}).slices == 2
    assert mesh_for_hardware(mesh, {MESH_FOLLOWS_HARDWARE: "1"}) == mesh


COMPILED = textwrap.dedent("""
    import dataclasses
    from experiments.models import lab_nano
    from marin_lab.cluster import TpuAlternatives
    from marin_lab.execution import ExecutorStep, executor_main, this_output_path
    from marin_lab.main.train_lm import train_lm
    from marin_lab.training import DataConfig, MeshConfig, TrainLmConfig

    model = dataclasses.replace(lab_nano, num_layers=2, vocab_size=512)
    config = TrainLmConfig(output_path=this_output_path(), data=DataConfig(caches={}), model=model, batch_size=8,
                           seq_len=128, gradient_checkpointing=True, mesh=MeshConfig(fsdp=-1))
    steps = [ExecutorStep(name="checkpoints/either", fn=train_lm, config=config,
                          resources=TpuAlternatives(["v5e-4", "v5e-8"]))]
    if __name__ == "__main__":
        executor_main(steps=steps)
""")


@pytest.mark.slow
def test_marin_lab_compile_compiles_every_alternative(tmp_path, monkeypatch, capsys):
    from marin_lab.cli import main

    path = tmp_path / "either.py"
    path.write_text(COMPILED)
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    assert main(["compile", str(path), "--format", "json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert [(s["step"], s["topology"], s["chips"]) for s in steps] == [
        ("checkpoints/either", "v5e-4", 4),
        ("checkpoints/either", "v5e-8", 8),
    ]
    assert all(s["fits"] for s in steps)
