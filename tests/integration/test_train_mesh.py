"""Sharded training on 4 simulated CPU devices (a subprocess: the device count is fixed at start)."""

import json
import os
import subprocess
import sys

import pytest

# Every run of argv[2:] (name, rule, data, fsdp, model) in one process: one start-up, one cache.
SCRIPT = r"""
import json, sys
import jax
from marin_lab.main.train_lm import train_lm
from marin_lab.training import MeshConfig
from marin_lab.training.mesh import param_spec
from marin_lab.testing.training import tiny_train_config, write_synthetic_cache

out, runs = sys.argv[1], sys.argv[2:]
cache = write_synthetic_cache(out + "/cache")
results = {}
for i in range(0, len(runs), 5):
    name, rule, data, fsdp, model = runs[i], runs[i + 1], *map(int, runs[i + 2:i + 5])
    cfg = tiny_train_config(out + "/" + name, {"c": cache}, num_train_steps=3, export_hf=False,
                            mesh=MeshConfig(data=data, fsdp=fsdp, model=model, param_sharding=rule))
    summary = train_lm(cfg)
    mesh = cfg.mesh.build()
    spec = str(param_spec("layers/w_gate", (2, 64, 192), mesh, rule))
    lines = [json.loads(l) for l in open(out + "/" + name + "/metrics.jsonl")]
    results[name] = {"devices": jax.device_count(), "losses": [l["loss"] for l in lines], "spec": spec,
                     "final_step": summary["final_step"]}
print(json.dumps(results))
"""


def _run(tmp_path, *runs):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), *(str(arg) for run in runs for arg in run)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_fsdp_tp_mesh_trains_like_one_replica(tmp_path):
    runs = _run(tmp_path, ("tp", "fsdp_tp", 1, 2, 2), ("dp", "replicated", 4, 1, 1))
    sharded, replicated = runs["tp"], runs["dp"]
    assert sharded["devices"] == 4 and sharded["final_step"] == 3
    assert sharded["spec"] == "P(None, 'fsdp', 'model')"
    assert replicated["spec"] == "P()"
    # Same math, different reduction order: equal to float32 rounding, not bit for bit.
    assert sharded["losses"] == pytest.approx(replicated["losses"], rel=1e-4)
