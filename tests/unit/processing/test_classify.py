"""fastText classifier training (deterministic bytes) and classifier filtering / language ID.

The language-ID model here is a tiny one trained on generated English and German sentences, so
no model is downloaded; `lid.176.ftz` is used the same way (label `__label__en`).
"""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import zstandard

from marin_lab.io.documents import read_documents, write_documents
from marin_lab.processing.classify import (
    ClassifierError,
    ClassifyFilterConfig,
    FastTextScorer,
    TrainClassifierConfig,
    classify_filter,
    fasttext_line,
    load_fasttext,
    train_quality_classifier,
)
from marin_lab.processing.quarantine import BadShardsError, ShardPolicy

EN = (
    "the house is near the river and the children walk to school with their friends every "
    "morning while the sun rises over the quiet hills"
).split()
DE = (
    "das haus ist nahe am fluss und die kinder gehen mit ihren freunden jeden morgen zur schule "
    "während die sonne über den stillen hügeln aufgeht"
).split()


def sentences(words: list[str], n: int, seed: int, prefix: str) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "id": f"{prefix}-{i:03d}",
            "text": " ".join(rng.choice(words) for _ in range(20))
            + ".\n"
            + " ".join(rng.choice(words) for _ in range(15))
            + ".",
        }
        for i in range(n)
    ]


def tiny_config(root, out: str) -> TrainClassifierConfig:
    return TrainClassifierConfig(
        positive_paths=(str(root / "en"),),
        negative_paths=(str(root / "de"),),
        output_path=str(root / out),
        positive_label="en",
        negative_label="de",
        dim=16,
        bucket=10_000,
        epoch=20,
        lr=0.5,
    )


@pytest.fixture(scope="module")
def lid(tmp_path_factory):
    root = tmp_path_factory.mktemp("lid")
    write_documents(str(root / "en" / "0.jsonl"), sentences(EN, 150, 1, "en"))
    write_documents(str(root / "de" / "0.jsonl.gz"), sentences(DE, 150, 2, "de"))
    result = train_quality_classifier(tiny_config(root, "model"))
    return root, result


def test_fasttext_line_is_one_line():
    assert fasttext_line("a\nb\t c\r\n\nd ") == "a b\t c\r  d "
    assert fasttext_line("abcdef", max_chars=3) == "abc"


def test_training_reports_labels_counts_and_validation(lid):
    root, result = lid
    assert result["labels"] == ["__label__en", "__label__de"]
    assert result["train_documents"] == {"positive": 135, "negative": 135}
    assert result["validation"]["documents"] == 30
    assert result["validation"]["accuracy"] >= 0.95
    assert result["documents_read"] == 300 and result["skipped_bad"] == 0
    assert (root / "model" / "model.bin").stat().st_size == result["model_bytes"]


@pytest.mark.slow
def test_training_is_deterministic_to_the_byte(lid):
    # Regression: fastText in one process gives different weights from the third model on.
    root, first = lid
    again = [train_quality_classifier(tiny_config(root, f"again{i}"))["model_sha256"] for i in range(2)]
    assert again == [first["model_sha256"]] * 2
    assert (root / "again0" / "model.bin").read_bytes() == (root / "model" / "model.bin").read_bytes()


def test_scorer_gives_the_probability_of_the_label(lid):
    root, _ = lid
    model = load_fasttext(str(root / "model" / "model.bin"))
    en = FastTextScorer(model, "__label__en")
    de = FastTextScorer(model, "__label__de")
    texts = [" ".join(EN), " ".join(DE)]
    s_en, s_de = en.scores(texts), de.scores(texts)
    assert s_en[0][0] > 0.8 and s_en[1][0] < 0.2
    assert s_en[0][1] == "__label__en" and s_en[1][1] == "__label__de"
    for (a, _, _), (b, _, _) in zip(s_en, s_de, strict=True):
        assert a + b == pytest.approx(1.0, abs=1e-3)  # a binary model: both labels fetched


