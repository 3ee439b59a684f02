"""Errors of the data steps.

ProcessingError                 root of the data-step errors
├── ShardTaskError              one shard's task failed (names the step and the task)
├── DownloadError               a file could not be fetched, or failed its size/sha256 check
├── ExtractError                HTML could not be turned into text (bad method, missing package)
└── TokenizeError               the tokenizer or the input of the tokenize step is unusable
BadRecordError (ValueError)     a bad line in a document shard (marin_lab.io.documents)
NoShardsError (FileNotFoundError)  an input folder with no document shards
"""

from __future__ import annotations

from marin_lab.errors import MarinLabError as _Base
from marin_lab.io.documents import BadRecordError, NoShardsError

__all__ = [
    "BadRecordError",
    "DownloadError",
    "ExtractError",
    "NoShardsError",
    "ProcessingError",
    "ShardTaskError",
    "TokenizeError",
]


class ProcessingError(_Base):
    """A data step could not do its work; the message says which file or field, and what to do."""


class ShardTaskError(ProcessingError):
    """One shard's task failed; the original error is the `__cause__`."""


class DownloadError(ProcessingError):
    """A file could not be fetched, or its size or sha256 differs from the expected value."""


class ExtractError(ProcessingError):
    """HTML could not be turned into text (unknown method, missing optional package)."""


class TokenizeError(ProcessingError):
    """The tokenizer or the input of the tokenize step is unusable."""
