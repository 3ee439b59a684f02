"""Marin's Llama presets at Marin's path (its experiments/llama.py): the same names and shapes.

Model shapes are defined once in `marin_lab.marin.models`; a preset has no vocabulary of its own
(`default_train` takes the tokenizer's). marin_lab's own presets, with their vocabularies, are in
experiments/models.py. The `*_train_config` presets are Marin's training runs for those shapes
(TPU slice, batch, steps, learning rate, weight decay) as `SimpleTrainConfig`s; the optimizer
fields they leave out take marin_lab's defaults (docs/coming_from_marin.md).
"""

from experiments.simple_train_config import SimpleTrainConfig
from marin_lab.marin.models import (
    llama3_tokenizer,
    llama3_tokenizer_vocab_size,
    llama_1_4b,
    llama_1_9b,
    llama_3_2_1b,
    llama_8b,
    llama_30m,
    llama_50m,
    llama_75m,
    llama_150m,
    llama_300m,
    llama_600m,
    llama_nano,
)
from marin_lab.resources import TpuPodConfig

__all__ = [
    "llama3_tokenizer",
    "llama3_tokenizer_vocab_size",
    "llama_1_4b",
    "llama_1_9b",
    "llama_3_2_1b",
    "llama_8b",
    "llama_30m",
    "llama_50m",
    "llama_75m",
    "llama_150m",
    "llama_300m",
    "llama_600m",
    "llama_nano",
    "llama_150m_train_config",
    "llama_300m_train_config",
    "llama_1_4b_train_config",
    "llama_8b_train_config",
]

llama_150m_train_config = SimpleTrainConfig(
    resources=TpuPodConfig(tpu_type="v4-32"),
    train_batch_size=512,
    num_train_steps=20_000,
    learning_rate=3e-3,
    weight_decay=0.1,
)
"""150M on a v4-32: 512 x 1024 tokens x 20,000 steps (about 10B tokens)."""

llama_300m_train_config = SimpleTrainConfig(
    resources=TpuPodConfig(tpu_type="v4-64"),
    train_batch_size=1024,
    num_train_steps=18_000,
    learning_rate=3e-3,
    weight_decay=0.1,
)
"""300M on a v4-64: 1024 x 1024 tokens x 18,000 steps (about 19B tokens)."""

llama_1_4b_train_config = SimpleTrainConfig(
    resources=TpuPodConfig(tpu_type="v4-128"),
    train_batch_size=1024,
    num_train_steps=10_000,
    learning_rate=3e-4,
    weight_decay=0.1,
)
"""1.4B on a v4-128: 1024 x 4096 tokens x 10,000 steps (about 42B tokens)."""

llama_8b_train_config = SimpleTrainConfig(
    resources=TpuPodConfig(tpu_type="v4-128", slice_count=4),
    train_batch_size=1024,
    num_train_steps=40_000,
    learning_rate=2e-3,
    weight_decay=0.05,
)
"""8B on four v4-128 slices: 1024 x 4096 tokens x 40,000 steps (about 168B tokens)."""
