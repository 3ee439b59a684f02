"""Resuming on several hosts: every process restores the checkpoint process 0 found, in train_lm and
finetune_lm alike, even when another host's listing already shows a newer one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from marin_lab import host_env
from marin_lab.training import checkpoint as ckpt
from marin_lab.training import finetune
from tests.conftest import free_port

SCRIPT = r"""
import json, sys
from marin_lab.training import checkpoint as ckpt
from marin_lab.training.distributed import initialize_from_env

root, pid = sys.argv[1], int(sys.argv[2])
initialize_from_env()
if pid == 1:  # this host's listing already shows step 6, whose marker landed after process 0 listed
    seen = ckpt.list_checkpoints
    ckpt.list_checkpoints = lambda r: seen(r) + [(6, ckpt.step_dir(r, 6))]
print(json.dumps({"own": ckpt.latest_checkpoint(root), "agreed": ckpt.agreed_latest_checkpoint(root)}))
"""


@pytest.mark.slow
def test_two_processes_agree_on_process_0s_latest_checkpoint(tmp_path):
    port = free_port()
    root = tmp_path / "checkpoints"
    (root / "step-000004").mkdir(parents=True)
    (root / "step-000004" / ckpt.COMPLETE).write_text("")
    procs = []
    for pid in range(2):
        env = {
            **os.environ,
            **host_env.process_env(f"127.0.0.1:{port}", 2, pid),
            "JAX_PLATFORMS": "cpu",
            "MARIN_DISTRIBUTED_TIMEOUT_S": "120",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", SCRIPT, str(root), str(pid)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        answers.append(json.loads(out.strip().splitlines()[-1]))
    step4 = ckpt.step_dir(str(root), 4)
    assert answers[0] == {"own": step4, "agreed": step4}
    assert answers[1]["own"] == ckpt.step_dir(str(root), 6)  # the listings disagree ...
    assert answers[1]["agreed"] == step4  # ... the restored step does not


@pytest.mark.slow
def test_finetune_resumes_from_the_agreed_checkpoint(monkeypatch, tmp_path):
    """finetune_lm asks for the agreed checkpoint, never this host's own listing."""
    import dataclasses

    import jax

    from marin_lab.models.llama import init_params
    from marin_lab.peft import LoraConfig
    from marin_lab.testing.training import synthetic_documents, tiny_model
    from marin_lab.training.data import DataConfig
    from marin_lab.training.metrics import WandbConfig
    from marin_lab.training.token_cache import write_token_cache

    model = tiny_model()
    docs = synthetic_documents(16, 0)
    write_token_cache(str(tmp_path / "cache"), {"train": docs, "validation": docs[:4]}, vocab_size=256, eos_id=255)
    ckpt.save_checkpoint(
        str(tmp_path / "base/checkpoints/step-000000"),
        {"params": init_params(model, jax.random.key(0))},
        {"model": dataclasses.asdict(model), "step": 0},
    )
    asked = []

    def agreed(root):
        asked.append(root)
        raise RuntimeError("stopped at the resume lookup")

    monkeypatch.setattr(ckpt, "agreed_latest_checkpoint", agreed)
    own_listing = ckpt.latest_checkpoint

    def latest(root):  # the base may be listed (it is read, never written); the run's own checkpoints may not
        if root.startswith(str(tmp_path / "ft")):
            pytest.fail(f"resumed from this host's listing of {root}")
        return own_listing(root)

    monkeypatch.setattr(ckpt, "latest_checkpoint", latest)
    config = finetune.FinetuneConfig(
        output_path=str(tmp_path / "ft"),
        data=DataConfig(caches={"c": str(tmp_path / "cache")}),
        base=str(tmp_path / "base"),
        mode="lora",
        lora=LoraConfig(rank=2, alpha=4.0),
        num_train_steps=2,
        batch_size=2,
        seq_len=16,
        eval_max_sequences=0,
        save_merged=False,
        export_hf=False,
        wandb=WandbConfig(enabled=False),
    )
    with pytest.raises(RuntimeError, match="stopped at the resume lookup"):
        finetune.finetune_lm(config)
    assert asked == [str(tmp_path / "ft" / "checkpoints")]
