"""A capped task is a seeded random sample of its items (its interval estimates the whole task), recorded
with its seed and item ids; "first N" stays available and says so; chance levels are recorded."""

from __future__ import annotations

import json

import pytest
from lm_eval.api.model import LM

from marin_lab.evaluation import stats
from marin_lab.evaluation.evaluate_lm import evaluate_tasks, parse_task
from marin_lab.evaluation.harness import HarnessError, TaskSpec, run_task, sample_items


class TextLengthLM(LM):
    """Scores that depend on the text alone: the evaluation loop without a model."""

    def loglikelihood(self, requests):
        return [(-float(len(r.args[1])), False) for r in requests]

    def loglikelihood_rolling(self, requests):
        return [-float(len(r.args[0])) for r in requests]

    def generate_until(self, requests):
        return ["" for _ in requests]


def _doc_ids(out, key="copa"):
    return [json.loads(line)["doc_id"] for line in (out / f"samples_{key}.jsonl").read_text().splitlines()]


def test_sample_items_is_seeded_sorted_and_whole_when_the_cap_is_the_task():
    a = sample_items(1000, 20, 1234, "hellaswag")
    assert a == sample_items(1000, 20, 1234, "hellaswag") == sorted(a) and len(set(a)) == 20
    assert a != list(range(20))  # not the first items (hellaswag's first ones all come from ActivityNet)
    assert sample_items(1000, 20, 1235, "hellaswag") != a and sample_items(1000, 20, 1234, "piqa") != a
    assert sample_items(5, 20, 1234, "copa") == [0, 1, 2, 3, 4]


@pytest.mark.slow  # lm-eval builds copa from the offline copy
def test_regression_a_capped_task_is_a_seeded_sample_recorded_with_its_items(tmp_path):
    """limit=10 took the first 10 items; now a random sample drawn from the seed, the same every run."""
    merged = evaluate_tasks(TextLengthLM(), [parse_task("copa:0", 10)], str(tmp_path / "a"), data="offline")
    entry = merged["tasks"]["copa"]
    ids = sample_items(100, 10, 1234, "copa")  # copa's validation split holds 100 items
    assert _doc_ids(tmp_path / "a") == ids != list(range(10))
    assert entry["limit_mode"] == "sample" and entry["sample_seed"] == 1234
    assert entry["item_ids"] == {"copa": ids} and entry["total_items"] == {"copa": 100}
    assert entry["capped"] and entry["scored"] == 10
    assert entry["chance"] == 0.5  # two choices per item
    again = evaluate_tasks(TextLengthLM(), [parse_task("copa:0", 10)], str(tmp_path / "b"), data="offline")
    assert again["tasks"]["copa"]["item_ids"] == entry["item_ids"]
    assert (tmp_path / "a/samples_copa.jsonl").read_bytes() == (tmp_path / "b/samples_copa.jsonl").read_bytes()
    line = stats.entry_line("copa", entry)
    assert line.startswith("copa: acc ") and "(chance 50.0)" in line
    assert "a random sample of 10 of 100 items (seed 1234)" in line


@pytest.mark.slow  # lm-eval builds copa from the offline copy
def test_first_n_stays_available_and_says_so(tmp_path):
    merged = evaluate_tasks(TextLengthLM(), [parse_task("copa:0", 10, "first")], str(tmp_path), data="offline")
    entry = merged["tasks"]["copa"]
    assert _doc_ids(tmp_path) == list(range(10))
    assert entry["limit_mode"] == "first" and entry["sample_seed"] is None and entry["item_ids"] is None
    assert "the first 10 items only (not a sample)" in stats.entry_line("copa", entry)


@pytest.mark.slow  # lm-eval builds copa from the offline copy
def test_an_unknown_limit_mode_is_one_line():
    with pytest.raises(HarnessError, match=r"limit_mode='random': use 'sample' .* or 'first'"):
        run_task(TextLengthLM(), TaskSpec("copa", 0, 10, "random"), data="offline")
