"""Evaluation during training: validation loss and bits per byte every N steps (Marin's steps_per_eval)."""

import json

import pytest

from marin_lab.training import TrainingError, train_lm
from marin_lab.training.testing import tiny_train_config, write_synthetic_cache


def test_eval_every_n_steps_on_validation_sets(tmp_path):
    train_cache = write_synthetic_cache(str(tmp_path / "train"))
    held_out = write_synthetic_cache(str(tmp_path / "held"), train_docs=4, validation_docs=20, seed=7)
    out = str(tmp_path / "run")
    summary = train_lm(tiny_train_config(out, {"c": train_cache}, steps_per_eval=4, max_eval_batches=1,
                                         eval_caches={"held": held_out}, export_hf=False))
    lines = [json.loads(line) for line in open(f"{out}/metrics.jsonl")]
    evals = [r for r in lines if "eval/c/loss" in r]
    assert [r["step"] for r in evals] == [4, 8]
    assert all("eval/held/loss" in r and "eval/held/bpb" in r for r in evals)
    assert evals[1]["eval/c/loss"] < evals[0]["eval/c/loss"]  # the synthetic patterns are learnable
    assert summary["eval"]["eval/held/loss"] == evals[1]["eval/held/loss"]


def test_a_validation_set_too_short_is_refused_before_training(tmp_path):
    train_cache = write_synthetic_cache(str(tmp_path / "train"))
    tiny = write_synthetic_cache(str(tmp_path / "tiny"), train_docs=4, validation_docs=0)
    with pytest.raises(TrainingError, match="validation set 'tiny'"):
        train_lm(tiny_train_config(str(tmp_path / "run"), {"c": train_cache}, steps_per_eval=4,
                                   eval_caches={"tiny": tiny}))