def test_classify_filter_as_language_id(lid, tmp_path):
    root, _ = lid
    mixed = sentences(EN, 5, 10, "en-new") + sentences(DE, 4, 11, "de-new")
    random.Random(0).shuffle(mixed)
    write_documents(str(tmp_path / "in" / "a.jsonl.zst"), mixed[:5])
    (tmp_path / "in" / "b.jsonl").write_text("\n".join(json.dumps(d) for d in mixed[5:]) + '\n{"id": "broken"\n')
    out = tmp_path / "out"
    result = classify_filter(
        ClassifyFilterConfig(
            input_path=str(tmp_path / "in"),
            output_path=str(out),
            model_path=str(root / "model" / "model.bin"),
            label="__label__en",
            threshold=0.65,
            attribute="language",
            rule="language",
            on_bad_record="skip",
        )
    )
    kept = list(read_documents(str(out / "data" / "a.jsonl.zst"))) + list(read_documents(str(out / "data" / "b.jsonl")))
    assert sorted(d["id"] for d in kept) == [f"en-new-{i:03d}" for i in range(5)]
    assert all(
        d["metadata"]["language"]["top_label"] == "en" and d["metadata"]["language"]["score"] >= 0.65 for d in kept
    )
    recs = []
    for name in ("a.jsonl.zst", "b.jsonl.zst"):
        with open(out / "removed" / name, "rb") as f:
            recs += [json.loads(x) for x in zstandard.ZstdDecompressor().stream_reader(f).read().splitlines()]
    assert sorted(r["id"] for r in recs) == [f"de-new-{i:03d}" for i in range(4)]
    assert all(r["rule"] == "language" and r["top_label"] == "de" and r["score"] < 0.65 for r in recs)
    assert result["input_records"] == 10 and result["skipped_bad"] == 1
    assert result["kept"] == 5 and result["removed"] == {"language": 4}


def test_classify_filter_names_a_missing_model(tmp_path):
    write_documents(str(tmp_path / "in" / "a.jsonl"), [{"id": "x", "text": "y"}])
    with pytest.raises(ClassifierError, match="nope.bin.*does not exist"):
        classify_filter(
            ClassifyFilterConfig(
                input_path=str(tmp_path / "in"), output_path=str(tmp_path / "o"), model_path=str(tmp_path / "nope.bin")
            )
        )


def test_classify_filter_names_an_unknown_label(lid, tmp_path):
    root, _ = lid
    write_documents(str(tmp_path / "in" / "a.jsonl"), [{"id": "x", "text": "y"}])
    with pytest.raises(ClassifierError, match=r"'en' is not one of the model's labels \(__label__"):
        classify_filter(
            ClassifyFilterConfig(
                input_path=str(tmp_path / "in"),
                output_path=str(tmp_path / "o"),
                model_path=str(root / "model" / "model.bin"),
                label="en",
            )
        )


def test_training_rejects_same_labels_and_empty_classes(tmp_path):
    write_documents(str(tmp_path / "en" / "0.jsonl"), sentences(EN, 3, 1, "en"))
    write_documents(str(tmp_path / "de" / "0.jsonl"), sentences(DE, 3, 2, "de"))
    cfg = tiny_config(tmp_path, "m")
    with pytest.raises(ClassifierError, match="both 'x'"):
        train_quality_classifier(
            TrainClassifierConfig(
                positive_paths=cfg.positive_paths,
                negative_paths=cfg.negative_paths,
                output_path=cfg.output_path,
                positive_label="x",
                negative_label="x",
            )
        )
    write_documents(str(tmp_path / "empty" / "0.jsonl"), [])
    with pytest.raises(ClassifierError, match="no training documents from negative_paths"):
        train_quality_classifier(
            TrainClassifierConfig(
                positive_paths=cfg.positive_paths,
                negative_paths=(str(tmp_path / "empty"),),
                output_path=cfg.output_path,
            )
        )


@pytest.mark.slow
def test_classify_filter_names_a_bad_shard_and_keeps_the_others(lid, tmp_path):
    """A shard that cannot be read (not gzip) under a shard policy: the others are filtered and kept."""
    root, _ = lid
    write_documents(str(tmp_path / "in" / "a.jsonl.zst"), sentences(EN, 4, 12, "en-a"))
    (tmp_path / "in" / "b.jsonl.gz").write_bytes(b"not gzip")
    config = ClassifyFilterConfig(
        input_path=str(tmp_path / "in"),
        output_path=str(tmp_path / "out"),
        model_path=str(root / "model" / "model.bin"),
        label="__label__en",
        shard_policy=ShardPolicy(retries=0),
    )
    with pytest.raises(BadShardsError, match=r"(?s)classify_filter: 1 of 2 shards are bad .*b\.jsonl\.gz"):
        classify_filter(config)
    assert (tmp_path / "out" / "data" / "a.jsonl.zst.done").exists()
    result = classify_filter(dataclasses.replace(config, shard_policy=ShardPolicy(retries=0, max_bad_shards=1)))
    assert result["kept"] == 4 and result["bad_shards"][0]["shard"].endswith("b.jsonl.gz")
