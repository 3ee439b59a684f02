"""Contamination on every evaluated task (through the lineage), retrying only failed tasks, and
rescoring from stored samples: evaluate_lm on a tiny trained model with offline documents."""

import importlib
import json
import shutil

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from marin_lab.cli import main as cli_main
from marin_lab.evaluation import EvalLmConfig, EvaluationError, HarnessError, evaluate_lm
from marin_lab.evaluation.contamination import MIN_ITEM_WORDS, NGRAM_SIZE
from marin_lab.evaluation.rescore import compare_clean, rescore
from marin_lab.evaluation.results import load_run
from marin_lab.evaluation.task_items import task_items
from marin_lab.execution.plan.planner import function_path
from marin_lab.io.documents import write_documents
from marin_lab.main.train_lm import train_lm
from marin_lab.processing.decontaminate import DecontaminateConfig
from marin_lab.processing.tokenize import tokenize
from marin_lab.testing.training import tiny_model, tiny_train_config
from marin_lab.training import write_token_cache
from marin_lab.training.optimizer import OptimizerConfig

evaluate_module = importlib.import_module("marin_lab.evaluation.evaluate_lm")  # the package exports the function

pytestmark = pytest.mark.slow  # a trained tiny model and lm-eval's task runs: tens of seconds

SENTENCES = [f"the {a} sat on the {b}." for a, b in [("cat", "mat"), ("dog", "log"), ("cow", "field")]]
TASKS = ("arc_easy:0:30", "copa:0:6")


def _record(out, name, fn, config, deps=()):
    out.mkdir(parents=True, exist_ok=True)
    (out / ".executor_info").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": name,
                "identity": f"{name}-00000000",
                "hash": "00000000",
                "output_path": str(out),
                "fn": fn,
                "config": config,
                "status": "SUCCESS",
                "dependencies": [{"name": n, "identity": f"{n}-0", "output_path": str(p)} for n, p in deps],
            }
        )
    )


def _planted():
    """Every even arc_easy item long enough to check: planted into the training documents."""
    items = task_items("arc_easy", "offline")["items"]
    long = [i for i in items if len(f"{i['question']} {i['answer']}".split()) >= NGRAM_SIZE]
    return {i["id"]: i for i in long if i["id"] % 2 == 0}


@pytest.fixture(scope="module")
def lineage(tmp_path_factory):
    """documents (with planted items) -> tokenize -> train, each with its step record."""
    root = tmp_path_factory.mktemp("lineage")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        SENTENCES * 20,
        trainers.BpeTrainer(
            vocab_size=290, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    rng = np.random.default_rng(0)
    planted = _planted()
    texts = [" ".join(rng.choice(SENTENCES, size=6)) for _ in range(60)]
    # Re-wrapped and re-cased, between ordinary text: the evaluation still finds them.
    texts += [f"Notes.\n{i['question'].upper()}\n{i['answer']}\nThe end." for i in planted.values()]
    docs = root / "documents"
    write_documents(str(docs / "part-0.jsonl.gz"), [{"id": f"d{n}", "text": t} for n, t in enumerate(texts)])
    cache = root / "tokenized"
    ids = [tok.encode(t).ids for t in texts]
    write_token_cache(
        str(cache),
        {"train": ids[:-8], "validation": ids[-8:]},
        vocab_size=tok.get_vocab_size(),
        eos_id=tok.token_to_id("<eos>"),
        tokenizer_json=tok.to_str(),
    )
    _record(cache, "tokenized/docs", function_path(tokenize), {"input_path": str(docs), "output_path": str(cache)})
    train = root / "train"
    cfg = tiny_train_config(
        str(train),
        {"web": str(cache)},
        num_train_steps=20,
        model=tiny_model(vocab_size=tok.get_vocab_size()),
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup=4),
    )
    train_lm(cfg)
    _record(
        train,
        "checkpoints/tiny",
        function_path(train_lm),
        {"data": {"caches": {"web": str(cache)}}, "eval_caches": {}, "output_path": str(train)},
        [("tokenized/docs", cache)],
    )
    # The same weights with no step record: an imported model, whose training data is unknown.
    imported = root / "imported"
    shutil.copytree(train, imported, ignore=shutil.ignore_patterns(".executor_info"))
    return root, train, imported, cache, planted


