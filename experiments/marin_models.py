"""Marin's model names that are not Llama presets (its experiments/marin_models.py)."""

marin_tokenizer = "stanford-crfm/marin-tokenizer"
"""Marin's tokenizer: Llama 3's vocabulary with its own chat template."""
