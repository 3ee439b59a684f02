"""Read (and, for tests, write) the token cache that the tokenize step produces.

Format (docs/token_cache.md): `ledger.json`, `tokenizer.json`, and per split
`{split}/shard-NNNNN.tokens.npy` (1-D uint16/uint32) with `{split}/shard-NNNNN.offsets.npy`
(int64 document boundaries). Local shards are memory-mapped; remote ones (gs://, memory://) are
read by byte range, so neither ever loads a whole shard to take one sequence.

Optionally a shard has `{split}/shard-NNNNN.loss_mask.npy` (1-D uint8, one per token: 1 where
the token is a prediction target that counts in the loss, e.g. a response token of instruction
data; its ledger entry then holds `loss_mask_sha256`). A shard without one counts every token.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from marin_lab.errors import MarinLabError
from marin_lab.io import fs as mfs

logger = logging.getLogger(__name__)

FORMAT = "marin_lab.token_cache"


class TokenCacheError(MarinLabError, ValueError):
    """A token cache is missing, malformed, or too small for the request."""


class NpyRange:
    """A 1-D .npy file sliced by range: memory-mapped locally, byte-range reads elsewhere."""

    def __init__(self, url: str):
        self.url = url
        fs, path = mfs.fs_and_path(url)
        if mfs.is_local(url):
            self._mmap: np.ndarray | None = np.load(path, mmap_mode="r")
            self.dtype, self.length = self._mmap.dtype, int(self._mmap.shape[0])
            return
        self._mmap = None
        self._fs, self._path = fs, path
        with fs.open(path, "rb") as f:
            head = f.read(4096)
        buf = io.BytesIO(head)
        version = np.lib.format.read_magic(buf)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, _fortran, dtype = read_header(buf)
        if len(shape) != 1:
            raise TokenCacheError(f"{url}: expected a 1-D array, found shape {shape}")
        self.dtype, self.length, self._data_offset = np.dtype(dtype), int(shape[0]), buf.tell()

    def __len__(self) -> int:
        return self.length

    def read(self, start: int, stop: int) -> np.ndarray:
        if self._mmap is not None:
            return np.asarray(self._mmap[start:stop])
        item = self.dtype.itemsize
        raw = self._fs.cat_file(self._path, start=self._data_offset + start * item,
                                end=self._data_offset + stop * item)
        return np.frombuffer(raw, dtype=self.dtype)


class CacheSplit:
    """One split of a token cache cut into fixed-length windows of `seq_len + 1` tokens.

    Window i of a shard covers tokens [i*seq_len, i*seq_len + seq_len + 1): consecutive windows
    share one token so every token is a prediction target exactly once. Windows never cross a
    shard boundary.
    """

    def __init__(self, cache: "TokenCache", split: str, seq_len: int):
        self.cache, self.split, self.seq_len = cache, split, seq_len
        entries = cache.ledger["splits"][split]["shards"]
        self.shards = [NpyRange(mfs.join(cache.path, split, f"{s['name']}.tokens.npy")) for s in entries]
        self.masks = [NpyRange(mfs.join(cache.path, split, f"{s['name']}.loss_mask.npy"))
                      if s.get("loss_mask_sha256") else None for s in entries]
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
        out = np.empty((len(indices), self.seq_len + 1), dtype=dtype)
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
        ledger_url = mfs.join(self.path, "ledger.json")
        ledger = mfs.read_json_or_none(ledger_url)
        if ledger is None:
            raise TokenCacheError(
                f"no token cache at {self.path}: {ledger_url} is missing; run the tokenize step "
                "first or fix the cache path"
            )
        if ledger.get("format") != FORMAT:
            raise TokenCacheError(f"{ledger_url}: format is {ledger.get('format')!r}, expected {FORMAT!r}")
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
            raise TokenCacheError(
                f"token cache {self.path} has no split {split!r} (it has {self.splits})"
            )
        return CacheSplit(self, split, seq_len)

    def tokenizer_url(self) -> str | None:
        name = (self.ledger.get("tokenizer") or {}).get("file")
        return mfs.join(self.path, name) if name else None


def _sha256(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


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
    dtype = np.uint16 if vocab_size <= 2**16 else np.uint32
    ledger: dict[str, Any] = {
        "format": FORMAT, "version": 1, "dtype": np.dtype(dtype).name, "vocab_size": vocab_size,
        "eos_id": eos_id, "bos_id": bos_id, "tokenizer": None, "splits": {},
    }
    if tokenizer_json is not None:
        mfs.atomic_write_text(mfs.join(path, "tokenizer.json"), tokenizer_json)
        ledger["tokenizer"] = {"file": "tokenizer.json",
                               "sha256": hashlib.sha256(tokenizer_json.encode()).hexdigest()}
    for split, docs in splits.items():
        per = docs_per_shard or max(len(docs), 1)
        shards, total_tokens = [], 0
        for shard_idx, lo in enumerate(range(0, max(len(docs), 1), per)):
            chunk = [np.append(np.asarray(d, dtype=np.int64), eos_id) for d in docs[lo:lo + per]]
            lengths = [len(c) for c in chunk]
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            tokens = (np.concatenate(chunk) if chunk else np.zeros(0, np.int64)).astype(dtype)
            if tokens.size and int(tokens.max()) >= vocab_size:
                raise TokenCacheError(f"split {split!r}: token id {int(tokens.max())} >= vocab_size {vocab_size}")
            name = f"shard-{shard_idx:05d}"
            mfs.atomic_write_bytes(mfs.join(path, split, f"{name}.tokens.npy"), _npy_bytes(tokens))
            mfs.atomic_write_bytes(mfs.join(path, split, f"{name}.offsets.npy"), _npy_bytes(offsets))
            entry = {"name": name, "documents": len(chunk), "tokens": int(tokens.size),
                     "tokens_sha256": _sha256(tokens), "offsets_sha256": _sha256(offsets)}
            if loss_masks is not None:
                masks = [np.append(np.asarray(m, dtype=np.uint8), 1) for m in loss_masks[split][lo:lo + per]]
                entry.update(write_loss_mask(path, split, name, masks, lengths))
            shards.append(entry)
            total_tokens += int(tokens.size)
        ledger["splits"][split] = {"documents": len(docs), "tokens": total_tokens, "shards": shards}
    mfs.atomic_write_text(mfs.join(path, "ledger.json"), json.dumps(ledger, indent=2))
    return ledger


def write_loss_mask(path: str, split: str, shard: str, masks: Sequence[np.ndarray],
                    lengths: Sequence[int]) -> dict[str, str]:
    """Write one shard's loss mask (documents' masks concatenated); returns its ledger fields."""
    for i, (mask, length) in enumerate(zip(masks, lengths)):
        if len(mask) != length:
            raise TokenCacheError(f"split {split!r} {shard}: document {i} has {length} tokens but a "
                                  f"loss mask of {len(mask)}")
    flat = (np.concatenate(masks) if len(masks) else np.zeros(0)).astype(np.uint8)
    mfs.atomic_write_bytes(mfs.join(path, split, f"{shard}.loss_mask.npy"), _npy_bytes(flat))
    return {"loss_mask_sha256": _sha256(flat)}
