"""marin_lab's own model shapes, tiny to 1B, each with its vocabulary. Change it with `with_vocab`.

Shapes follow the Llama family (RMSNorm, RoPE, SwiGLU, grouped-query attention). Marin's presets
(`llama_nano`, `llama_30m`, ..., `llama_8b`, without a vocabulary) keep Marin's names and shapes in
experiments/llama.py; a shape of ours that differs from Marin's under the same size word is named
`lab_*`, so one name is always one shape. The small ones exist for CPU tests and the quickstart;
`llama_1b` is the GPU-benchmark size. Llama-3.1-8B (Tootsie) is Marin's `llama_8b` with Llama 3's
vocabulary: `with_vocab(llama_8b, llama3_tokenizer_vocab_size)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from marin_lab.models.llama import LlamaConfig

# ~0.8M parameters at an 8k vocabulary (tied): compiles in seconds and trains at ~10k tokens/s on
# 2 CPU cores, enough to watch the loss fall in the quickstart.
lab_nano = LlamaConfig(
    vocab_size=8192,
    hidden_dim=64,
    intermediate_dim=256,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    max_seq_len=512,
    tie_embeddings=True,
)

# ~23M (11M outside the embedding): the smallest model whose loss curves are worth comparing between data recipes.
lab_30m = LlamaConfig(
    vocab_size=32000,
    hidden_dim=384,
    intermediate_dim=1024,
    num_layers=6,
    num_heads=6,
    num_kv_heads=6,
    max_seq_len=1024,
    tie_embeddings=True,
)

# ~110M (GPT-2-small-sized body, 85M outside the embedding): the CPU throughput benchmark size.
llama_100m = LlamaConfig(
    vocab_size=32000,
    hidden_dim=768,
    intermediate_dim=2048,
    num_layers=12,
    num_heads=12,
    num_kv_heads=12,
    max_seq_len=2048,
    tie_embeddings=True,
)

# Llama-3.2-1B's shape (1.24B with its 128k vocabulary, tied).
llama_1b = LlamaConfig(
    vocab_size=128256,
    hidden_dim=2048,
    intermediate_dim=8192,
    num_layers=16,
    num_heads=32,
    num_kv_heads=8,
    head_dim=64,
    max_seq_len=4096,
    rope_theta=500000.0,
    tie_embeddings=True,
)

MODELS = {"lab_nano": lab_nano, "lab_30m": lab_30m, "llama_100m": llama_100m, "llama_1b": llama_1b}
"""Every preset here by name (the benchmarks' --models)."""

# Names this module used for other shapes than Marin's presets of the same name.
_RENAMED = {
    "llama_nano": "lab_nano",
    "llama_30m": "lab_30m",
    "llama_8b": "with_vocab(experiments.llama.llama_8b, llama3_tokenizer_vocab_size)",
}


def with_vocab(model: LlamaConfig, vocab_size: int) -> LlamaConfig:
    """The same shape for another tokenizer."""
    return dataclasses.replace(model, vocab_size=vocab_size)


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        raise AttributeError(
            f"experiments.models.{name} is now {_RENAMED[name]}: the name {name} is Marin's preset (another "
            "shape, no vocabulary), imported from experiments.llama"
        )
    raise AttributeError(f"module 'experiments.models' has no attribute {name!r}")
