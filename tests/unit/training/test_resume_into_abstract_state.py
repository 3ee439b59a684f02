"""A resumed run reads its checkpoint into the state's abstract tree (`jax.eval_shape`): the init
program is neither compiled nor run (on a CPU host it compiles for seconds, only to be discarded)."""

from __future__ import annotations

import collections
import dataclasses
import importlib
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_lab.testing.training import tiny_train_config, write_synthetic_cache
from marin_lab.training import checkpoint as ckpt
from marin_lab.training import trainer as trainer_module
from marin_lab.training.checkpoint import CheckpointConfig
from marin_lab.training.config import step_settings
from marin_lab.training.metrics import WandbConfig
from marin_lab.training.trainer import LoopConfig, Trainer

# The module (the package exports its function under the same name).
train_lm_module = importlib.import_module("marin_lab.main.train_lm")


def _loop(out) -> LoopConfig:
    return LoopConfig(
        name="toy",
        output_path=str(out),
        num_train_steps=4,
        tokens_per_step=4,
        checkpoint=CheckpointConfig(save_every_steps=2, save_interval_s=None, keep_last=3),
        wandb=WandbConfig(enabled=False),
        summary_file="toy_summary.json",
    )


def _fresh():
    return {"w": jnp.arange(3, dtype=jnp.float32), "step": jnp.zeros((), jnp.int32)}


def test_a_resume_with_an_abstract_state_never_calls_init_and_a_fresh_run_never_asks_for_it(tmp_path):
    fresh = Trainer(_loop(tmp_path / "a")).initial_state(_fresh, abstract=lambda: (_ for _ in ()).throw(AssertionError))
    assert fresh.how == "fresh" and np.array_equal(fresh.state["w"], np.arange(3, dtype=np.float32))

    saved = {"w": jnp.asarray([7.0, 8.0, 9.0], jnp.float32), "step": jnp.asarray(2, jnp.int32)}
    ckpt.save_checkpoint(str(tmp_path / "b" / "checkpoints" / "step-000002"), saved, {"step": 2})
    inits = []
    start = Trainer(_loop(tmp_path / "b")).initial_state(
        lambda: inits.append(1) or _fresh(), abstract=lambda: jax.eval_shape(_fresh)
    )
    assert inits == [] and start.how.startswith("resumed from") and start.step == 2
    assert np.array_equal(start.state["w"], [7.0, 8.0, 9.0]) and isinstance(start.state["w"], jax.Array)


@pytest.mark.slow
def test_train_lm_resumes_without_compiling_its_init_program_and_continues_the_same(tmp_path, monkeypatch):
    cache = write_synthetic_cache(str(tmp_path / "cache"), train_docs=40, validation_docs=4)
    steps = CheckpointConfig(save_every_steps=2, save_interval_s=None, keep_last=3)
    whole = tiny_train_config(
        str(tmp_path / "whole"), {"c": cache}, num_train_steps=3, export_hf=False, checkpoint=steps
    )
    done = train_lm_module.train_lm(whole)
    # A new process's programs (the step program comes back from the persistent compilation cache).
    monkeypatch.setattr(trainer_module, "_PROGRAMS", collections.OrderedDict())
    resumed = dataclasses.replace(whole, output_path=str(tmp_path / "resumed"))
    shutil.copytree(
        os.path.join(whole.output_path, "checkpoints", "step-000002"),
        os.path.join(resumed.output_path, "checkpoints", "step-000002"),
    )
    summary = train_lm_module.train_lm(resumed)
    assert summary["start"].startswith("resumed from") and summary["final_step"] == 3
    _, init_fn, step_fn = train_lm_module._programs(
        resumed.model, resumed.optimizer, resumed.num_train_steps, step_settings(resumed), resumed.mesh
    )
    assert init_fn._cache_size() == 0, "the resumed run compiled its init program"
    assert step_fn._cache_size() == 1  # the count counts: this run's step program
    # Read into the same state: resumed at step 2, its step 3 ends where the unbroken run's did.
    assert summary["param_checksum"] == done["param_checksum"]
