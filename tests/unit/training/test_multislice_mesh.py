"""The multislice mesh (mesh.py): the `replica` axis over slices, the simulated-slice rule on CPU,
sharding rules that stay inside a slice, and one process's train step on 2 simulated slices.

The train step runs in a subprocess: the 4 simulated CPU devices are fixed when JAX starts."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from jax.sharding import PartitionSpec as P

from marin_lab.models.llama import LlamaConfig
from marin_lab.training.distributed import check_slices
from marin_lab.training.errors import TrainingError
from marin_lab.training.mesh import (
    AXES,
    BATCH_AXES,
    REPLICA,
    MeshConfig,
    MeshError,
    _multislice_grid,
    param_spec,
    simulated_slices,
)


@dataclasses.dataclass(frozen=True)
class FakeDevice:
    """What the slice rule reads of a CPU device: its id and its process."""

    id: int
    process_index: int
    platform: str = "cpu"
    slice_index: int = 0  # what CPU devices of a multi-process run report, on every process


def _hosts(processes: int, per_process: int) -> list[FakeDevice]:
    # Ids interleaved across processes, listed out of order: the rule must not rely on either.
    devices = [FakeDevice(p + processes * i, p) for p in range(processes) for i in range(per_process)]
    return devices[::-1]


def test_axis_sizes_are_per_slice_with_replica_first():
    assert AXES[0] == REPLICA and BATCH_AXES == (REPLICA, "data", "fsdp")
    assert MeshConfig().axis_sizes(4) == {"replica": 1, "data": 1, "fsdp": 4, "model": 1}
    assert MeshConfig(slices=2).axis_sizes(8) == {"replica": 2, "data": 1, "fsdp": 4, "model": 1}
    assert MeshConfig(slices=2, data=2, fsdp=-1).axis_sizes(512) == {"replica": 2, "data": 2, "fsdp": 128, "model": 1}
    with pytest.raises(MeshError, match=r"mesh.slices=3 does not divide the 8 devices"):
        MeshConfig(slices=3).axis_sizes(8)
    with pytest.raises(MeshError, match=r"mesh.slices=0 must be a positive number"):
        MeshConfig(slices=0).axis_sizes(8)
    with pytest.raises(MeshError, match=r"but there are 4 devices of each of 2 slices"):
        MeshConfig(slices=2, data=2, fsdp=4).axis_sizes(8)


def test_simulated_slices_are_contiguous_whole_processes():
    groups = simulated_slices(_hosts(4, 2), 2)
    assert [[(d.process_index, d.id) for d in g] for g in groups] == [
        [(0, 0), (0, 4), (1, 1), (1, 5)],
        [(2, 2), (2, 6), (3, 3), (3, 7)],
    ]
    # One process may simulate several slices with its own devices (in id order).
    assert [[d.id for d in g] for g in simulated_slices(_hosts(1, 4), 2)] == [[0, 1], [2, 3]]
    # A CPU device's slice_index (0 everywhere) is not taken for a real slice.
    grid = _multislice_grid(_hosts(4, 2), 2, [1, 4, 1])
    assert grid.shape == (2, 1, 4, 1)
    assert [sorted({d.process_index for d in s.ravel()}) for s in grid] == [[0, 1], [2, 3]]
    # A host never straddles two slices.
    with pytest.raises(MeshError, match=r"the 3 processes cannot be cut into 2 equal groups of whole processes"):
        simulated_slices(_hosts(3, 2), 2)


def test_the_mesh_slice_count_is_checked_against_the_slices_the_step_runs_on(caplog):
    check_slices(2, {})  # outside the slice runner: nothing to compare
    check_slices(2, {"MARIN_NUM_SLICES": "2"})
    with pytest.raises(TrainingError, match=r"mesh.slices=2, but this step runs on 1 slice\(s\) \(MARIN_NUM_SLICES\)"):
        check_slices(2, {"MARIN_NUM_SLICES": "1"})
    with caplog.at_level("WARNING"):
        check_slices(1, {"MARIN_NUM_SLICES": "2"})
    assert "runs on 2 slices but mesh.slices=1" in caplog.text


def test_sharding_rules_never_use_the_replica_axis():
    class ShapeOnly:  # param_spec reads only the mesh's axis sizes
        shape = {"replica": 2, "data": 1, "fsdp": 2, "model": 2}

    model = LlamaConfig(
        vocab_size=256, hidden_dim=64, intermediate_dim=192, num_layers=2, num_heads=4, num_kv_heads=2, max_seq_len=32
    )
    for rule in ("replicated", "fsdp", "fsdp_tp"):
        specs = {n: param_spec(n, s, ShapeOnly(), rule) for n, s in model.param_shapes().items()}
        assert not any(REPLICA in str(axis) for spec in specs.values() for axis in spec), rule
    assert param_spec("layers/wq", (2, 64, 64), ShapeOnly(), "fsdp_tp") == P(None, "fsdp", "model")


SCRIPT = r"""
import json
import jax, numpy as np
from jax.sharding import PartitionSpec as P
from marin_lab.training.config import OptimizerConfig
from marin_lab.training.mesh import MeshConfig, batch_sharding
from marin_lab.models.llama import LlamaConfig
from marin_lab.main.train_lm import _programs
from marin_lab.training.train_step import StepSettings

