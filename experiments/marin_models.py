"""Marin's model names that are not Llama presets, at Marin's path (its experiments/marin_models.py)."""

from marin_lab.marin.models import marin_tokenizer

__all__ = ["marin_tokenizer"]
