"""A corpus too small for its validation_fraction: as in Marin, an empty validation split warns and
training goes on without validation; only what cannot be trained or scored is refused, naming
validation_fraction."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from marin_lab.io.documents import write_documents
from marin_lab.main.train_lm import train_lm, validate_config
from marin_lab.processing.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize, train_tokenizer
from marin_lab.testing.training import tiny_model, tiny_train_config
from marin_lab.training import TrainingError
from marin_lab.training.config import validation_sets
from marin_lab.training.data import DataConfig, MixtureLoader
from marin_lab.training.token_cache import TokenCacheError
from tests.data_fixtures import make_documents

DOCUMENTS = 36  # with the default validation_fraction=0.01, none of these ids falls in validation


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("small")
    write_documents(str(root / "docs" / "part-00000.jsonl"), make_documents(DOCUMENTS))
    train_tokenizer(TrainTokenizerConfig(input_path=str(root / "docs"), output_path=str(root / "tok"), vocab_size=300))
    return root


def _tokenize(root: Path, out: Path, fraction: float) -> str:
    tokenize(
        TokenizeConfig(
            input_path=str(root / "docs"),
            output_path=str(out),
            tokenizer=str(root / "tok"),
            validation_fraction=fraction,
        )
    )
    return str(out)


def _config(out: Path, caches: dict[str, str], **overrides):
    return tiny_train_config(str(out), caches, model=tiny_model(vocab_size=512), steps_per_eval=4, **overrides)


def test_tokenize_warns_when_validation_fraction_holds_out_no_document(small_corpus, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="marin_lab.processing.tokenize"):
        _tokenize(small_corpus, tmp_path / "c", 0.01)
    warned = [r.getMessage() for r in caplog.records if "validation_fraction=0.01" in r.getMessage()]
    assert len(warned) == 1 and f"held out 0 of {DOCUMENTS} documents" in warned[0]


def test_an_empty_validation_split_warns_and_training_goes_on_without_it(small_corpus, tmp_path, caplog):
    """Regression: this config used to stop before training with an error that did not name
    validation_fraction."""
    cache = _tokenize(small_corpus, tmp_path / "c", 0.01)
    config = _config(tmp_path / "run", {"c": cache})
    with caplog.at_level(logging.WARNING, logger="marin_lab.main.train_lm"):
        validate_config(config)
    warned = [r.getMessage() for r in caplog.records if "data.caches['c']" in r.getMessage()]
    assert len(warned) == 1
    assert f"validation_fraction=0.01 held out 0 of {DOCUMENTS} documents" in warned[0]
    assert "training without validation" in warned[0]
    assert validation_sets(config) == {}


def test_a_cache_with_validation_windows_is_still_scored(small_corpus, tmp_path, caplog):
    cache = _tokenize(small_corpus, tmp_path / "c", 0.3)
    config = _config(tmp_path / "run", {"c": cache})
    with caplog.at_level(logging.WARNING, logger="marin_lab.main.train_lm"):
        validate_config(config)
    assert not [r for r in caplog.records if "training without validation" in r.getMessage()]
    assert validation_sets(config) == {"c": cache}


def test_a_named_validation_set_with_no_window_is_refused_naming_validation_fraction(small_corpus, tmp_path):
    train = _tokenize(small_corpus, tmp_path / "train", 0.3)
    empty = _tokenize(small_corpus, tmp_path / "empty", 0.01)
    config = _config(tmp_path / "run", {"c": train}, eval_caches={"held": empty})
    with pytest.raises(TrainingError, match=r"validation set 'held' .*validation_fraction=0\.01 held out 0 of 36"):
        validate_config(config)


def test_a_train_split_emptied_by_validation_fraction_names_it(small_corpus, tmp_path):
    cache = _tokenize(small_corpus, tmp_path / "c", 0.999)
    with pytest.raises(TokenCacheError, match=r"validation_fraction=0\.999 held out 36 of 36 documents.*lower "):
        MixtureLoader(DataConfig(caches={"c": cache}), seq_len=32, batch_size=8)


@pytest.mark.slow
def test_training_on_an_empty_validation_split_writes_no_eval_rows(small_corpus, tmp_path):
    cache = _tokenize(small_corpus, tmp_path / "c", 0.01)
    out = tmp_path / "run"
    summary = train_lm(dataclasses.replace(_config(out, {"c": cache}), num_train_steps=4, export_hf=False))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert not any(k.startswith("eval/") for r in rows for k in r)
    assert summary["final_step"] == 4 and summary["eval"] is None
