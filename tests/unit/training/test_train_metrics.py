"""MFU arithmetic, W&B mode selection, the learning-rate schedules and the dry-run estimate."""

import json
import re

import numpy as np
import pytest

from marin_lab.models.llama import LlamaConfig
from marin_lab.training import DataConfig, TrainLmConfig
from marin_lab.training.config import tpu_chips_and_peak
from marin_lab.training.metrics import MetricsLogger, WandbConfig, device_peak_flops, mfu
from marin_lab.training.optimizer import OptimizerConfig


@pytest.mark.parametrize(
    ("kind", "peak"),
    [
        ("TPU v4", 275e12),
        ("TPU v5 lite", 197e12),
        ("TPU v5p", 459e12),
        ("TPU v6 lite", 918e12),
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA A100-SXM4-40GB", 312e12),
        ("cpu", None),
    ],
)
def test_known_peaks(kind, peak):
    assert device_peak_flops(kind) == peak


def test_mfu_is_null_without_a_peak_and_uses_a_configured_one():
    assert mfu(1e9, 1000.0, 1, None) is None
    assert mfu(1e9, 1000.0, 2, device_peak_flops("cpu", configured=1e12)) == pytest.approx(0.5)


def test_wandb_is_offline_unless_project_and_key(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert WandbConfig(project="p").resolved_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert WandbConfig().resolved_mode() == "offline"
    assert WandbConfig(project="p").resolved_mode() == "online"
    assert WandbConfig(project="p", enabled=False).resolved_mode() == "disabled"


def test_wandb_mode_is_one_wandb_knows_or_a_line_naming_where_it_came_from(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "dryrun")  # W&B's older spelling of offline
    assert WandbConfig().resolved_mode() == "offline"
    monkeypatch.setenv("WANDB_MODE", "ofline")
    with pytest.raises(ValueError, match="environment variable WANDB_MODE is 'ofline'; use one of"):
        WandbConfig().resolved_mode()
    with pytest.raises(ValueError, match="wandb.mode is 'on'"):
        WandbConfig(mode="on").resolved_mode()


def test_metrics_file_drops_lines_past_the_resume_step_and_keeps_the_checkpoints_own(tmp_path):
    """Regression: a resume from `step-000003` dropped the evaluation row at step 3 and never
    recomputed it. Rows count steps completed, as checkpoints do: every row <= 3 stays."""
    log = MetricsLogger(str(tmp_path), WandbConfig(enabled=False), "r", {})
    for step in range(1, 6):
        log.log({"step": step, "loss": float(step)})
        if step % 3 == 0:
            log.log({"step": step, "eval/loss": 0.5})
    log.close()
    resumed = MetricsLogger(str(tmp_path), WandbConfig(enabled=False), "r", {}, resume_step=3)
    resumed.log({"step": 4, "loss": 40.0})
    resumed.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("loss", r.get("eval/loss"))) for r in rows] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (3, 0.5),
        (4, 40.0),
    ]


@pytest.mark.parametrize("kind", ["wsd", "cosine", "linear", "constant"])
def test_schedules_warm_up_then_hold_or_decay(kind):
    sched = OptimizerConfig(learning_rate=1.0, schedule=kind, warmup=10, decay=0.2, min_lr_ratio=0.1).lr_schedule(100)
    lrs = np.array([float(sched(s)) for s in range(100)])
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert np.all(np.diff(lrs[:10]) > 0)
    if kind == "constant":
        assert lrs[-1] == pytest.approx(1.0)
    else:
        assert lrs[-1] == pytest.approx(0.1)
    if kind == "wsd":
        assert lrs[79] == pytest.approx(1.0) and lrs[85] < 1.0  # stable until the last 20%


def test_schedule_offset_starts_a_phase_later():
    sched = OptimizerConfig(
        learning_rate=1.0, schedule="linear", warmup=0, min_lr_ratio=0.0, schedule_offset=100
    ).lr_schedule(200)
    assert float(sched(100)) == pytest.approx(0.99)
    assert float(sched(199)) == pytest.approx(0.0, abs=1e-6)


def test_tpu_names():
    assert tpu_chips_and_peak("v5e-256") == (256, 197e12)
    assert tpu_chips_and_peak("v4-2048") == (1024, 275e12)
    assert tpu_chips_and_peak("v5p-512") == (256, 459e12)
    assert tpu_chips_and_peak("gpu") == (None, None)


def test_plan_estimate_counts_tokens_flops_and_chip_hours():
    model = LlamaConfig(
        vocab_size=128256,
        hidden_dim=4096,
        intermediate_dim=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        max_seq_len=4096,
    )
    cfg = TrainLmConfig(
        output_path="/x",
        data=DataConfig(caches={}),
        model=model,
        num_train_steps=1000,
        batch_size=1024,
        seq_len=4096,
        tpu_type="v5e-256",
        tpu_slices=2,
    )
    est = cfg.plan_estimate()
    assert est["tokens"] == 1000 * 1024 * 4096
    assert est["flops"] == pytest.approx(model.flops_per_token(4096) * est["tokens"], rel=1e-3)
    assert est["chips"] == 512
    expected_hours = est["flops"] / (512 * 197e12 * 0.4) / 3600
    assert est["wall_hours"] == pytest.approx(expected_hours, abs=0.05)


@pytest.mark.slow
def test_wandb_run_is_the_steps_resumed_and_kept_under_the_output_path(tmp_path, monkeypatch):
    """Regression (issue 9): a resumed step continued a new W&B run; on gs:// its folder was lost."""
    import fsspec

    from marin_lab.training.metrics import wandb_run_id

    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = str(tmp_path / "checkpoints" / "nano-1a2b3c4d")
    assert wandb_run_id(out) == wandb_run_id(out + "/") != wandb_run_id(str(tmp_path / "other" / "nano-1a2b3c4d"))
    assert wandb_run_id(out).startswith("nano-1a2b3c4d-")
    for attempt in range(2):  # the second logger is the resumed step: the same run, resumed
        log = MetricsLogger(out, WandbConfig(mode="offline"), "nano", {}, resume_step=attempt)
        assert log.run_id == wandb_run_id(out)
        log.log({"step": attempt, "loss": 1.0})
        log.close()
    runs = sorted(p.name for p in (tmp_path / "checkpoints" / "nano-1a2b3c4d" / "wandb").glob("offline-run-*"))
    # W&B names an offline folder by the second it started, adding "-1" when two share a second.
    assert len(runs) == 2 and all(
        re.fullmatch(rf"offline-run-\d{{8}}_\d{{6}}-{re.escape(wandb_run_id(out))}(-\d+)?", r) for r in runs
    )
    remote = "memory://bucket/prefix/checkpoints/nano-1a2b3c4d"  # an object store: written locally, copied
    log = MetricsLogger(remote, WandbConfig(mode="offline"), "nano", {})
    log.log({"step": 0, "loss": 1.0})
    log.close()
    assert log.wandb_info() == {"mode": "offline", "run_id": wandb_run_id(remote), "dir": remote + "/wandb"}
    copied = fsspec.filesystem("memory").find("/bucket/prefix/checkpoints/nano-1a2b3c4d/wandb")
    assert any(wandb_run_id(remote) in p and p.endswith(".wandb") for p in copied)
