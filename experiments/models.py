"""Model shapes, tiny to 8B. Pick one by name; change the vocabulary with `with_vocab`.

Shapes follow the Llama family (RMSNorm, RoPE, SwiGLU, grouped-query attention). The small ones
exist for CPU tests and the quickstart; `llama_1b` is the GPU-benchmark size; `llama_8b` is
Llama-3.1-8B's shape, which Marin's Tootsie run used.
"""

from __future__ import annotations

import dataclasses

from marin_lab.training.model import LlamaConfig

# ~1M parameters at an 8k vocabulary (tied): compiles in seconds and trains at ~10k tokens/s on
# 2 CPU cores, enough to watch the loss fall in the quickstart.
llama_nano = LlamaConfig(vocab_size=8192, hidden_dim=64, intermediate_dim=256, num_layers=4,
                         num_heads=4, num_kv_heads=2, max_seq_len=512, tie_embeddings=True)

# ~23M (11M outside the embedding): the smallest model whose loss curves are worth comparing between data recipes.
llama_30m = LlamaConfig(vocab_size=32000, hidden_dim=384, intermediate_dim=1024, num_layers=6,
                        num_heads=6, num_kv_heads=6, max_seq_len=1024, tie_embeddings=True)

# ~110M (GPT-2-small-sized body, 85M outside the embedding): the CPU throughput benchmark size.
llama_100m = LlamaConfig(vocab_size=32000, hidden_dim=768, intermediate_dim=2048, num_layers=12,
                         num_heads=12, num_kv_heads=12, max_seq_len=2048, tie_embeddings=True)

# Llama-3.2-1B's shape (1.24B with its 128k vocabulary, tied).
llama_1b = LlamaConfig(vocab_size=128256, hidden_dim=2048, intermediate_dim=8192, num_layers=16,
                       num_heads=32, num_kv_heads=8, head_dim=64, max_seq_len=4096,
                       rope_theta=500000.0, tie_embeddings=True)

# Llama-3.1-8B: 8,030,261,248 parameters. seq 4096 as in Tootsie (no long-context RoPE scaling).
llama_8b = LlamaConfig(vocab_size=128256, hidden_dim=4096, intermediate_dim=14336, num_layers=32,
                       num_heads=32, num_kv_heads=8, max_seq_len=4096, rope_theta=500000.0,
                       tie_embeddings=False)

MODELS = {"llama_nano": llama_nano, "llama_30m": llama_30m, "llama_100m": llama_100m,
          "llama_1b": llama_1b, "llama_8b": llama_8b}


def with_vocab(model: LlamaConfig, vocab_size: int) -> LlamaConfig:
    """The same shape for another tokenizer."""
    return dataclasses.replace(model, vocab_size=vocab_size)
