"""A plan never downloads: a hub tokenizer's vocabulary is read from the HF cache or not at all.

Regression guard: `default_train` used to load the `meta-llama/Llama-3.1-8B` tokenizer while the
experiment file was imported, so `tootsie_8b.py --dry_run` spent ~70 s in hub retries offline.
"""

from __future__ import annotations

import dataclasses
import os

import huggingface_hub
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from experiments.defaults import default_tokenize, default_train
from experiments.models import lab_nano
from experiments.simple_train_config import CpuOnlyConfig, SimpleTrainConfig
from marin_lab.execution import StepDefinitionError
from marin_lab.execution.main import capture_steps
from marin_lab.processing import tokenizers as tokenizer_owner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """Every way to the hub fails the test; the HF cache is an empty folder."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"hub access while planning: {args}")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    monkeypatch.setattr(tokenizer_owner, "_hub_tokenizer_bytes", refuse)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    return calls


def test_tootsie_plan_takes_the_declared_vocabulary_without_the_hub(no_hub):
    steps, _ = capture_steps(os.path.join(ROOT, "experiments", "tootsie_8b.py"), [])
    train = [s for s in steps if s.name.startswith("checkpoints/tootsie-8b/")]
    assert len(train) == 3
    assert {s.config.model.vocab_size for s in train} == {128256}
    assert no_hub == []


def _cached_hub_tokenizer(cache: str, repo: str, vocab: int) -> None:
    """A tokenizer.json laid out as huggingface_hub caches it (refs/main -> snapshots/<sha>/)."""
    folder = os.path.join(cache, "models--" + repo.replace("/", "--"))
    sha = "0" * 40
    os.makedirs(os.path.join(folder, "refs"))
    os.makedirs(os.path.join(folder, "snapshots", sha))
    with open(os.path.join(folder, "refs", "main"), "w") as f:
        f.write(sha)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.train_from_iterator(
        ["hello world", "plans never download"] * 20,
        trainers.BpeTrainer(
            vocab_size=vocab,
            special_tokens=["<unk>", "<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.save(os.path.join(folder, "snapshots", sha, "tokenizer.json"))


def test_a_cached_hub_tokenizer_is_still_checked_at_plan_time(no_hub, tmp_path):
    _cached_hub_tokenizer(huggingface_hub.constants.HF_HUB_CACHE, "org/cached-tok", 300)
    size = Tokenizer.from_file(
        os.path.join(
            huggingface_hub.constants.HF_HUB_CACHE, "models--org--cached-tok", "snapshots", "0" * 40, "tokenizer.json"
        )
    ).get_vocab_size()
    docs = str(tmp_path / "docs")
    cached = default_tokenize("cached", docs, "org/cached-tok")
    uncached = default_tokenize("uncached", docs, "org/not-in-cache")
    config = SimpleTrainConfig(resources=CpuOnlyConfig(), train_batch_size=2, num_train_steps=1, learning_rate=1e-3)
    assert (
        default_train("a", cached, dataclasses.replace(lab_nano, vocab_size=None), config).config.model.vocab_size
        == size
    )
    with pytest.raises(StepDefinitionError, match=f"model_config.vocab_size=256 but the tokenizer has {size}"):
        default_train("b", cached, dataclasses.replace(lab_nano, vocab_size=256), config)
    # Not cached: the declared size stands (train_lm checks the token caches when it runs) ...
    assert default_train("c", uncached, lab_nano, config).config.model.vocab_size == lab_nano.vocab_size
    # ... and with no declared size the plan says what to do instead of downloading.
    with pytest.raises(StepDefinitionError, match="plans never download"):
        default_train("d", uncached, dataclasses.replace(lab_nano, vocab_size=None), config)
    assert no_hub == []
