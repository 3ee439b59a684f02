"""QLoRA on 4 simulated CPU devices: FSDP (NF4 blocks split over devices), host offload and remat
give the losses of the run with whole (replicated) weights; a block count that does not split is refused by name."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import dataclasses, json, sys
import jax, numpy as np
from marin_lab.peft import LoraConfig
from marin_lab.training import checkpoint as ckpt
from marin_lab.training.base_model import QuantConfig
from marin_lab.training.checkpoint import CheckpointConfig
from marin_lab.training.data import DataConfig
from marin_lab.training.errors import TrainingError
from marin_lab.training.finetune import FinetuneConfig, finetune_lm
from marin_lab.training.mesh import MeshConfig
from marin_lab.training.metrics import WandbConfig
from marin_lab.models.llama import init_params
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.testing.training import synthetic_documents, tiny_model
from marin_lab.training.token_cache import write_token_cache
from pathlib import Path

out = sys.argv[1]
model = tiny_model()
docs = synthetic_documents(120, 0)
masks = [np.concatenate([np.zeros(8, np.uint8), np.ones(len(d) - 8, np.uint8)]) for d in docs]
write_token_cache(out + "/cache", {"train": docs, "validation": docs[:8]}, vocab_size=256, eos_id=255,
                  loss_masks={"train": masks, "validation": masks[:8]})
ckpt.save_checkpoint(out + "/base/checkpoints/step-000000", {"params": init_params(model, jax.random.key(0))},
                     {"model": dataclasses.asdict(model), "step": 0})
base = FinetuneConfig(output_path="", data=DataConfig(caches={"c": out + "/cache"}), base=out + "/base",
                      mode="qlora", lora=LoraConfig(rank=8, alpha=16.0, dropout=0.1), num_train_steps=20,
                      batch_size=8, seq_len=32, compute_dtype="float32", frozen_dtype="float32",
                      optimizer=OptimizerConfig(learning_rate=1e-2, warmup=0, weight_decay=0.0, schedule="constant"),
                      eval_max_sequences=0, save_merged=False, export_hf=False, wandb=WandbConfig(enabled=False),
                      checkpoint=CheckpointConfig(save_every_steps=100, save_interval_s=None))
runs = {
    "single": dict(mesh=MeshConfig(data=4, fsdp=1, param_sharding="replicated")),  # every weight whole
    "fsdp_offload_remat": dict(mesh=MeshConfig(data=1, fsdp=4), offload_base=True, offload_optimizer_state=True,
                               gradient_checkpointing=True),
}
result = {"devices": jax.device_count()}
for name, overrides in runs.items():
    finetune_lm(dataclasses.replace(base, output_path=f"{out}/{name}", **overrides))
    result[name] = [json.loads(line)["loss"] for line in Path(f"{out}/{name}/metrics.jsonl").read_text().splitlines()]
try:
    finetune_lm(dataclasses.replace(base, output_path=out + "/bad", mesh=MeshConfig(data=1, fsdp=4),
                                    quant=QuantConfig(block_size=2048)))
except TrainingError as err:
    result["error"] = str(err)
print(json.dumps(result))
"""


@pytest.mark.slow
def test_fsdp_offload_and_remat_on_four_devices_equal_replicated_weights(tmp_path):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == 4 and len(result["single"]) == 20
    assert result["single"][-1] < result["single"][0] - 0.1  # it trains, so equal losses mean something
    assert result["fsdp_offload_remat"] == pytest.approx(result["single"], abs=1e-5)
    assert "layers/w_" in result["error"] and "do not split evenly over mesh.fsdp=4" in result["error"]
