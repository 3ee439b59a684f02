"""Evaluation during training: validation loss and bits per byte every N steps (Marin's steps_per_eval).

The scoring comes from marin_lab.evaluation as hooks that `train_lm` builds from the config and registers itself."""

import json
from pathlib import Path

import pytest

from marin_lab.main.train_lm import train_lm
from marin_lab.testing.training import tiny_train_config, write_synthetic_cache
from marin_lab.training import TrainingError


@pytest.mark.slow
def test_eval_every_n_steps_on_validation_sets(tmp_path):
    train_cache = write_synthetic_cache(str(tmp_path / "train"))
    held_out = write_synthetic_cache(str(tmp_path / "held"), train_docs=4, validation_docs=20, seed=7)
    out = str(tmp_path / "run")
    summary = train_lm(
        tiny_train_config(
            out,
            {"c": train_cache},
            steps_per_eval=4,
            max_eval_batches=1,
            eval_caches={"held": held_out},
            export_hf=False,
        )
    )
    lines = [json.loads(line) for line in Path(f"{out}/metrics.jsonl").read_text().splitlines()]
    evals = [r for r in lines if "eval/c/loss" in r]
    assert [r["step"] for r in evals] == [4, 8]
    assert all("eval/held/loss" in r and "eval/held/bpb" in r for r in evals)
    assert evals[1]["eval/c/loss"] < evals[0]["eval/c/loss"]  # the synthetic patterns are learnable
    assert summary["eval"]["eval/held/loss"] == evals[1]["eval/held/loss"]


def test_a_validation_set_too_short_is_refused_before_training(tmp_path):
    train_cache = write_synthetic_cache(str(tmp_path / "train"))
    tiny = write_synthetic_cache(str(tmp_path / "tiny"), train_docs=4, validation_docs=0)
    with pytest.raises(TrainingError, match="validation set 'tiny'"):
        train_lm(
            tiny_train_config(str(tmp_path / "run"), {"c": train_cache}, steps_per_eval=4, eval_caches={"tiny": tiny})
        )


@pytest.mark.slow
def test_lm_eval_tasks_every_n_steps_during_training(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from marin_lab.testing.training import tiny_model

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        ["The capital of France is Paris. 12 + 30 = 42."] * 20,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    cache = write_synthetic_cache(str(tmp_path / "c"), tokenizer_json=tok.to_str())
    out = str(tmp_path / "run")
    summary = train_lm(
        tiny_train_config(
            out,
            {"c": cache},
            model=tiny_model(vocab_size=512),
            export_hf=False,
            eval_tasks=("copa:0:6",),
            steps_per_task_eval=4,
        )
    )
    lines = [json.loads(line) for line in Path(f"{out}/metrics.jsonl").read_text().splitlines()]
    evals = [r for r in lines if "eval/copa/acc" in r]
    assert [r["step"] for r in evals] == [4, 8]
    for r in evals:  # the value with its Wilson interval, over the 6 items scored
        assert r["eval/copa/acc_low"] <= r["eval/copa/acc"] <= r["eval/copa/acc_high"]
        assert r["eval/copa/acc"] * 6 == pytest.approx(round(r["eval/copa/acc"] * 6))
        assert r["eval/copa/coverage"] == 1.0
    assert summary["tasks"]["eval/copa/acc"] == evals[-1]["eval/copa/acc"]
    with pytest.raises(TrainingError, match=r"eval_tasks: .*'hellaswg' \(closest: hellaswag"):
        train_lm(tiny_train_config(str(tmp_path / "bad"), {"c": cache}, eval_tasks=("hellaswg",)))


@pytest.mark.slow
def test_train_lm_runs_the_evaluation_hooks_its_config_asks_for(tmp_path):
    """Regression: the step function itself registers the evaluation hooks; a bare `train_lm` once
    refused a config that asked for evaluation unless a wrapper in evaluation/ passed them in."""
    train_cache = write_synthetic_cache(str(tmp_path / "train"))
    out = tmp_path / "run"
    summary = train_lm(
        tiny_train_config(
            str(out), {"c": train_cache}, num_train_steps=2, steps_per_eval=2, max_eval_batches=1, export_hf=False
        )
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/c/loss" in r]
    assert [r["step"] for r in evals] == [2] and "eval/c/bpb" in evals[0]
    assert summary["eval"]["eval/c/loss"] == evals[0]["eval/c/loss"]


def test_train_lm_declares_the_eval_lines_wall_clock_as_volatile():
    """`marin-lab reproduce` reads the declaration from the step function the record names."""
    from marin_lab.execution.record.artifacts import declaration

    assert "eval.time" in declaration(train_lm, None)["volatile_fields"]["train_summary.json"]
