"""Marin's model presets and tokenizer names (its experiments/llama.py and experiments/marin_models.py).

As in Marin, a Llama preset has no vocabulary of its own: `default_train` sizes the embedding from
the tokenizer of the data it trains on (`with_vocab` in experiments/models.py gives one a
vocabulary). `experiments.llama` and `experiments.marin_models` re-export these names, so Marin
files import them from the paths they always used.
"""

from __future__ import annotations

from marin_lab.models.llama import LlamaConfig

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
    "marin_tokenizer",
]

llama3_tokenizer = "meta-llama/Meta-Llama-3.1-8B"
llama3_tokenizer_vocab_size = 128_256

marin_tokenizer = "stanford-crfm/marin-tokenizer"
"""Marin's tokenizer: Llama 3's vocabulary with its own chat template."""


def _llama(
    seq_len: int,
    hidden: int,
    ffn: int,
    heads: int,
    kv_heads: int,
    layers: int,
    *,
    llama3_rope: bool = False,
    tied: bool = False,
) -> LlamaConfig:
    # Marin's "Llama3RotaryEmbeddingsConfig" presets use RoPE base 500k; the others Llama 2's 10k.
    return LlamaConfig(
        vocab_size=None,
        max_seq_len=seq_len,
        hidden_dim=hidden,
        intermediate_dim=ffn,
        num_heads=heads,
        num_kv_heads=kv_heads,
        num_layers=layers,
        rope_theta=500_000.0 if llama3_rope else 10_000.0,
        tie_embeddings=tied,
    )


llama_nano = _llama(512, 32, 128, 2, 2, 2)
llama_30m = _llama(1024, 128, 448, 2, 2, 4)
llama_50m = _llama(1024, 192, 448, 2, 2, 4)
llama_75m = _llama(1024, 256, 896, 4, 4, 8)
llama_150m = _llama(1024, 512, 1792, 8, 8, 6)
llama_300m = _llama(1024, 768, 2688, 12, 12, 12)
llama_600m = _llama(1024, 1024, 3584, 16, 8, 24)
llama_1_4b = _llama(4096, 2048, 7168, 16, 8, 16)
llama_1_9b = _llama(4096, 2048, 7168, 16, 8, 24)
llama_3_2_1b = _llama(4096, 2048, 8192, 32, 8, 16, llama3_rope=True, tied=True)
llama_8b = _llama(4096, 4096, 14336, 32, 8, 32, llama3_rope=True)
"""Llama-3.1-8B's shape: 8,030,261,248 parameters with Llama 3's vocabulary (untied)."""
