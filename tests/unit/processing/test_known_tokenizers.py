"""A plan knows a well-known hub tokenizer's vocabulary offline, and a model too small for it is an error."""

from __future__ import annotations

import dataclasses

import pytest

from experiments.defaults import default_tokenize, default_train
from experiments.llama import llama_nano
from experiments.simple_train_config import SimpleTrainConfig
from marin_lab.execution.errors import StepDefinitionError
from marin_lab.processing.known_tokenizers import known_vocab_size
from marin_lab.resources import CpuOnlyConfig


@pytest.fixture()
def empty_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _train(model, tokenizer):
    data = default_tokenize("docs", "raw/some-docs", tokenizer=tokenizer)
    return default_train(
        "tiny",
        data,
        model,
        SimpleTrainConfig(
            resources=CpuOnlyConfig(num_cpus=1), train_batch_size=2, num_train_steps=2, learning_rate=1e-3
        ),
        use_default_validation=False,
    )


def test_the_vocabulary_of_a_known_tokenizer_sizes_the_model_offline(empty_hub):
    step = _train(llama_nano, "stanford-crfm/marin-tokenizer")
    assert step.config.model.vocab_size == 128_256


def test_a_model_smaller_than_its_tokenizer_is_an_error_at_plan_time(empty_hub):
    small = dataclasses.replace(llama_nano, vocab_size=32_000)
    with pytest.raises(StepDefinitionError, match="vocab_size=32000 but the tokenizer has 128256"):
        _train(small, "meta-llama/Meta-Llama-3.1-8B")


def test_an_unknown_tokenizer_says_how_to_fetch_it(empty_hub):
    with pytest.raises(StepDefinitionError, match="hf download someone/their-tokenizer tokenizer.json"):
        _train(llama_nano, "someone/their-tokenizer")


def test_a_pinned_revision_is_not_assumed():
    assert known_vocab_size("gpt2") == 50_257
    assert known_vocab_size("gpt2", "0123abc") is None
