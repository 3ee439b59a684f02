"""Marin's `operations.download` path: raw-data download steps."""
