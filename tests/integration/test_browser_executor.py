"""The browser reads what the real executor writes (guards the record formats between the two)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from marin_lab.browser.metrics import read_metrics
from marin_lab.browser.paths import Roots
from marin_lab.browser.preview import preview
from marin_lab.browser.records import Browser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from browser_fixtures import CountConfig, WordsConfig, count_words, write_words  # noqa: E402

from marin_lab.execution import ExecutorMainConfig


@pytest.mark.slow
def test_records_of_two_runs_show_statuses_graph_and_the_explain_chain(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "sk-executor-test-secret")
    from marin_lab.execution import Executor, ExecutorStep, output_path_of, this_output_path, versioned

    prefix = str(tmp_path / "prefix")
    for word in ("hello", "bonjour"):
        raw = ExecutorStep(
            name="raw/words", fn=write_words, config=WordsConfig(output_path=this_output_path(), word=versioned(word))
        )
        counted = ExecutorStep(
            name="count/words",
            fn=count_words,
            config=CountConfig(input_path=output_path_of(raw), output_path=this_output_path()),
        )
        Executor(ExecutorMainConfig(prefix=prefix, backend="local", max_concurrent=1), script=f"browser_{word}.py").run(
            [counted]
        )

    browser = Browser(prefix, Roots.of([prefix]))
    experiments = browser.experiments()
    assert len(experiments) == 2 and all(e["status_counts"] == {"SUCCESS": 2} for e in experiments)
    newest = browser.experiment(experiments[0]["id"])
    by_name = {s["name"]: s for s in newest["steps"]}
    assert by_name["count/words"]["dependencies"] == [by_name["raw/words"]["key"]]
    assert newest["graph"]["positions"][by_name["count/words"]["key"]]["layer"] == 1

    step = browser.step(by_name["count/words"]["output_path"])
    assert step["info"]["state"] == "ok" and step["status"] == "SUCCESS"
    assert step["record"]["status_history"][-1]["status"] == "SUCCESS"
    assert [f["path"] for f in step["record"]["manifest"]["files"]] == ["metrics.jsonl"]
    changes = step["explain"]["changes"]
    because = next(c["because"] for c in changes if c.get("because"))
    word_change = next(c for c in because["changes"] if c["field"].endswith("word"))
    assert {word_change["old"], word_change["new"]} == {"hello", "bonjour"}
    assert read_metrics(browser.roots, step["output_path"])["rows"] == 10

    docs = preview(browser.roots, f"{by_name['raw/words']['output_path']}/docs.jsonl", None, 5)
    assert docs["items"][0]["value"]["text"].endswith("<i>0</i>")
    assert "sk-executor-test-secret" not in json.dumps(step)
