"""Marin's older `operations.download.huggingface.download` path: `DownloadConfig` and `download`.

Marin's first download step copied a dataset repository through a cloud transfer job; here it is
the same step as `download_hf` (one fetch from the hub at the pinned revision into `data/`).
"""

from __future__ import annotations

from operations.download.huggingface.download_hf import DownloadConfig, download_hf

__all__ = ["DownloadConfig", "download"]

download = download_hf
