"""TPU types and resource requests: validation before anything runs, and what the plan shows."""

from __future__ import annotations

import pytest

from marin_lab.cluster import (
    ClusterError,
    CpuResources,
    GpuResources,
    TpuRequestError,
    TpuResources,
    known_types,
    parse_tpu_type,
    resources_from_dict,
)


@pytest.mark.parametrize(
    "name, canonical, chips, hosts, accelerator_type",
    [
        ("v4-8", "v4-8", 4, 1, "v4-8"),
        ("v4-16", "v4-16", 8, 2, "v4-16"),
        ("v4-2048", "v4-2048", 1024, 256, "v4-2048"),
        ("v5e-256", "v5e-256", 256, 64, "v5litepod-256"),
        ("v5litepod-16", "v5e-16", 16, 4, "v5litepod-16"),
        ("v5e-8", "v5e-8", 8, 1, "v5litepod-8"),
        ("v5p-128", "v5p-128", 64, 16, "v5p-128"),
        ("v6e-1", "v6e-1", 1, 1, "v6e-1"),
        ("V6E-64", "v6e-64", 64, 16, "v6e-64"),
    ],
)
def test_tpu_types_know_chips_and_hosts(name, canonical, chips, hosts, accelerator_type):
    tpu = parse_tpu_type(name)
    assert (tpu.name, tpu.chips, tpu.hosts, tpu.accelerator_type) == (canonical, chips, hosts, accelerator_type)
    # Ray names the head resource after the VM's accelerator-type metadata ('v5litepod-256')
    assert tpu.head_resource == f"TPU-{accelerator_type}-head"
    assert canonical in known_types()


@pytest.mark.parametrize(
    "name, topology, ray_type",
    [
        ("v4-8", "2x2x1", "TPU-V4"),
        ("v4-16", "2x2x2", "TPU-V4"),
        ("v4-1536", "8x8x12", "TPU-V4"),
        ("v5p-64", "2x4x4", "TPU-V5P"),
        ("v5e-8", "2x4", "TPU-V5LITEPOD"),
        ("v5e-32", "4x8", "TPU-V5LITEPOD"),
        ("v5e-256", "16x16", "TPU-V5LITEPOD"),
        ("v6e-1", "1x1", "TPU-V6E"),
    ],
)
def test_tpu_types_know_the_topology_ray_reserves_them_by(name, topology, ray_type):
    tpu = parse_tpu_type(name)
    assert (tpu.topology, tpu.ray_accelerator_type) == (topology, ray_type)


def test_ray_reads_every_tpu_type_back_from_its_topology():
    """Ray's TPU API finds a slice by the pod type it infers from (topology, accelerator type)."""
    from ray._private.accelerators.tpu import TPUAcceleratorManager, infer_tpu_pod_type_from_topology

    for name in known_types():
        tpu = parse_tpu_type(name)
        assert infer_tpu_pod_type_from_topology(tpu.topology, tpu.ray_accelerator_type) == tpu.accelerator_type
        # Ray 2.60's table stops v4 at 12 chips along y: v4-4096 (8x16x16) is the one type it refuses.
        known = TPUAcceleratorManager.is_valid_tpu_accelerator_topology(
            tpu.generation.gce_accelerator_prefix, tpu.topology
        )
        assert known == (name != "v4-4096"), name


@pytest.mark.parametrize(
    "name, message",
    [
        ("v9-8", "unknown TPU generation 'v9'"),
        ("v5e-3", "does not exist: v5e comes in sizes"),
        ("v4-4", "does not exist"),
        ("tpu", "not of the form"),
        (256, "must be a string"),
    ],
)
def test_unknown_tpu_types_fail_with_a_clear_message(name, message):
    with pytest.raises(TpuRequestError, match=message):
        TpuResources(tpu=name).validate()