@pytest.fixture(scope="module")
def evaluated(lineage, tmp_path_factory):
    root, train, _, cache, _ = lineage
    out = tmp_path_factory.mktemp("evaluated") / "eval"
    results = evaluate_lm(
        EvalLmConfig(
            checkpoint_path=str(train),
            output_path=str(out),
            tokenizer_path=f"{cache}/tokenizer.json",
            tasks=TASKS,
            data="offline",
        )
    )
    return out, results


def test_the_defaults_are_the_decontaminate_steps():
    config = DecontaminateConfig(input_path="a", items_path="b", output_path="c")
    assert (config.ngram_size, config.min_item_words) == (NGRAM_SIZE, MIN_ITEM_WORDS)


def test_a_planted_item_in_the_training_documents_is_found_and_the_clean_score_left_beside(lineage, evaluated):
    _, _, _, _, planted = lineage
    out, results = evaluated
    arc = results["marin_lab"]["tasks"]["arc_easy"]
    found = arc["contamination"]
    scored = [json.loads(x)["doc_id"] for x in (out / arc["samples_file"]).read_text().splitlines()]
    expected = sorted(i for i in scored if i in planted)
    assert expected, "the sample of items holds no planted one: plant more"
    assert found["checked"] is True and found["reason"] is None
    assert found["contaminated_ids"] == expected
    assert found["fraction"] == pytest.approx(len(expected) / found["items_checked"]) and found["fraction"] > 0
    assert found["items_checked"] == len(scored) - len(found["unchecked_ids"])
    assert any("computed over" in s and "documents" in s for s in found["source"])
    # the clean score: the headline metric over the other items, with its Wilson interval
    clean = found["clean"]
    rows = [json.loads(x) for x in (out / arc["samples_file"]).read_text().splitlines()]
    left_out = set(expected) | set(found["unchecked_ids"])
    kept = [r[clean["metric"]] for r in rows if r["doc_id"] not in left_out]
    assert clean["metric"] == "acc_norm" and clean["n"] == len(kept) == len(scored) - len(left_out)
    assert clean["value"] == pytest.approx(sum(kept) / len(kept))
    assert clean["interval"]["method"] == "wilson"
    assert clean["interval"]["low"] <= clean["value"] <= clean["interval"]["high"]
    # copa's items are not in the documents: checked, and none found (a measured 0)
    copa = results["marin_lab"]["tasks"]["copa"]["contamination"]
    assert copa["checked"] is True and copa["contaminated_ids"] == [] and copa["fraction"] == 0.0
    # the reader behind `marin-lab evals` and the browser carries the field
    run = load_run(str(out))
    assert run.tasks["arc_easy"].contamination["fraction"] == pytest.approx(found["fraction"])


def test_an_imported_model_is_not_checked_never_zero(lineage, tmp_path):
    _, _, imported, cache, _ = lineage
    results = evaluate_lm(
        EvalLmConfig(
            checkpoint_path=str(imported),
            output_path=str(tmp_path / "eval"),
            tokenizer_path=f"{cache}/tokenizer.json",
            tasks=("copa:0:4",),
            data="offline",
        )
    )
    found = results["marin_lab"]["tasks"]["copa"]["contamination"]
    assert found["checked"] is False and found["fraction"] is None and found["clean"] is None
    assert "imported model" in found["reason"] and str(imported) in found["reason"]
    assert load_run(str(tmp_path / "eval")).tasks["copa"].contamination["fraction"] is None


