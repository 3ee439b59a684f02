"""One name, one shape: Marin's presets (experiments.llama) and marin_lab's (experiments.models) never share a name."""

from __future__ import annotations

import dataclasses

import pytest

import experiments.llama
import experiments.marin_models
import experiments.models
from marin_lab.marin import models as marin_models
from marin_lab.models.llama import LlamaConfig


def _presets(module) -> dict[str, LlamaConfig]:
    return {name: value for name, value in vars(module).items() if isinstance(value, LlamaConfig)}


def test_each_preset_name_has_one_shape():
    ours, marin = _presets(experiments.models), _presets(experiments.llama)
    assert not set(ours) & set(marin)
    assert ours == experiments.models.MODELS
    assert marin == _presets(marin_models) and experiments.llama.llama_nano is marin_models.llama_nano
    assert experiments.marin_models.marin_tokenizer == "stanford-crfm/marin-tokenizer"
    assert all(m.vocab_size is None for m in marin.values()) and all(m.vocab_size for m in ours.values())


def test_marin_shapes_are_marins():
    nano, big = experiments.llama.llama_nano, experiments.llama.llama_8b
    assert (nano.hidden_dim, nano.intermediate_dim, nano.num_layers, nano.num_heads, nano.max_seq_len) == (
        32,
        128,
        2,
        2,
        512,
    )
    with_vocab = experiments.models.with_vocab(big, experiments.llama.llama3_tokenizer_vocab_size)
    assert with_vocab.num_params() == 8_030_261_248 and dataclasses.replace(with_vocab, vocab_size=None) == big


@pytest.mark.parametrize("old, new", [("llama_nano", "lab_nano"), ("llama_30m", "lab_30m"), ("llama_8b", "with_vocab")])
def test_a_renamed_preset_says_its_new_name(old, new):
    with pytest.raises(AttributeError, match=f"experiments.models.{old} is now {new}"):
        getattr(experiments.models, old)
    with pytest.raises(ImportError):
        exec(f"from experiments.models import {old}", {})
