"""Training says where it is while it runs: a progress line and a current metrics.jsonl."""

import json
import logging
import re

import pytest

from marin_lab.main.train_lm import train_lm
from marin_lab.testing.training import tiny_train_config, write_synthetic_cache
from marin_lab.training import metrics as metrics_module
from marin_lab.training import trainer as trainer_module
from marin_lab.training.checkpoint import CheckpointConfig


@pytest.mark.slow
def test_training_prints_progress_and_flushes_metrics_between_checkpoints(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(trainer_module, "PRINT_EVERY_S", 0.0)
    out = str(tmp_path / "run")
    flushed: list[int] = []  # metrics.jsonl's line count at each flush
    original = metrics_module.MetricsLogger.flush

    def counting_flush(self):
        original(self)
        with open(self.url) as f:
            flushed.append(sum(1 for _ in f))

    monkeypatch.setattr(metrics_module.MetricsLogger, "flush", counting_flush)
    caplog.set_level(logging.INFO, logger="marin_lab.main.train_lm")
    cache = write_synthetic_cache(str(tmp_path / "cache"))
    # No checkpoint until the end: before this change metrics.jsonl stayed empty until then.
    train_lm(
        tiny_train_config(
            out,
            {"c": cache},
            num_train_steps=4,
            export_hf=False,
            batch_size=2,
            checkpoint=CheckpointConfig(save_every_steps=100, save_interval_s=None),
        )
    )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("train_lm: step ")]
    assert [line.split(",")[0] for line in lines] == [f"train_lm: step {k}/4" for k in (1, 2, 3, 4)]
    assert "loss" in lines[0] and "tokens/s" in lines[0]
    # The time left, from the steps timed so far: none on the first (compilation) or the last line.
    assert "ETA" not in lines[0] and "ETA" not in lines[-1]
    assert all(re.search(r", ETA \d+ (s|min \d+ s)$", line) for line in lines[1:-1]), lines
    assert flushed[:3] == [1, 2, 3]
    with open(f"{out}/metrics.jsonl") as f:
        assert [json.loads(line)["step"] for line in f] == [1, 2, 3, 4]


def test_step_time_excludes_the_wait_behind_the_step_dispatched_before_it():
    """Steps are dispatched one ahead of their metrics: each takes 1 s on the device, so the
    loop dispatches step k+1 right after step k's metrics arrive, and step k+1 waits behind step k.
    Counting from dispatch gave ~2 s per step (half the real tokens/s)."""
    now = [0.0]
    timer = metrics_module.StepTimer(clock=lambda: now[0])
    dispatched = [0.0, 0.01]  # step 0, then step 1 while step 0 runs
    now[0] = 1.0
    first = timer.finished(dispatched[0])  # step 0 done at 1.0
    dispatched.append(1.01)  # step 2 dispatched; step 1 already runs on the device
    now[0] = 2.0
    second = timer.finished(dispatched[1])
    now[0] = 3.0
    third = timer.finished(dispatched[2])
    assert (first, second, third) == (1.0, 1.0, 1.0)
    # A pause on the host (a checkpoint save) with nothing dispatched is not the step's time.
    now[0] = 10.0
    assert timer.finished(9.5) == 0.5


def test_remaining_time_reads_as_a_person_would_say_it():
    from marin_lab.training.trainer import format_duration

    assert [format_duration(x) for x in (0.4, 45, 125, 3 * 3600 + 7 * 60 + 9)] == [
        "0 s",
        "45 s",
        "2 min 5 s",
        "3 h 7 min",
    ]
