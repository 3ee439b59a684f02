"""train_lm end to end on a tiny model: entry, determinism, exact resume, bad input, NaN."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from marin_lab.main.train_lm import train_lm
from marin_lab.testing.training import tiny_model, tiny_train_config, write_synthetic_cache
from marin_lab.training import MeshConfig, TrainingError, WandbConfig
from marin_lab.training.checkpoint import list_checkpoints
from marin_lab.training.data import MixtureLoader
from marin_lab.training.optimizer import OptimizerConfig


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return write_synthetic_cache(str(tmp_path_factory.mktemp("cache") / "c"))


@pytest.fixture(scope="module")
def unbroken(cache, tmp_path_factory):
    """One uninterrupted 8-step run that several tests compare against."""
    out = str(tmp_path_factory.mktemp("run") / "unbroken")
    return out, train_lm(tiny_train_config(out, {"c": cache}))


def _metric_lines(out):
    with open(f"{out}/metrics.jsonl") as f:
        return [json.loads(line) for line in f]


@pytest.mark.slow
def test_entry_trains_logs_checkpoints_and_exports(unbroken):
    out, summary = unbroken
    lines = _metric_lines(out)
    assert [r["step"] for r in lines] == list(range(1, 9))  # steps completed, as checkpoints count them
    for key in ("loss", "learning_rate", "grad_norm", "tokens_per_s", "mfu", "time"):
        assert key in lines[0]
    assert lines[-1]["loss"] < lines[0]["loss"] - 0.5  # the synthetic patterns are learnable
    assert summary["final_step"] == 8
    assert summary["environment"]["device_count"] == jax.device_count()
    assert summary["environment"]["jax"] == jax.__version__
    assert [s for s, _ in list_checkpoints(f"{out}/checkpoints")] == [4, 8]
    with open(f"{out}/hf/config.json") as f:
        assert json.load(f)["model_type"] == "llama"
    with open(f"{out}/train_summary.json") as f:
        assert json.load(f)["param_checksum"] == summary["param_checksum"]


@pytest.mark.slow
def test_metrics_record_the_checksum_of_each_consumed_batch(cache, unbroken):
    out, _ = unbroken
    cfg = tiny_train_config(out, {"c": cache})
    loader = MixtureLoader(cfg.data, cfg.seq_len, cfg.batch_size)
    lines = _metric_lines(out)
    for line in lines:  # recomputed here from the stateless loader, in numpy
        tokens = loader.batch(line["step"] - 1).astype(np.uint64).ravel()
        weights = (np.arange(tokens.size, dtype=np.uint64) * 2654435761 + 1) % 2**32
        assert line["batch_checksum"] == int((tokens * weights).sum() % 2**32)
    assert len({line["batch_checksum"] for line in lines}) == len(lines)  # every step a new batch


@pytest.mark.slow
def test_two_runs_with_one_seed_are_bit_identical(cache, unbroken, tmp_path):
    _, first = unbroken
    second = train_lm(tiny_train_config(str(tmp_path / "again"), {"c": cache}, export_hf=False))
    assert second["param_checksum"] == first["param_checksum"]


@pytest.mark.slow
def test_stop_and_resume_equals_unbroken_run(cache, unbroken, tmp_path):
    _, whole = unbroken
    out = str(tmp_path / "resumed")
    cfg = tiny_train_config(out, {"c": cache}, export_hf=False)
    stopped = train_lm(dataclasses.replace(cfg, stop_after_steps=3))  # "preempted" after step 3
    assert stopped["final_step"] == 3 and stopped["param_checksum"] != whole["param_checksum"]
    resumed = train_lm(cfg)
    assert resumed["start"].startswith("resumed from") and resumed["final_step"] == 8
    assert resumed["param_checksum"] == whole["param_checksum"]
    losses = [r["loss"] for r in _metric_lines(out)]
    assert losses == [r["loss"] for r in _metric_lines(unbroken[0])]


@pytest.mark.slow
def test_grad_accumulation_matches_full_batch(cache, unbroken, tmp_path):
    accum = train_lm(
        tiny_train_config(str(tmp_path / "acc"), {"c": cache}, microbatches=4, stop_after_steps=3, export_hf=False)
    )
    full_losses = [r["loss"] for r in _metric_lines(unbroken[0])][:3]
    accum_losses = [r["loss"] for r in _metric_lines(str(tmp_path / "acc"))]
    assert accum["final_step"] == 3
    assert accum_losses == pytest.approx(full_losses, rel=1e-5)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"seq_len": 512}, "seq_len=512 is larger than model.max_seq_len"),
        ({"mesh": MeshConfig(data=3, fsdp=1)}, "mesh"),
        ({"batch_size": 6, "microbatches": 4}, "microbatches"),
        ({"model": tiny_model(vocab_size=100)}, "model.vocab_size"),
        ({"model": tiny_model(num_kv_heads=3)}, "num_kv_heads"),
        ({"optimizer": OptimizerConfig(schedule="exp")}, "optimizer.schedule"),
        ({"output_path": ""}, "output_path is empty"),
        ({"wandb": WandbConfig(mode="onlin")}, "wandb.mode is 'onlin'"),
    ],
)
def test_bad_input_fails_before_training(cache, tmp_path, overrides, match):
    with pytest.raises(TrainingError, match=match):
        train_lm(dataclasses.replace(tiny_train_config(str(tmp_path / "bad"), {"c": cache}), **overrides))
    assert not (tmp_path / "bad" / "checkpoints").exists()


def test_too_short_cache_fails_before_training(tmp_path):
    from marin_lab.training import write_token_cache

    write_token_cache(str(tmp_path / "short"), {"train": [[1, 2, 3]]}, vocab_size=256, eos_id=255)
    with pytest.raises(TrainingError, match=r"data.caches\['s'\].*lower seq_len"):
        train_lm(tiny_train_config(str(tmp_path / "o"), {"s": str(tmp_path / "short")}))


def test_missing_cache_names_the_dataset(tmp_path):
    with pytest.raises(TrainingError, match=r"data.caches\['web'\]"):
        train_lm(tiny_train_config(str(tmp_path / "o"), {"web": str(tmp_path / "missing")}))


@pytest.mark.slow
def test_checkpoint_of_another_shape_is_refused(cache, unbroken, tmp_path):
    out, _ = unbroken
    with pytest.raises(TrainingError, match="different model shape.*hidden_dim"):
        train_lm(
            tiny_train_config(str(tmp_path / "o"), {"c": cache}, initialize_from=out, model=tiny_model(hidden_dim=32))
        )


@pytest.mark.slow
def test_nan_loss_stops_naming_the_step(cache, tmp_path):
    cfg = tiny_train_config(
        str(tmp_path / "nan"),
        {"c": cache},
        export_hf=False,
        optimizer=OptimizerConfig(learning_rate=1e30, warmup=0, max_grad_norm=None),
    )
    with pytest.raises(TrainingError, match=r"loss is nan at step \d"):
        train_lm(cfg)


@pytest.mark.slow
def test_initialize_from_continues_as_a_new_phase(cache, unbroken, tmp_path):
    out, whole = unbroken
    cfg = tiny_train_config(
        str(tmp_path / "phase2"),
        {"c": cache},
        initialize_from=out,
        num_train_steps=10,
        batch_size=16,
        export_hf=False,
        optimizer=OptimizerConfig(learning_rate=1e-3, warmup=0, schedule_offset=8),
    )
    summary = train_lm(cfg)
    assert summary["start"].startswith("initialized from") and summary["final_step"] == 10
    assert [r["step"] for r in _metric_lines(str(tmp_path / "phase2"))] == [9, 10]


@pytest.mark.slow
def test_wandb_offline_run_is_written_without_a_key(cache, tmp_path, monkeypatch):
    from marin_lab.training.metrics import WandbConfig

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    out = tmp_path / "wb"
    summary = train_lm(
        tiny_train_config(
            str(out), {"c": cache}, export_hf=False, stop_after_steps=2, wandb=WandbConfig(project="marin-lab-test")
        )
    )
    assert summary["final_step"] == 2
    runs = list(out.glob("wandb/offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
