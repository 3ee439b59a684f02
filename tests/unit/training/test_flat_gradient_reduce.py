"""A data-parallel step all-reduces its gradients once, as one flat buffer (train_step.py).

Runs in a subprocess: the 4 simulated CPU devices are fixed when JAX starts."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, re
import jax, numpy as np
from marin_lab.training.config import OptimizerConfig
from marin_lab.training.mesh import MeshConfig, batch_sharding
from marin_lab.models.llama import LlamaConfig
from marin_lab.main.train_lm import _programs
from marin_lab.training.train_step import StepSettings

model = LlamaConfig(vocab_size=256, hidden_dim=32, intermediate_dim=64, num_layers=2, num_heads=4,
                    num_kv_heads=2, max_seq_len=32)
full = np.random.default_rng(0).integers(0, 256, size=(8, 17), dtype=np.int32)

def run(mesh_config, devices, microbatches=1):
    _, init_fn, step_fn = _programs(model, OptimizerConfig(learning_rate=1e-2, warmup=0), 10,
                                    StepSettings(compute_dtype="float32", microbatches=microbatches), mesh_config)
    state = init_fn(jax.random.key(0))
    mesh = mesh_config.build()
    tokens = jax.make_array_from_callback(full.shape, batch_sharding(mesh), lambda i: full[i])
    hlo = step_fn.lower(state, tokens).compile().as_text()
    losses, norms = [], []
    for _ in range(3):
        state, metrics = step_fn(state, tokens)
        losses.append(float(metrics["loss"]))
        norms.append(float(metrics["grad_norm"]))
    leaves = [np.asarray(x).ravel() for x in jax.tree_util.tree_leaves(state["params"])]
    # Operands of every all-reduce in the compiled step (a tuple all-reduce has several).
    ops = [l for l in hlo.splitlines() if re.search(r"= .*\ball-reduce(-start)?\(", l)]
    operands = sum(l.split("all-reduce", 1)[1].split(")", 1)[0].count("%") for l in ops)
    return {"losses": losses, "grad_norms": norms, "params": np.concatenate(leaves).tolist(),
            "all_reduce_operands": operands, "params_count": len(leaves),
            "flat_buffer": any("f32[%d]" % sum(x.size for x in leaves) in l for l in ops)}

dp = MeshConfig(data=-1, fsdp=1, param_sharding="replicated")
print(json.dumps({"dp4": run(dp, jax.devices()), "dp4_micro2": run(dp, jax.devices(), microbatches=2),
                  "fsdp4": run(MeshConfig(), jax.devices())}))
"""


def _results() -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_data_parallel_step_reduces_all_gradients_in_one_buffer_and_trains_like_fsdp():
    import numpy as np

    r = _results()
    dp, micro, fsdp = r["dp4"], r["dp4_micro2"], r["fsdp4"]
    # One all-reduce of one flat buffer of every parameter's gradient (plus the loss and the batch
    # checksum), where the compiler's partitioning reduced each parameter separately.
    assert dp["flat_buffer"] and micro["flat_buffer"]
    assert dp["all_reduce_operands"] <= 4 < dp["params_count"], dp["all_reduce_operands"]
    # Same math as the sharded (fsdp) step and as two accumulated microbatches, to float32 rounding.
    assert np.allclose(dp["losses"], fsdp["losses"], rtol=1e-5, atol=0)
    assert np.allclose(micro["losses"], fsdp["losses"], rtol=1e-5, atol=0)
    assert np.allclose(dp["grad_norms"], fsdp["grad_norms"], rtol=1e-5, atol=0)  # a mean, not a sum
    assert np.allclose(micro["grad_norms"], fsdp["grad_norms"], rtol=1e-5, atol=0)
    # Adam turns float32 rounding in near-zero gradients into differences of ~1e-5 after 3 steps of
    # lr 1e-2; a wrong reduction moves weights by ~lr.
    assert np.abs(np.subtract(dp["params"], fsdp["params"])).max() < 5e-5
    assert np.abs(np.subtract(micro["params"], fsdp["params"])).max() < 5e-5
    assert dp["losses"][-1] < dp["losses"][0]  # it trains
