"""Storage helpers on fsspec: atomic writes, JSON, manifests, documents.

Nothing here knows about steps or the executor; every other package may use it.
"""
