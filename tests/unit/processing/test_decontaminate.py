"""The decontaminate step: planted leaks are found whatever their layout, and what was not checked says so."""

from __future__ import annotations

import json

import pytest

from marin_lab.io.documents import read_documents, read_lines, write_documents
from marin_lab.processing import decontaminate as dc
from marin_lab.processing.decontaminate import DecontaminateConfig, NgramIndex, decontaminate, find_matches
from marin_lab.processing.errors import ProcessingError
from marin_lab.store.contamination import read_contamination, read_contamination_report, write_task_items

QUESTION = (
    "A farmer plants three rows of corn with twelve plants in each row and then buys two more rows "
    "of the same size. How many corn plants does the farmer have now?"
)
ANSWER = "Five rows of twelve plants make sixty corn plants."
SHORT_Q, SHORT_A = "Which gas do green plants take in from the air?", "carbon dioxide"
CLEAN = (
    "The interpreter reads the module once, compiles it to bytecode and caches the result next to the "
    "source file, so that the next import of the same module skips the compilation step entirely."
)


def _items(tmp_path, extra_tasks: dict | None = None) -> str:
    folder = tmp_path / "items"
    tasks = {
        "math": {
            "data_source": "test",
            "split": "test",
            "items": [
                {"id": 0, "question": "How many legs do four spiders have in total?", "answer": "thirty two"},
                {"id": 7, "question": QUESTION, "answer": ANSWER},
            ],
        },
        "science": {
            "data_source": "test",
            "split": "validation",
            "items": [
                {"id": 3, "question": SHORT_Q, "answer": SHORT_A},
                {"id": 4, "question": "Is ice cold?", "answer": "yes"},
            ],
        },
        **(extra_tasks or {}),
    }
    write_task_items(str(folder), {"data": "offline", "tasks": tasks})
    return str(folder)


def _rewrap(text: str, width: int = 8) -> str:
    words = text.split()
    return "\n".join(" ".join(words[i : i + width]) for i in range(0, len(words), width))


def _run(tmp_path, docs_by_shard: dict[str, list[dict]], items: str | None = None, **options) -> dict:
    folder = tmp_path / "docs"
    for shard, docs in docs_by_shard.items():
        write_documents(str(folder / shard), docs)
    out = str(tmp_path / "out")
    decontaminate(
        DecontaminateConfig(input_path=str(folder), items_path=items or _items(tmp_path), output_path=out, **options)
    )
    return read_contamination(out)


LEAKS = {
    "verbatim": f"Worksheet 4.\n{QUESTION} {ANSWER}\nEnd of worksheet.",
    "rewrapped_8_words": "Worksheet 4.\n" + _rewrap(f"{QUESTION} {ANSWER}") + "\nEnd of worksheet.",
    "case_and_punctuation": "WORKSHEET: "
    + QUESTION.upper().replace(",", " ;").replace("?", " ??").replace(".", "!")
    + " -- "
    + ANSWER.lower().rstrip("."),
}


@pytest.mark.parametrize("kind", sorted(LEAKS))
def test_a_planted_leak_is_caught_whatever_its_layout(tmp_path, kind):
    report = _run(tmp_path, {"a.jsonl.gz": [{"id": "clean", "text": CLEAN}, {"id": "leak", "text": LEAKS[kind]}]})
    assert read_contamination_report(str(tmp_path / "out")) == {"math": {7}, "science": set()}
    [doc] = report["documents"]
    assert (doc["id"], doc["shard"]) == ("leak", "a.jsonl.gz")
    [match] = doc["matches"]
    assert (match["task"], match["item"]) == ("math", 7) and match["ngrams"] >= 1
    assert report["complete"] and report["documents_checked"] == 2


def test_marin_s_per_line_ngrams_would_miss_the_rewrap_ours_does_not():
    """The 8-word re-wrap leaves no line of 13 words (marin#6852), so only a word stream across lines finds it."""
    rewrapped = LEAKS["rewrapped_8_words"]
    assert max(len(line.split()) for line in rewrapped.splitlines()) < 13
    index, _ = NgramIndex.build({"math": [{"id": 7, "question": QUESTION, "answer": ANSWER}]}, 13, 8)
    [found] = find_matches(index, [rewrapped])
    assert sum(found.values()) == len(dc.words(f"{QUESTION} {ANSWER}")) - 12  # every 13-gram of the item