@pytest.mark.parametrize(
    "tpu, slices, message",
    [
        ("v5e-4", 2, "cannot form a multislice job"),
        ("v6e-1", [1, 2], "cannot form a multislice job"),
        ("v5e-256", 0, "at least 1"),
        ("v5e-256", 65, "exceed the multislice limit"),
        ("v5e-256", [], "allows no slice count"),
        ("v5e-256", 1.5, "must be an int"),
        ("v5e-256", True, "must be an int"),
    ],
)
def test_slice_counts_the_type_cannot_form_are_rejected(tpu, slices, message):
    with pytest.raises(TpuRequestError, match=message):
        TpuResources(tpu=tpu, slices=slices).validate()


def test_more_slices_than_the_cluster_can_hold_is_an_error_before_running():
    with pytest.raises(TpuRequestError, match="asks for 3 slice.*at most 2.*max_cluster_slices"):
        TpuResources(tpu="v5e-256", slices=3, max_cluster_slices=2).validate()
    # an elastic request only needs its smallest count to fit
    TpuResources(tpu="v5e-256", slices=[1, 3], max_cluster_slices=2).validate()


def test_capacity_is_read_from_the_cluster_config(tmp_path, monkeypatch):
    config = tmp_path / "cluster.yaml"
    config.write_text(
        "cluster_name: test\nproject: p\nregion: us-central2\nzone: us-central2-b\nimage: img:1\n"
        "tpu_workers:\n  v4-16: {max_slices: 2}\n"
    )
    with pytest.raises(TpuRequestError, match=f"at most 2 .cluster config {config}"):
        TpuResources(tpu="v4-16", slices=4, cluster_config=str(config)).validate()
    monkeypatch.setenv("MARIN_CLUSTER_CONFIG", str(config))
    with pytest.raises(TpuRequestError, match="at most 2"):
        TpuResources(tpu="v4-16", slices=3).validate()
    with pytest.raises(TpuRequestError, match="has no v5e-256 workers"):
        TpuResources(tpu="v5e-256").validate()


def test_describe_shows_the_request_as_json():
    assert TpuResources(tpu="v5litepod-256", slices=[1, 2]).describe() == {
        "kind": "tpu",
        "tpu": "v5e-256",
        "slices": [1, 2],
        "hosts_per_slice": 64,
        "chips_per_slice": 256,
        "chips_per_host": 4,
        "preemptible": True,
    }
    assert GpuResources(gpus=2, accelerator_type="H100").describe()["gpus"] == 2
    assert CpuResources(cpus=4, memory_gb=8).ray_options() == {"num_cpus": 4, "memory": 8 * 2**30}


def test_tpu_resources_are_hashable_and_compare_by_request():
    a = TpuResources(tpu="v4-16", slices=[2, 1], env={"X": "1"})
    b = TpuResources(tpu="v4-16", slices=[2, 1], env={"X": "1"})
    assert a == b and hash(a) == hash(b) and a.slice_counts == (1, 2)
    assert not hasattr(a, "hardware") and not hasattr(a, "cancel")  # per-run state lives with the run


def test_resources_from_dict():
    tpu = resources_from_dict({"tpu": "v5e-256", "slices": 2})
    assert isinstance(tpu, TpuResources) and tpu.slices == 2
    assert isinstance(resources_from_dict({"num_gpus": 1}), GpuResources)
    cpu = resources_from_dict({"num_cpus": 2, "memory": 2**31})
    assert isinstance(cpu, CpuResources) and cpu.memory_gb == 2
    with pytest.raises(TpuRequestError, match="unknown TPU resource field.*'zone'"):
        resources_from_dict({"tpu": "v5e-256", "zone": "x"})
    with pytest.raises(TpuRequestError, match="does not exist"):
        resources_from_dict({"tpu": "v5e-300"})
    with pytest.raises(ClusterError, match="unknown CpuResources field"):
        resources_from_dict({"cpus": 1, "disk": 3})


def test_running_without_ray_says_what_to_do(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # whatever other tests left running
    with pytest.raises(ClusterError, match="Ray is not initialized.*--backend ray"):
        TpuResources(tpu="v4-8").run(print, None, step_name="s")
    with pytest.raises(ClusterError, match="Ray is not initialized"):
        CpuResources().run(print, None, step_name="s")
