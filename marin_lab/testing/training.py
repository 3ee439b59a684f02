"""Small fixtures for tests and benchmarks: a synthetic token cache, a tiny model and config."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from marin_lab.models.llama import LlamaConfig
from marin_lab.training.checkpoint import CheckpointConfig
from marin_lab.training.config import TrainLmConfig
from marin_lab.training.data import DataConfig
from marin_lab.training.metrics import WandbConfig
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.training.token_cache import write_token_cache

TINY_VOCAB = 256


def tiny_model(**overrides: Any) -> LlamaConfig:
    """~130k parameters: compiles in seconds on a CPU."""
    base = LlamaConfig(
        vocab_size=TINY_VOCAB,
        hidden_dim=64,
        intermediate_dim=192,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        max_seq_len=128,
    )
    return dataclasses.replace(base, **overrides)


def synthetic_documents(n: int, seed: int = 0, vocab: int = TINY_VOCAB) -> list[np.ndarray]:
    """Documents with learnable structure: each is a run of an arithmetic pattern mod vocab-1."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        length, start, stride = rng.integers(20, 120), rng.integers(0, vocab - 1), rng.integers(1, 4)
        docs.append((start + stride * np.arange(length)) % (vocab - 1))
    return docs


def write_synthetic_cache(
    path: str,
    *,
    train_docs: int = 200,
    validation_docs: int = 20,
    seed: int = 0,
    docs_per_shard: int = 80,
    tokenizer_json: str | None = None,
) -> str:
    write_token_cache(
        path,
        {"train": synthetic_documents(train_docs, seed), "validation": synthetic_documents(validation_docs, seed + 1)},
        vocab_size=TINY_VOCAB,
        eos_id=TINY_VOCAB - 1,
        docs_per_shard=docs_per_shard,
        tokenizer_json=tokenizer_json,
    )
    return path


def tiny_train_config(output_path: str, caches: dict[str, str], **overrides: Any) -> TrainLmConfig:
    base = TrainLmConfig(
        output_path=output_path,
        data=DataConfig(caches=caches),
        model=tiny_model(),
        num_train_steps=8,
        batch_size=8,
        seq_len=32,
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup=2, decay=0.25),
        checkpoint=CheckpointConfig(save_every_steps=4, save_interval_s=None, keep_last=3),
        wandb=WandbConfig(enabled=False),
        compute_dtype="float32",
    )
    return dataclasses.replace(base, **overrides)