def test_a_clean_document_and_a_near_miss_are_not_contaminated(tmp_path):
    twelve_words = " ".join(dc.words(QUESTION)[:12])  # one word short of an n-gram
    report = _run(tmp_path, {"a.jsonl.gz": [{"id": "clean", "text": CLEAN}, {"id": "near", "text": twelve_words}]})
    assert report["documents"] == [] and read_contamination_report(str(tmp_path / "out")) == {
        "math": set(),
        "science": set(),
    }


def test_the_report_names_task_item_and_document_and_the_filtered_shards_drop_them(tmp_path):
    docs = {
        "a.jsonl.gz": [{"id": "a0", "text": CLEAN}, {"id": "a1", "text": LEAKS["verbatim"]}],
        "b.jsonl.gz": [{"id": "b0", "text": f"Quiz: {SHORT_Q} Answer: {SHORT_A}."}, {"id": "b1", "text": CLEAN}],
    }
    report = _run(tmp_path, docs)
    out = tmp_path / "out"
    assert read_contamination_report(str(out)) == {"math": {7}, "science": {3}}
    assert {(d["shard"], d["id"], m["task"], m["item"]) for d in report["documents"] for m in d["matches"]} == {
        ("a.jsonl.gz", "a1", "math", 7),
        ("b.jsonl.gz", "b0", "science", 3),
    }
    # An item shorter than ngram_size matches only whole; one under min_item_words is listed, never "clean".
    assert report["tasks"]["science"]["items_too_short"] == [4]
    assert report["tasks"]["science"]["items_checked"] == 1
    kept = {d["id"] for shard in ("a.jsonl.gz", "b.jsonl.gz") for d in read_documents(str(out / "data" / shard))}
    assert kept == {"a0", "b1"}
    removed = [json.loads(line) for line in read_lines(str(out / "removed" / "a.jsonl.zst"))]
    assert [(r["id"], r["rule"], r["matches"][0]["item"]) for r in removed] == [("a1", "contaminated", 7)]


def test_without_filtering_only_the_report_and_matches_are_written(tmp_path):
    _run(tmp_path, {"a.jsonl.gz": [{"id": "a1", "text": LEAKS["verbatim"]}]}, filter_documents=False)
    out = tmp_path / "out"
    assert not (out / "data").exists() and (out / "matches" / "a.jsonl.zst").exists()
    assert read_contamination_report(str(out)) == {"math": {7}, "science": set()}


def test_shards_of_one_name_in_two_folders_keep_their_own_matches(tmp_path):
    docs = {
        "x/a.jsonl.gz": [{"id": "x1", "text": LEAKS["verbatim"]}],
        "y/a.jsonl.gz": [{"id": "y1", "text": LEAKS["rewrapped_8_words"]}],
    }
    report = _run(tmp_path, docs)
    found = sorted((d["shard"], d["id"]) for d in report["documents"])
    assert found == [("x/a.jsonl.gz", "x1"), ("y/a.jsonl.gz", "y1")]


def test_a_rerun_skips_finished_shards(tmp_path, monkeypatch):
    docs = {"a.jsonl.gz": [{"id": "a1", "text": LEAKS["verbatim"]}], "b.jsonl.gz": [{"id": "b1", "text": CLEAN}]}
    _run(tmp_path, docs)

    def no_more_matching(*args, **kwargs):
        raise AssertionError("a finished shard was read again")

    monkeypatch.setattr(dc, "find_matches", no_more_matching)
    report = _run(tmp_path, docs)
    assert read_contamination_report(str(tmp_path / "out")) == {"math": {7}, "science": set()}
    assert report["documents_checked"] == 2


def test_a_task_without_documents_is_not_checked_rather_than_clean(tmp_path):
    reason = "task wsc273: no documents for lighteval/winograd_wsc (wsc273): not in the offline copy"
    items = _items(tmp_path, {"wsc273": {"error": reason}})
    report = _run(tmp_path, {"a.jsonl.gz": [{"id": "a1", "text": CLEAN}]}, items=items)
    assert "wsc273" not in read_contamination_report(str(tmp_path / "out"))
    assert report["not_checked"]["tasks"] == {"wsc273": reason}
    assert report["complete"] is False