model = LlamaConfig(vocab_size=256, hidden_dim=32, intermediate_dim=64, num_layers=2, num_heads=4,
                    num_kv_heads=2, max_seq_len=32)
full = np.random.default_rng(0).integers(0, 256, size=(8, 17), dtype=np.int32)

def run(mesh_config):
    shardings, init_fn, step_fn = _programs(model, OptimizerConfig(learning_rate=1e-2, warmup=0), 10,
                                            StepSettings(compute_dtype="float32"), mesh_config)
    state = init_fn(jax.random.key(0))
    mesh = mesh_config.build()
    tokens = jax.make_array_from_callback(full.shape, batch_sharding(mesh), lambda i: full[i])
    losses = []
    for _ in range(3):
        state, metrics = step_fn(state, tokens)
        losses.append(float(metrics["loss"]))
    specs = [s.spec for s in jax.tree_util.tree_leaves(shardings)]
    # Rows of the batch each device holds: a slice's devices hold one half, each device a quarter.
    rows = {d.id: idx[0].indices(8)[:2] for d, idx in batch_sharding(mesh).devices_indices_map((8, 17)).items()}
    return {"losses": losses, "specs": [str(s) for s in specs], "rows": rows,
            "shape": dict(mesh.shape), "slice_devices": [[d.id for d in s.ravel()] for s in mesh.devices]}

print(json.dumps({"one": run(MeshConfig(fsdp=-1)), "two": run(MeshConfig(slices=2, fsdp=-1))}))
"""


@pytest.mark.slow
def test_two_simulated_slices_in_one_process_train_like_one_slice():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    one, two = r["one"], r["two"]
    assert one["shape"] == {"replica": 1, "data": 1, "fsdp": 4, "model": 1}
    assert two["shape"] == {"replica": 2, "data": 1, "fsdp": 2, "model": 1}
    assert two["slice_devices"] == [[0, 1], [2, 3]]
    assert {k: tuple(v) for k, v in two["rows"].items()} == {"0": (0, 2), "1": (2, 4), "2": (4, 6), "3": (6, 8)}
    # State sharded over fsdp inside each slice, never over replica.
    assert any("fsdp" in s for s in two["specs"]) and not any("replica" in s for s in two["specs"])
    # Same global batch: the same losses up to float32 reduction order (gradients summed over
    # replica then fsdp instead of over 4 fsdp devices at once; seen: equal to the bit).
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-6)
    assert two["losses"][-1] < two["losses"][0]
