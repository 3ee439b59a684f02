"""Heuristic quality rules, one crafted failure per rule, and the filter step end to end."""

from __future__ import annotations

import dataclasses
import json

import pytest
import zstandard

from marin_lab.io import fs as mfs
from marin_lab.io.documents import read_documents, write_documents
from marin_lab.processing.quality import (
    HeuristicFilterConfig,
    QualityRules,
    check_document,
    filter_heuristics,
)

GOOD = (
    "The river that runs past the old mill has changed its course twice in the last century. "
    "Farmers who have worked the land on both banks remember the spring of the great flood, "
    "when the water rose above the stone wall and carried away the wooden bridge.\n\n"
    "After that year the town council decided to build a new bridge with steel beams. "
    "It took three summers to finish, and the children of the valley watched the cranes "
    "from the hill behind the school. Today the bridge is painted green and carries a "
    "narrow road to the market on the other side.\n\n"
    "Most visitors come for the autumn fair, which has been held in the square since the "
    "days when the mill still ground wheat for the whole district."
)


def words(n: int, word: str = "alpha") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


def test_good_english_prose_passes():
    assert check_document(GOOD) is None


def _lines_doc(lines: list[str]) -> str:
    return "\n".join(lines)


@pytest.mark.parametrize(
    "text, rule",
    [
        ("the cat and the dog", "min_words"),
        (" ".join(["a", "of", "the", "to"] * 20), "min_mean_word_length"),
        (" ".join(["the", "of"] + ["supercalifragilistic"] * 60), "max_mean_word_length"),
        (GOOD + " #tag" * 20, "max_symbol_word_ratio"),
        (_lines_doc([f"- the item {i} of that list with words and more" for i in range(20)]), "max_bullet_lines_ratio"),
        (
            _lines_doc([f"the story {i} of that town continues with more words here..." for i in range(20)]),
            "max_ellipsis_lines_ratio",
        ),
        (
            _lines_doc([f"the story {i} of that town continues with more words here \u2026" for i in range(20)]),
            "max_ellipsis_lines_ratio",
        ),
        (GOOD + " " + " ".join(["1234", "5678", "----"] * 40), "min_alpha_words_ratio"),
        (words(80, "lorem"), "min_stop_words"),
        (GOOD + "\n" + "\n".join(["the same line again and again for the reader"] * 12), "max_duplicate_lines_ratio"),
        (
            GOOD
            + "\n"
            + "\n".join(f"the note{i} of that day." for i in range(10))
            + "\n"
            + "\n".join([" ".join(f"the fox{i} ran" for i in range(50)) + "."] * 2),
            "max_duplicate_line_chars_ratio",
        ),
        (
            " ".join(["the blue house", "of the blue house", "and the blue house"] * 15) + ".",
            "max_top_2gram_chars_ratio",
        ),
        (
            _lines_doc([f"the w{i}alpha w{i}beta of w{i}gamma w{i}delta w{i}eps w{i}zeta" for i in range(12)]),
            "min_terminal_punctuation_lines_ratio",
        ),
        (GOOD + "\n" + "\n".join(f"w{i}x stays{i}." for i in range(40)), "max_short_lines_ratio"),
        (GOOD + "\nLorem ipsum dolor sit amet.", "lorem_ipsum"),
    ],
)
def test_each_rule_fires_on_its_crafted_document(text, rule):
    failed = check_document(text)
    assert failed is not None and failed[0] == rule, failed


def test_duplicate_ngrams_fire_when_top_ngram_rules_are_off():
    text = " ".join(f"the {w} story of that house" for w in ["red", "blue", "green"] * 12) + "."
    rules = QualityRules(max_top_ngram_chars_ratio=(), max_duplicate_lines_ratio=None)
    failed = check_document(text, rules)
    assert failed is not None and failed[0] == "max_duplicate_5gram_chars_ratio"


def test_a_rule_set_to_none_is_off():
    text = "the cat and the dog"
    assert check_document(text)[0] == "min_words"
    off = QualityRules(
        min_words=None, min_stop_words=None, min_terminal_punctuation_lines_ratio=None, max_short_lines_ratio=None
    )
    assert check_document(text, off) is None


def test_curly_braces_rule_is_opt_in():
    code = GOOD + '\nThe config is {"a": 1} in the file.'
    assert check_document(code) is None
    assert check_document(code, QualityRules(forbid_curly_braces=True)) == ("curly_braces", 1)


def test_config_is_frozen_and_hashable():
    cfg = HeuristicFilterConfig(input_path="a", output_path="b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_workers = 3  # type: ignore[misc]
    assert hash(cfg.rules) == hash(QualityRules())


def test_filter_heuristics_keeps_good_and_records_rules(tmp_path):
    (tmp_path / "in").mkdir()
    write_documents(
        str(tmp_path / "in" / "0.jsonl.gz"),
        [
            {"id": "good", "text": GOOD, "metadata": {"url": "x"}},
            {"id": "short", "text": "too short"},
        ],
    )
    (tmp_path / "in" / "1.jsonl").write_text(
        json.dumps({"id": "lorem", "text": GOOD + "\nLorem ipsum dolor."}) + "\n" + "oops\n"
    )
    out = tmp_path / "out"
    result = filter_heuristics(
        HeuristicFilterConfig(input_path=str(tmp_path / "in"), output_path=str(out), on_bad_record="skip")
    )
    kept = list(read_documents(str(out / "data" / "0.jsonl.gz")))
    assert kept == [{"id": "good", "text": GOOD, "metadata": {"url": "x"}}]
    assert list(read_documents(str(out / "data" / "1.jsonl"))) == []
    with open(out / "removed" / "0.jsonl.zst", "rb") as f:
        recs = [json.loads(x) for x in zstandard.ZstdDecompressor().stream_reader(f).read().splitlines()]
    assert recs == [{"id": "short", "shard": "0.jsonl.gz", "rule": "min_words", "value": 2}]
    assert result["input_records"] == 4
    assert result["kept"] == 1 and result["skipped_bad"] == 1
    assert result["removed"] == {"lorem_ipsum": 1, "min_words": 1}
    assert result["kept"] + result["removed_total"] + result["skipped_bad"] == result["input_records"]


def test_output_shards_keep_the_input_folder_structure_in_memory_fs():
    write_documents("memory://quality-nested/in/2024/a.jsonl", [{"id": "g", "text": GOOD}])
    write_documents("memory://quality-nested/in/2025/b.jsonl.gz", [{"id": "s", "text": "short"}])
    result = filter_heuristics(
        HeuristicFilterConfig(input_path="memory://quality-nested/in", output_path="memory://quality-nested/out")
    )
    assert [d["id"] for d in read_documents("memory://quality-nested/out/data/2024/a.jsonl")] == ["g"]
    assert list(read_documents("memory://quality-nested/out/data/2025/b.jsonl.gz")) == []
    raw = (
        zstandard.ZstdDecompressor()
        .decompressobj()
        .decompress(mfs.read_bytes("memory://quality-nested/out/removed/2025/b.jsonl.zst"))
    )
    assert [json.loads(x) for x in raw.splitlines()] == [
        {"id": "s", "shard": "2025/b.jsonl.gz", "rule": "min_words", "value": 1}
    ]
    assert result["removed"] == {"min_words": 1} and result["shards"] == 2
