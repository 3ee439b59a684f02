"""Marin's `operations` package path (its download operations, `operations.download...`), with our
implementations, plus scripts such as `operations/cluster.py` (run as files)."""