def test_a_retry_runs_only_the_failed_task_and_keeps_the_others(lineage, tmp_path, monkeypatch):
    _, train, _, cache, _ = lineage
    out = tmp_path / "eval"
    config = EvalLmConfig(
        checkpoint_path=str(train),
        output_path=str(out),
        tokenizer_path=f"{cache}/tokenizer.json",
        tasks=("arc_easy:0:5", "copa:0:4"),
        data="offline",
    )
    real = evaluate_module.run_task
    calls: list[str] = []

    def flaky(lm, spec, **kwargs):
        calls.append(spec.name)
        if spec.name == "copa" and calls.count("copa") == 1:
            raise HarnessError("task copa: the hub timed out")
        return real(lm, spec, **kwargs)

    monkeypatch.setattr(evaluate_module, "run_task", flaky)
    with pytest.raises(EvaluationError, match="1 of 2 tasks failed"):
        evaluate_lm(config)
    arc_file = out / "samples_arc_easy.jsonl"
    before = (arc_file.stat().st_mtime_ns, arc_file.read_bytes())
    first = json.loads((out / "results.json").read_text())
    results = evaluate_lm(config)
    assert calls == ["arc_easy", "copa", "copa"]  # the retry ran copa alone
    assert (arc_file.stat().st_mtime_ns, arc_file.read_bytes()) == before
    tasks = results["marin_lab"]["tasks"]
    assert results["marin_lab"]["reused_tasks"] == ["arc_easy"]
    assert tasks["arc_easy"]["reused"] is True and "reused" not in tasks["copa"]
    assert tasks["copa"]["status"] == "ok" and (out / "samples_copa.jsonl").exists()
    assert tasks["arc_easy"]["metrics"] == first["marin_lab"]["tasks"]["arc_easy"]["metrics"]
    assert results["results"]["arc_easy"] == first["results"]["arc_easy"] and "copa" in results["results"]
    # a samples file cut short is not complete: the next attempt runs that task again
    lines = arc_file.read_text().splitlines()
    arc_file.write_text("\n".join(lines[:-1]) + "\n")
    results = evaluate_lm(config)
    assert calls[3:] == ["arc_easy"] and results["marin_lab"]["reused_tasks"] == ["copa"]
    assert len(arc_file.read_text().splitlines()) == len(lines)


def test_rescore_equals_the_stored_numbers_and_notices_an_edited_sample(evaluated, tmp_path, capsys):
    src, _ = evaluated
    out = tmp_path / "eval"
    shutil.copytree(src, out)
    same = rescore(str(out))
    assert same["errors"] == [] and same["differ"] == 0
    metrics = {(r["task"], r["metric"]) for r in same["rows"] if r["same"]}
    assert {("arc_easy", "acc"), ("arc_easy", "acc_norm"), ("copa", "acc"), ("arc_easy", "acc_norm (clean items)")} <= (
        metrics
    )
    assert cli_main(["evals", "--rescore", str(out)]) == 0
    # one flipped answer
    path = out / "samples_arc_easy.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[0]["acc"] = 1.0 - rows[0]["acc"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    changed = rescore(str(out))
    assert [(r["task"], r["metric"]) for r in changed["rows"] if r["same"] is False] == [("arc_easy", "acc")]
    capsys.readouterr()
    assert cli_main(["evals", "--rescore", str(out)]) == 1
    assert "DIFFERS" in capsys.readouterr().out
    # a damaged samples file: one line naming it, that task skipped, exit 1 at the end
    (out / "samples_copa.jsonl").write_text('{"doc_id": 0, "acc": 1}\n{"doc_id": 1, "ac\n')
    assert cli_main(["evals", "--rescore", str(out)]) == 1
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "samples_copa.jsonl" in err[0] and "line 2" in err[0] and "skipped" in err[0]
    assert "arc_easy" in captured.out and "copa" not in captured.out


def test_compare_clean_leaves_out_the_items_contaminated_in_either_run(evaluated, tmp_path, capsys):
    src, results = evaluated
    prefix = tmp_path / "store"
    for name in ("eval-a", "eval-b"):
        shutil.copytree(src, prefix / name)
    found = results["marin_lab"]["tasks"]["arc_easy"]["contamination"]
    left_out = len(set(found["contaminated_ids"]) | set(found["unchecked_ids"]))
    a, b = load_run(str(prefix / "eval-a"), "eval-a"), load_run(str(prefix / "eval-b"), "eval-b")
    clean = compare_clean(a, b)
    arc = clean["tasks"]["arc_easy"]
    scored = results["marin_lab"]["tasks"]["arc_easy"]["scored"]
    assert arc["left_out"] == left_out > 0 and arc["diff"]["n"] == scored - left_out
    assert clean["tasks"]["copa"]["left_out"] == len(
        results["marin_lab"]["tasks"]["copa"]["contamination"]["unchecked_ids"]
    )
    assert cli_main(["evals", str(prefix), "--compare", "eval-a", "eval-b", "--clean"]) == 0
    assert f"{scored - left_out} ({left_out} left out)" in capsys.readouterr().out
    assert cli_main(["evals", str(prefix), "--clean"]) == 1
    assert "--compare" in capsys.readouterr().err
