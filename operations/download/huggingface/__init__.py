"""Marin's `operations.download.huggingface` path: download a Hugging Face dataset repository."""
