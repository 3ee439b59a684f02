"""`metrics.jsonl` has one parser (`marin_lab.store.metrics`): bad lines are counted, a torn last
line (cut short while being written) is skipped without being called bad."""

from __future__ import annotations

import json

from marin_lab.store.metrics import parse_metrics, parse_metrics_line
from marin_lab.training.metrics import MetricsLogger, WandbConfig


def test_good_bad_and_torn_lines():
    raw = (
        b'{"step": 0, "loss": 2.5}\n'
        b"not json\n"
        b'{"loss": 1.0}\n'  # no step
        b'{"step": true}\n'  # a bool is not a step
        b"\n"
        b'{"step": 1, "loss": 2.0}\n'
        b'{"step": 2, "lo'
    )  # torn: being written
    parsed = parse_metrics(raw)
    assert [r["step"] for r in parsed.rows] == [0, 1] and parsed.bad_lines == 3 and parsed.torn


def test_a_last_line_without_its_newline_that_parses_is_kept():
    parsed = parse_metrics(b'{"step": 0}\n{"step": 1}')
    assert [r["step"] for r in parsed.rows] == [0, 1] and not parsed.torn and parsed.bad_lines == 0


def test_a_number_no_float_holds_is_a_bad_line():
    assert parse_metrics_line(b'{"step": 1, "x": ' + b"9" * 400 + b"}") is None
    assert parse_metrics_line('{"step": NaN, "loss": 1}') is None
    assert parse_metrics_line("[1, 2]") is None


def test_a_resumed_trainer_keeps_the_earlier_lines_of_a_file_with_a_torn_last_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"loss": 1.0, "step": 0}\n{"loss": 0.5, "step": 1}\n{"loss": 0.2, "st')
    resumed = MetricsLogger(str(tmp_path), WandbConfig(enabled=False), "r", {}, resume_step=2)
    resumed.log({"step": 2, "loss": 0.1})
    resumed.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # The new run's first line also says when its logging began (goodput's segment_start).
    assert [{k: v for k, v in line.items() if k != "segment_start"} for line in lines] == [
        {"loss": 1.0, "step": 0},
        {"loss": 0.5, "step": 1},
        {"loss": 0.1, "step": 2},
    ]
