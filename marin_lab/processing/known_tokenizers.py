"""Vocabulary sizes of well-known hub tokenizers, so a plan can size a model without downloading.

A plan never fetches anything; when a tokenizer is neither a local file nor in the Hugging Face
cache, its vocabulary (with added tokens, as `Tokenizer.get_vocab_size(with_added_tokens=True)`
counts it) comes from this table. A tokenizer that is on disk is always read instead, so the table
never overrides what is there; the trainer checks the real tokenizer again when it runs.
"""

from __future__ import annotations

_LLAMA3 = 128_256
KNOWN_VOCAB_SIZES: dict[str, int] = {
    "meta-llama/Meta-Llama-3-8B": _LLAMA3,
    "meta-llama/Meta-Llama-3.1-8B": _LLAMA3,
    "meta-llama/Llama-3.1-8B": _LLAMA3,
    "meta-llama/Llama-3.2-1B": _LLAMA3,
    "stanford-crfm/marin-tokenizer": _LLAMA3,  # Llama 3's vocabulary with Marin's chat template
    "marin-community/marin-tokenizer": _LLAMA3,
    "meta-llama/Llama-2-7b-hf": 32_000,
    "EleutherAI/gpt-neox-20b": 50_277,  # 50,254 BPE tokens and 23 added ones
    "gpt2": 50_257,
    "openai-community/gpt2": 50_257,
}


def known_vocab_size(spec: str, revision: str | None = None) -> int | None:
    """The table's size for hub id `spec` at its main revision (a pinned revision is not assumed)."""
    if revision not in (None, "main"):
        return None
    return KNOWN_VOCAB_SIZES.get(spec)


def how_to_fetch(spec: str, revision: str | None = None) -> str:
    """One command (huggingface_hub's `hf`) that puts hub tokenizer `spec` in the local cache, where
    plans and offline steps read it."""
    return f"hf download {spec} tokenizer.json" + (f" --revision {revision}" if revision else "")
