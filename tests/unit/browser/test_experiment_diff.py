"""Experiment records side by side: the runs of one script grouped with what differs, two scripts compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from marin_lab.browser.compare import experiments_diff, training_runs
from marin_lab.browser.errors import BadRequestError, NotFoundError
from marin_lab.browser.experiment_diff import diff_records
from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser


def step(name: str, tag: str, config: dict[str, Any], deps: list[str] = ()) -> dict[str, Any]:
    return {
        "name": name,
        "identity": f"{name}-{tag}",
        "fn": "x:y",
        "dependencies": list(deps),
        "version": {"name": name, "config": config, "dependencies": list(deps)},
    }


def pipeline(lr: float, lr_tag: str, *, seed: int = 0, export: bool = False) -> list[dict[str, Any]]:
    data = step("tokenized/docs", "aaaa0001", {"tokenizer": "gpt2"})
    train = step(
        "checkpoints/nano",
        lr_tag,
        {"optimizer": {"learning_rate": lr, "warmup": 0.1}, "seed": seed},
        [data["identity"]],
    )
    evaluation = step("evaluation/nano", f"e{lr_tag[1:]}", {"tasks": ["copa"]}, [train["identity"]])
    return [data, train, evaluation] + ([step("export/nano", "ffff0001", {"format": "hf"})] if export else [])


def test_a_changed_field_an_upstream_change_and_an_added_step():
    a = {"steps": pipeline(3e-3, "b0000001")}
    b = {"steps": pipeline(1e-3, "b0000002", export=True)}
    diff = diff_records(a, b)
    changes = {r["name"]: r["change"] for r in diff["steps"]}
    assert changes == {
        "tokenized/docs": "same",
        "checkpoints/nano": "changed",
        "evaluation/nano": "upstream",  # its own fields are equal: only its dependency moved
        "export/nano": "added",
    }
    train = next(r for r in diff["steps"] if r["name"] == "checkpoints/nano")
    assert [f["text"] for f in train["fields"]] == ["optimizer.learning_rate: 0.003 -> 0.001"]  # the leaf
    assert (train["a"], train["b"]) == ("checkpoints/nano-b0000001", "checkpoints/nano-b0000002")
    assert diff["counts"] == {"same": 1, "changed": 1, "upstream": 1, "added": 1}
    assert diff["summary"] == [
        "checkpoints/nano: optimizer.learning_rate: 0.003 -> 0.001",
        "1 step changed through its dependencies",
        "added: export/nano",
    ]
    assert diff_records(b, a)["summary"][-1] == "removed: export/nano"
    assert diff_records(a, a)["summary"] == ["the same steps"]


def test_secret_fields_are_not_shown_in_a_diff():
    a = {"steps": [step("download/x", "aaaa0001", {"hf_token": "hf_abcdefabcdefabcdefabcdef", "n": 1})]}
    b = {"steps": [step("download/x", "aaaa0002", {"hf_token": "hf_bbbbbbbbbbbbbbbbbbbbbbbb", "n": 2})]}
    text = json.dumps(diff_records(a, b))
    assert "hf_abcdef" not in text and "hf_bbbbbb" not in text and "n: 1 -> 2" in text


def write(prefix: Path, exp_id: str, script: str, created: str, steps: list[dict[str, Any]]) -> None:
    for s in steps:
        out = prefix / s["identity"]
        out.mkdir(parents=True, exist_ok=True)
        (out / ".executor_status").write_text(json.dumps({"status": "SUCCESS"}))
        s["output_path"] = str(out)
    (prefix / "experiments").mkdir(parents=True, exist_ok=True)
    record = {"schema": 1, "script": script, "name": Path(script).stem, "created": created, "steps": steps}
    (prefix / "experiments" / f"{exp_id}.json").write_text(json.dumps(record))


@pytest.fixture
def browser(tmp_path: Path) -> Browser:
    prefix = tmp_path / "store"
    write(prefix, "sweep-00000001", "experiments/sweep.py", "2026-12-01T00:00:00Z", pipeline(3e-3, "b0000001"))
    write(prefix, "sweep-00000002", "experiments/sweep.py", "2026-12-02T00:00:00Z", pipeline(1e-3, "b0000002"))
    write(prefix, "sweep-00000003", "experiments/sweep.py", "2026-12-03T00:00:00Z", pipeline(1e-3, "b0000003", seed=1))
    write(prefix, "other-00000001", "experiments/other.py", "2026-12-04T00:00:00Z", pipeline(3e-4, "b0000009"))
    (prefix / "experiments" / "broken-00000001.json").write_text("{ not json")
    return Browser(str(prefix), Roots.of([str(prefix)]))


def test_runs_of_one_script_are_grouped_each_with_what_differs_from_the_one_before(browser):
    listed = {e["id"]: e for e in browser.experiments()}
    assert [listed[i].get("siblings") for i in ("sweep-00000001", "sweep-00000003", "other-00000001")] == [3, 3, 1]
    assert "previous" not in listed["sweep-00000001"] and "previous" not in listed["other-00000001"]
    assert listed["sweep-00000002"]["previous"] == "sweep-00000001"
    assert listed["sweep-00000002"]["differs"][0] == "checkpoints/nano: optimizer.learning_rate: 0.003 -> 0.001"
    assert listed["sweep-00000003"]["previous"] == "sweep-00000002"
    assert listed["sweep-00000003"]["differs"][0] == "checkpoints/nano: seed: 0 -> 1"
    assert "siblings" not in listed["broken-00000001"]


def test_two_experiments_of_different_scripts_compared_step_by_step(browser):
    diff = experiments_diff(browser, "sweep-00000001", "other-00000001")
    assert diff["same_script"] is False
    assert (diff["a"]["script"], diff["b"]["script"]) == ("experiments/sweep.py", "experiments/other.py")
    train = next(r for r in diff["steps"] if r["name"] == "checkpoints/nano")
    assert train["change"] == "changed" and train["fields"][0]["text"] == "optimizer.learning_rate: 0.003 -> 0.0003"
    assert train["b_output_path"].endswith("/checkpoints/nano-b0000009")
    damaged = experiments_diff(browser, "sweep-00000001", "broken-00000001")
    assert damaged["b"]["state"] == "corrupt" and damaged["steps"] == []
    with pytest.raises(NotFoundError):
        experiments_diff(browser, "sweep-00000001", "nope-00000000")
    with pytest.raises(BadRequestError):
        experiments_diff(browser, "sweep-00000001", "../x")


def test_training_runs_across_experiments_each_named_by_its_experiment(browser):
    for e in ("sweep-00000001", "other-00000001"):
        for s in json.loads((Path(browser.prefix) / "experiments" / f"{e}.json").read_text())["steps"]:
            Path(s["output_path"], "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    runs = training_runs(browser, "sweep-00000001", ["other-00000001", "sweep-00000001"])["runs"]
    # The shared data step is listed once, under the first experiment.
    assert [(r["identity"], r["experiment"]) for r in runs] == [
        ("tokenized/docs-aaaa0001", "sweep-00000001"),
        ("checkpoints/nano-b0000001", "sweep-00000001"),
        ("evaluation/nano-e0000001", "sweep-00000001"),
        ("checkpoints/nano-b0000009", "other-00000001"),
        ("evaluation/nano-e0000009", "other-00000001"),
    ]
