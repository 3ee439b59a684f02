"""Marin's Llama presets at Marin's path (its experiments/llama.py): the same names and shapes.

Defined once in `marin_lab.marin.models`; a preset has no vocabulary of its own (`default_train`
takes the tokenizer's). marin_lab's own presets, with their vocabularies, are in experiments/models.py.
"""

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

__all__ = [
    "llama3_tokenizer", "llama3_tokenizer_vocab_size", "llama_1_4b", "llama_1_9b", "llama_3_2_1b", "llama_8b",
    "llama_30m", "llama_50m", "llama_75m", "llama_150m", "llama_300m", "llama_600m", "llama_nano",
]
