"""Goodput from the records: chip-hours paid against chip-hours of kept progress, badput by cause.

The training step below ran twice on 8 chips: attempt 1 kept steps 0-49 (checkpoint at 50), did 30
more steps and was preempted; attempt 2 queued, restored the checkpoint, redid those 30 steps and
finished at step 100. Its metrics.jsonl is what the trainer leaves (the lines attempt 1 logged past
its checkpoint dropped, the resumed run's first line saying how many steps it redid).
"""

from __future__ import annotations

import datetime
import json

import pytest

from marin_lab.execution.record.goodput import goodput_text, total_goodput
from marin_lab.execution.record.usage import record_usage
from marin_lab.execution.review.cost import experiment_cost
from marin_lab.execution.review.prices import default_prices
from marin_lab.store.step_record import Attempt, StepRecord
from marin_lab.training.metrics import MetricsLogger, WandbConfig

T0 = datetime.datetime(2026, 12, 1, 10, 0, tzinfo=datetime.UTC)
CHIPS = 8
V5E_8 = {"kind": "tpu", "tpu": "v5e-8", "slices": 1, "chips_per_slice": 8, "hosts_per_slice": 2}


def at(seconds: float) -> str:
    return (T0 + datetime.timedelta(seconds=seconds)).isoformat()


def two_attempts(output_path: str | None = None) -> StepRecord:
    return StepRecord(
        name="train/tiny",
        identity="train/tiny-12345678",
        output_path=output_path,
        resources=V5E_8,
        attempts=[
            Attempt(1, kind="preemption", started=at(0), ended=at(230), status="FAILED"),
            Attempt(2, started=at(300), ended=at(410), status="SUCCESS", submitted=at(240), queued_s=60.0),
        ],
    )


def kept_rows() -> list[dict]:
    t = T0.timestamp()
    rows = []
    # Rows count steps completed. Attempt 1: logging begins 100 s after its start; the first step
    # (compilation included) takes 30 s, then 1 s a step; the save of the checkpoint at step 50
    # (10 s) lands on row 50, the line logged just before it.
    first = {"step": 1, "loss": 3.0, "time": t + 130, "segment_start": t + 100, "first_step_s": 30.0, "train_s": 30.0}
    rows.append(first)
    rows += [{"step": s, "loss": 2.0, "time": t + 129 + s, "train_s": 1.0} for s in range(2, 51)]
    rows[-1]["checkpoint_s"] = 10.0
    # Steps 51-80 ran (t+189 .. t+219) and were lost; the preemption was noticed at t+230.
    # Attempt 2: restore 5 s, logging begins 40 s after its start, first step 20 s, then 1 s a step.
    rows.append(
        {
            "step": 51,
            "loss": 1.9,
            "time": t + 360,
            "segment_start": t + 340,
            "restore_s": 5.0,
            "resumed_at": 50,
            "steps_redone": 30,
            "first_step_s": 20.0,
            "train_s": 20.0,
        }
    )
    rows += [{"step": s, "loss": 1.5, "time": t + 360 + (s - 51), "train_s": 1.0} for s in range(52, 101)]
    return rows


def chip_hours(seconds: float) -> float:
    return pytest.approx(CHIPS * seconds / 3600, abs=1e-5)


def test_a_preempted_attempt_30_steps_past_its_checkpoint_gives_kept_and_recomputed_chip_hours():
    goodput = record_usage(two_attempts(), kept_rows())["goodput"]
    assert goodput["basis"] == "metrics"
    assert goodput["paid_chip_hours"] == chip_hours(230 + 110)
    assert goodput["kept_chip_hours"] == chip_hours(100)  # 100 steps of 1 s, each kept once
    assert goodput["recomputed_steps"] == 30
    badput = goodput["badput_chip_hours"]
    assert badput["recomputed"] == chip_hours(30)  # the 30 steps past the checkpoint
    assert badput["lost"] == chip_hours(11)  # from the last step to the preemption being noticed
    assert badput["environment_start"] == chip_hours(100 + 35)
    assert badput["compilation"] == chip_hours(29 + 19)
    assert badput["checkpoint"] == chip_hours(10 + 5)
    assert badput["data_wait"] == 0 and badput["other"] == chip_hours(1)
    assert goodput["queued_hours"] == pytest.approx(60 / 3600, abs=1e-6)  # queued: no chips held, not paid
    assert goodput["kept_chip_hours"] + sum(badput.values()) == pytest.approx(goodput["paid_chip_hours"], abs=1e-5)
    assert goodput["goodput"] == pytest.approx(100 / 340, abs=1e-4)
    text = goodput_text(goodput)
    assert text.startswith("goodput 29% (0.22 of 0.76 chip-hours kept; badput: environment start 0.30")
    assert "30 steps recomputed" in text


def test_the_record_reads_the_step_s_metrics_file_and_a_step_without_one_counts_whole_attempts(tmp_path):
    out = tmp_path / "train" / "tiny-12345678"
    out.mkdir(parents=True)
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept_rows()))
    from_file = record_usage(two_attempts(str(out)))["goodput"]
    assert from_file == record_usage(two_attempts(), kept_rows())["goodput"]

    plain = record_usage(two_attempts(str(tmp_path / "data")))["goodput"]  # no metrics.jsonl
    assert plain["basis"] == "attempts"
    assert plain["kept_chip_hours"] == chip_hours(110) and plain["badput_chip_hours"]["lost"] == chip_hours(230)


def test_an_experiment_s_goodput_sums_its_steps_and_shows_in_its_cost_text():
    record = two_attempts()
    record.status = "SUCCESS"
    record.usage = record_usage(record, kept_rows())
    summary = experiment_cost(None, [(record.identity, record), ("x/none-1", None)], default_prices())
    assert summary.steps[0].goodput_text.startswith("goodput 29% (")
    totals = summary.to_json()["totals"]["goodput"]
    assert totals == total_goodput([record.usage["goodput"]]) and totals["steps"] == 1
    assert summary.goodput_text.startswith("goodput 29% (0.22 of 0.76 chip-hours kept")


def test_a_resumed_trainer_says_how_many_steps_it_redoes_and_where_its_time_went(tmp_path):
    out = str(tmp_path / "run")
    first = MetricsLogger(out, WandbConfig(enabled=False), "run", {})
    first.note("first_step_s", 2.0)
    first.note("train_s", 2.0)
    first.log({"step": 1, "loss": 1.0})  # rows count steps completed
    for step in range(2, 81):
        first.note("data_wait_s", 0.25)
        first.note("train_s", 0.5)
        first.log({"step": step, "loss": 1.0})
        if step == 50:
            first.note("checkpoint_s", 3.0, on_last_line=True)  # the save after row 50
    first.flush()

    resumed = MetricsLogger(out, WandbConfig(enabled=False), "run", {}, resume_step=50)
    resumed.note("restore_s", 1.5)
    resumed.log({"step": 51, "loss": 0.9})
    resumed.flush()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 52))
    assert rows[0]["first_step_s"] == 2.0 and "segment_start" in rows[0]
    assert rows[49]["checkpoint_s"] == 3.0 and rows[49]["data_wait_s"] == 0.25 and rows[49]["train_s"] == 0.5
    assert (rows[50]["resumed_at"], rows[50]["steps_redone"], rows[50]["restore_s"]) == (50, 30, 1.5)
    assert "segment_start" in rows[50] and "steps_redone" not in rows[49]