def test_a_damaged_shard_is_named_as_not_checked(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.jsonl.gz").write_bytes(b"\x1f\x8b\x08 not a gzip stream")
    report = _run(tmp_path, {"a.jsonl.gz": [{"id": "a1", "text": LEAKS["verbatim"]}]})
    assert report["complete"] is False and report["documents_checked"] == 1
    [(shard, reason)] = report["not_checked"]["shards"].items()
    assert shard == "b.jsonl.gz" and "b.jsonl.gz" in reason and "\n" not in reason
    assert read_contamination_report(str(tmp_path / "out")) == {"math": {7}, "science": set()}


def test_bad_settings_and_a_missing_items_file_are_one_line(tmp_path):
    write_documents(str(tmp_path / "docs" / "a.jsonl.gz"), [{"id": "a", "text": CLEAN}])
    base = {"input_path": str(tmp_path / "docs"), "output_path": str(tmp_path / "out")}
    with pytest.raises(ProcessingError, match="min_item_words=20 is more than ngram_size=13"):
        decontaminate(DecontaminateConfig(items_path=_items(tmp_path), min_item_words=20, **base))
    with pytest.raises(ProcessingError, match=r"items_path: .*task_items.json: does not exist"):
        decontaminate(DecontaminateConfig(items_path=str(tmp_path / "nowhere"), **base))


def test_matches_do_not_depend_on_how_documents_are_batched(monkeypatch):
    index, _ = NgramIndex.build({"math": [{"id": 7, "question": QUESTION, "answer": ANSWER}]}, 13, 8)
    texts = [CLEAN, LEAKS["verbatim"], CLEAN, LEAKS["rewrapped_8_words"]] * 3
    whole = find_matches(index, texts)
    monkeypatch.setattr(dc, "_BATCH_CHARS", 200)
    assert find_matches(index, texts) == whole
    assert [bool(f) for f in whole] == [False, True, False, True] * 3


@pytest.mark.slow  # imports lm-eval and JAX
def test_a_task_s_template_words_are_cut_from_its_prompts():
    from marin_lab.evaluation.task_items import strip_template

    prompts = ["Question: Which gas do plants use?\nAnswer:", "Question: What is ice?\nAnswer:"]
    assert strip_template(prompts) == ["Which gas do plants use?", "What is ice?"]
    # A shared first letter or last mark is not a template word.
    assert strip_template(["Roof work: a man climbs.", "Running: a woman jogs."]) == [
        "Roof work: a man climbs.",
        "Running: a woman jogs.",
    ]
    assert strip_template(["Only one prompt\n"]) == ["Only one prompt"]


@pytest.mark.slow
def test_task_items_are_the_documents_the_evaluation_reads(tmp_path):
    """arc_easy from the pinned offline copy (as evaluate_lm reads it); wsc273 has none and says why."""
    from marin_lab.evaluation.task_items import TaskItemsConfig, export_task_items
    from marin_lab.store.contamination import read_task_items

    result = export_task_items(TaskItemsConfig(tasks=("arc_easy", "wsc273"), output_path=str(tmp_path)))
    assert result == {"tasks": {"arc_easy": 570, "wsc273": None}, "without_documents": ["wsc273"]}
    tasks = read_task_items(str(tmp_path))["tasks"]
    first = tasks["arc_easy"]["items"][0]
    assert first == {
        "id": 0,
        "question": "Which technology was developed most recently?",
        "answer": "cellular telephone",
    }
    assert tasks["arc_easy"]["split"] == "validation" and "no documents" in tasks["wsc273"]["error"]


@pytest.mark.slow  # imports the recipe helpers (lm-eval, JAX)
def test_default_decontaminate_reads_the_items_step_and_the_documents():
    from experiments.defaults import default_decontaminate
    from marin_lab.execution import ExecutorStep, StepDefinitionError

    docs = ExecutorStep(name="raw/docs", fn=len, config=None)
    step = default_decontaminate("docs", docs, tasks=["arc_easy", "gsm8k"], ngram_size=10)
    assert step.name == "decontaminated/docs" and step.config.ngram_size == 10
    assert (step.config.input_path.step, step.config.input_path.name) == (docs, "data")
    items = step.config.items_path.step
    assert items.name == "task-items/docs" and items.config.tasks == ("arc_easy", "gsm8k")
    assert items.config.data == "offline"
    with pytest.raises(StepDefinitionError, match="tasks must be a list"):
        default_decontaminate("docs", docs, tasks="arc_easy")
