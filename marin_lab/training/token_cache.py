"""Read (and, for tests, write) the token cache that the tokenize step produces.

The format and its readers and writers of files belong to `marin_lab.store.token_cache`
(docs/token_cache.md); this module cuts a cache into training windows. Local shards are
memory-mapped; remote ones (gs://, memory://) are read by byte range, so neither ever loads a whole
shard to take one sequence. A shard with a `loss_mask.npy` counts only the tokens it marks.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from marin_lab.io import fs as mfs
from marin_lab.store.token_cache import (
    TOKENIZER_FILE,
    NpyRange,
    TokenCacheError,
    add_split,
    array_url,
    new_ledger,
    read_ledger,
    shard_name,
    token_dtype,
    write_ledger,
    write_shard,
)

__all__ = ["CacheSplit", "NpyRange", "TokenCache", "TokenCacheError", "write_token_cache"]

logger = logging.getLogger(__name__)


class CacheSplit:
    """One split of a token cache cut into fixed-length windows of `seq_len + 1` tokens.

    Window i of a shard covers tokens [i*seq_len, i*seq_len + seq_len + 1): consecutive windows
    share one token so every token is a prediction target exactly once. Windows never cross a
    shard boundary.
    """

    def __init__(self, cache: TokenCache, split: str, seq_len: int):
        self.cache, self.split, self.seq_len = cache, split, seq_len
        entries = cache.ledger["splits"][split]["shards"]
        self.shards = [NpyRange(array_url(cache.path, split, s["name"], "tokens")) for s in entries]
        self.masks = [
            NpyRange(array_url(cache.path, split, s["name"], "loss_mask")) if s.get("loss_mask_sha256") else None
            for s in entries
        ]
        counts = [max((len(s) - 1) // seq_len, 0) for s in self.shards]
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.num_sequences = int(self._starts[-1])
        self.remote = not mfs.is_local(cache.path)

    @property
    def has_loss_mask(self) -> bool:
        return any(m is not None for m in self.masks)

    def sequences(self, indices: np.ndarray) -> np.ndarray:
        """[len(indices), seq_len + 1] int32 windows by global window index."""
        return self._windows(indices, self.shards, np.int32)

    def loss_masks(self, indices: np.ndarray) -> np.ndarray:
        """[len(indices), seq_len + 1] uint8 loss masks of the same windows (1 without a mask file)."""
        return self._windows(indices, self.masks, np.uint8)

    def _windows(self, indices: np.ndarray, arrays: list, dtype: type) -> np.ndarray:
        out: np.ndarray = np.empty((len(indices), self.seq_len + 1), dtype=dtype)
        shard_ids = np.searchsorted(self._starts, indices, side="right") - 1

        def fill(row: int) -> None:
            shard = shard_ids[row]
            start = int(indices[row] - self._starts[shard]) * self.seq_len
            if arrays[shard] is None:
                out[row] = 1
            else:
                out[row] = arrays[shard].read(start, start + self.seq_len + 1)

        if self.remote and len(indices) > 1:
            # Object-store range reads are latency-bound: issue them concurrently.
            with ThreadPoolExecutor(max_workers=16) as pool:
                list(pool.map(fill, range(len(indices))))
        else:
            for row in range(len(indices)):
                fill(row)
        return out


class TokenCache:
    """A token cache directory: its ledger and lazily opened splits."""

    def __init__(self, path: str):
        self.path = path.rstrip("/")
        ledger = read_ledger(self.path)
        self.ledger: dict[str, Any] = ledger

    @property
    def vocab_size(self) -> int:
        return int(self.ledger["vocab_size"])

    @property
    def splits(self) -> list[str]:
        return sorted(self.ledger.get("splits", {}))

    def num_tokens(self, split: str) -> int:
        return int(self.ledger["splits"].get(split, {}).get("tokens", 0))

    def split(self, split: str, seq_len: int) -> CacheSplit:
        if split not in self.ledger.get("splits", {}):
            raise TokenCacheError(f"token cache {self.path} has no split {split!r} (it has {self.splits})")
        return CacheSplit(self, split, seq_len)

    def tokenizer_url(self) -> str | None:
        name = (self.ledger.get("tokenizer") or {}).get("file")
        return mfs.join(self.path, name) if name else None


def write_token_cache(
    path: str,
    splits: dict[str, Sequence[Sequence[int] | np.ndarray]],
    *,
    vocab_size: int,
    eos_id: int,
    bos_id: int | None = None,
    tokenizer_json: str | None = None,
    docs_per_shard: int | None = None,
    loss_masks: dict[str, Sequence[Sequence[int] | np.ndarray]] | None = None,
) -> dict[str, Any]:
    """Write documents (lists of token ids, EOS appended here) as a token cache; returns the ledger.

    A helper for tests and benchmarks; the real producers are the tokenize steps. `loss_masks`
    gives, per split, one 0/1 list per document (its appended EOS counts in the loss).
    """
    dtype = token_dtype(vocab_size)
    tokenizer = None
    if tokenizer_json is not None:
        mfs.atomic_write_text(mfs.join(path, TOKENIZER_FILE), tokenizer_json)
        tokenizer = {"file": TOKENIZER_FILE, "sha256": hashlib.sha256(tokenizer_json.encode()).hexdigest()}
    ledger = new_ledger(dtype=dtype, vocab_size=vocab_size, eos_id=eos_id, bos_id=bos_id, tokenizer=tokenizer)
    for split, docs in splits.items():
        per = docs_per_shard or max(len(docs), 1)
        shards = []
        for shard_idx, lo in enumerate(range(0, max(len(docs), 1), per)):
            chunk = [np.append(np.asarray(d, dtype=np.int64), eos_id) for d in docs[lo : lo + per]]
            if chunk and max(int(c.max()) for c in chunk) >= vocab_size:
                top = max(int(c.max()) for c in chunk)
                raise TokenCacheError(f"split {split!r}: token id {top} >= vocab_size {vocab_size}")
            masks = None
            if loss_masks is not None:
                masks = [np.append(np.asarray(m, dtype=np.uint8), 1) for m in loss_masks[split][lo : lo + per]]
                for i, (mask, doc) in enumerate(zip(masks, chunk, strict=False)):
                    if len(mask) != len(doc):
                        raise TokenCacheError(
                            f"split {split!r} {shard_name(shard_idx)}: document {i} has "
                            f"{len(doc)} tokens but a loss mask of {len(mask)}"
                        )
            shards.append(
                write_shard(path, split, shard_name(shard_idx), dtype, chunk, [len(c) for c in chunk], loss_mask=masks)
            )
        add_split(ledger, split, shards)
    write_ledger(path, ledger)
    return ledger
