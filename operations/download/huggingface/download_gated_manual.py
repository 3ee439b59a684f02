"""Marin's `operations.download.huggingface.download_gated_manual` path.

`download_and_upload_to_store` fetched a gated repository with a token; here it is `download_hf`,
which reads the token the Hugging Face client finds (`HF_TOKEN` or `huggingface-cli login`).
"""

from __future__ import annotations

from operations.download.huggingface.download_hf import DownloadConfig, download_hf

__all__ = ["DownloadConfig", "download_and_upload_to_store"]

download_and_upload_to_store = download_hf
