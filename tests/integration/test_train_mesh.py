"""Sharded training on 4 simulated CPU devices (a subprocess: the device count is fixed at start)."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, sys
import jax
from marin_lab.training import MeshConfig, train_lm
from marin_lab.training.testing import tiny_train_config, write_synthetic_cache

out, rule, data, fsdp, model = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
cache = write_synthetic_cache(out + "/cache")
cfg = tiny_train_config(out + "/run", {"c": cache}, num_train_steps=3, export_hf=False,
                        mesh=MeshConfig(data=data, fsdp=fsdp, model=model, param_sharding=rule))
summary = train_lm(cfg)
from marin_lab.training.mesh import param_spec
mesh = cfg.mesh.build()
spec = str(param_spec("layers/w_gate", (2, 64, 192), mesh, rule))
lines = [json.loads(l) for l in open(out + "/run/metrics.jsonl")]
print(json.dumps({"devices": jax.device_count(), "losses": [l["loss"] for l in lines],
                  "spec": spec, "final_step": summary["final_step"]}))
"""


def _run(tmp_path, name, *args):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / name), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_fsdp_tp_mesh_trains_like_one_replica(tmp_path):
    sharded = _run(tmp_path, "tp", "fsdp_tp", "1", "2", "2")
    replicated = _run(tmp_path, "dp", "replicated", "4", "1", "1")
    assert sharded["devices"] == 4 and sharded["final_step"] == 3
    assert sharded["spec"] == "P(None, 'fsdp', 'model')"
    assert replicated["spec"] == "P()"
    # Same math, different reduction order: equal to float32 rounding, not bit for bit.
    assert sharded["losses"] == pytest.approx(replicated["losses"], rel=1e-4)
