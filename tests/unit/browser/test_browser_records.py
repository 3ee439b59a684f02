"""The browser's reading of records: DAG layout, explain diffs, secret redaction, experiments."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import fsspec
import pytest

from marin_lab.browser.errors import BadRequestError, NotFoundError
from marin_lab.browser.graph import layout, longest_path_layers
from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.execution.review.baseline import version_changes
from marin_lab.io.secrets import REDACTED, redact, redact_text

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from browser_fixtures import EXPERIMENT_ID, SECRET_VALUE, build_prefix  # noqa: E402


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return build_prefix(tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def browser(fx):
    return Browser(str(fx.prefix), Roots.of([str(fx.prefix)]))


def test_longest_path_layers_put_each_step_right_of_its_deepest_dependency():
    deps = {"b": ["a"], "c": ["a", "b"], "d": []}
    assert longest_path_layers(["a", "b", "c", "d"], deps) == {"a": 0, "b": 1, "c": 2, "d": 0}


def test_layout_edges_point_rightwards_and_nodes_do_not_overlap():
    nodes = [f"n{i}" for i in range(60)]
    deps = {f"n{i}": [f"n{i // 2}"] for i in range(1, 60)}
    g = layout(nodes, deps)
    assert len(g["edges"]) == 59
    for edge in g["edges"]:
        assert g["positions"][edge["from"]]["x"] < g["positions"][edge["to"]]["x"]
    spots = {(p["x"], p["y"]) for p in g["positions"].values()}
    assert len(spots) == len(nodes)


def test_layout_survives_a_cycle_and_unknown_dependencies():
    g = layout(["a", "b"], {"a": ["b"], "b": ["a", "elsewhere-00000000"]})
    assert set(g["positions"]) == {"a", "b"}
    assert all(e["from"] in ("a", "b") for e in g["edges"])


def test_layout_of_a_deep_chain_does_not_recurse():
    nodes = [f"s{i}" for i in range(5000)]
    layers = longest_path_layers(nodes, {f"s{i}": [f"s{i - 1}"] for i in range(1, 5000)})
    assert layers["s4999"] == 4999


def test_version_changes_field_by_field():
    old = {"name": "t", "config": {"tokenizer": "gpt2", "seq": 128, "gone": 1}, "dependencies": ["a-00000000"]}
    new = {"name": "t", "config": {"tokenizer": "llama3", "seq": 128, "new": True}, "dependencies": ["a-00000001"]}
    changes = {c["field"]: c for c in version_changes(old, new)}
    assert changes["config.tokenizer"]["change"] == "changed"
    assert (changes["config.tokenizer"]["old"], changes["config.tokenizer"]["new"]) == ("gpt2", "llama3")
    assert changes["config.gone"]["change"] == "removed"
    assert changes["config.new"]["change"] == "added"
    assert "config.seq" not in changes and "name" not in changes


def test_redact_hides_secret_env_vars_but_keeps_config_fields_named_like_tokens():
    record = {
        "config": {"tokenizer": "gpt2", "max_tokens": 5},
        "environment": {"env": {"WANDB_API_KEY": "s1", "hf_token": "s2", "PATH": "/bin"}},
        "AWS_SECRET_ACCESS_KEY": "s3",
    }
    out = redact(record)
    assert out["config"] == {"tokenizer": "gpt2", "max_tokens": 5}
    assert out["environment"]["env"] == {"WANDB_API_KEY": REDACTED, "hf_token": REDACTED, "PATH": "/bin"}
    assert out["AWS_SECRET_ACCESS_KEY"] == REDACTED
    text = redact_text('x\nGITHUB_TOKEN=abc123\n{"DB_PASSWORD": "hunter2"}\n')
    assert "abc123" not in text and "hunter2" not in text and text.count(REDACTED) == 2


def test_experiments_newest_first_with_status_counts_and_corrupt_ones_listed(browser):
    exps = browser.experiments()
    assert [e["id"] for e in exps] == [EXPERIMENT_ID, "older-11112222", "broken-deadbeef"]
    assert exps[0]["status_counts"] == {"SUCCESS": 3, "FAILED": 1, "CORRUPT": 1, "MISSING": 1}
    assert exps[2]["state"] == "corrupt" and "not valid JSON" in exps[2]["error"]


def test_experiment_has_statuses_dependents_and_a_graph(browser):
    exp = browser.experiment(EXPERIMENT_ID)
    by = {s["key"]: s for s in exp["steps"]}
    assert by["report/summary-eeee0005"]["status"] == "CORRUPT"
    assert by["report/missing-ffff0006"]["status"] == "MISSING"
    assert set(by["eval/tiny-dddd0004"]["dependents"]) == {"report/summary-eeee0005", "report/missing-ffff0006"}
    assert exp["graph"]["positions"]["report/summary-eeee0005"]["layer"] == 4
    assert len(exp["graph"]["edges"]) == 6


def test_unknown_or_malformed_experiment_ids(browser):
    with pytest.raises(NotFoundError):
        browser.experiment("nope-00000000")
    with pytest.raises(BadRequestError):
        browser.experiment("../etc/passwd")


def test_step_explain_goes_one_level_into_a_changed_dependency(browser, fx):
    step = browser.step(str(fx.tokenize))
    ex = step["explain"]
    assert ex["against"] == "tokenize/docs-bbbb0001"
    changes = {c["field"]: c for c in ex["changes"]}
    assert changes["config.tokenizer"]["old"] == "gpt2"
    because = changes["dependencies"]["because"]
    assert because["dependency"] == "raw/docs"
    assert because["changes"][0]["field"] == "config.source"
    assert [d["identity"] for d in step["dependents"]] == ["train/tiny-cccc0003"]
    assert [d["identity"] for d in step["dependencies"]] == ["raw/docs-aaaa0001"]


def test_step_record_never_carries_a_secret(browser, fx):
    step = browser.step(str(fx.raw))
    assert SECRET_VALUE not in json.dumps(step)
    assert step["record"]["environment"]["env"]["WANDB_API_KEY"] == REDACTED


def test_corrupt_record_is_a_state_not_an_exception(browser, fx):
    step = browser.step(str(fx.corrupt))
    assert step["info"]["state"] == "corrupt" and step["record"] is None
    assert step["status"] == "CORRUPT"


def test_a_moved_prefix_still_finds_steps_by_identity(tmp_path):
    fx = build_prefix(tmp_path / "a")
    moved = tmp_path / "moved"
    fx.prefix.rename(moved)
    exp = Browser(str(moved), Roots.of([str(moved)])).experiment(EXPERIMENT_ID)
    by = {s["key"]: s for s in exp["steps"]}
    assert by["raw/docs-aaaa0001"]["output_path"] == str(moved / "raw/docs-aaaa0001")
    assert by["raw/docs-aaaa0001"]["status"] == "SUCCESS"


def test_an_object_store_prefix_reads_the_same_way():
    fs = fsspec.filesystem("memory")
    base = "memory://browser-test/prefix"
    step = {
        "name": "raw/docs",
        "identity": "raw/docs-12345678",
        "output_path": f"{base}/raw/docs-12345678",
        "dependencies": [],
    }
    fs.pipe(
        f"{base}/experiments/e-00000001.json",
        json.dumps({"name": "e", "created": "2026-01-01T00:00:00Z", "steps": [step]}).encode(),
    )
    fs.pipe(f"{base}/raw/docs-12345678/.executor_status", b'{"status": "RUNNING"}')
    try:
        b = Browser(base, Roots.of([base]))
        assert b.experiments()[0]["status_counts"] == {"RUNNING": 1}
        assert b.experiment("e-00000001")["steps"][0]["output_path"] == f"{base}/raw/docs-12345678"
    finally:
        fs.rm("/browser-test", recursive=True)


def test_explain_without_an_earlier_version_says_it_compares_with_a_newer_one(browser, fx):
    assert browser.step(str(fx.tokenize))["explain"]["newer"] is False
    oldest = browser.step(str(fx.raw_old))["explain"]
    assert oldest["newer"] is True and oldest["against"] == "raw/docs-aaaa0001"
