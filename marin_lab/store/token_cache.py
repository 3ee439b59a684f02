"""The token cache format, its one writer and its one reader of arrays (docs/token_cache.md).

A cache folder holds `ledger.json` (written last: a cache with a ledger is complete),
`tokenizer.json`, and per split `{split}/shard-NNNNN.tokens.npy` (1-D uint16/uint32),
`{split}/shard-NNNNN.offsets.npy` (int64 document boundaries, one more than the documents) and,
for instruction data, `{split}/shard-NNNNN.loss_mask.npy` (uint8, 1 where a token counts in the
loss). Arrays are plain little-endian `.npy` files, byte for byte what `np.save` writes; the
ledger's checksums are over the array data without the header. The tokenize steps write through
`write_shard` and `new_ledger` / `add_split` / `write_ledger`; the trainer and the data browser
read through `read_ledger`, `NpyRange` and `read_npy_header`.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np

from marin_lab.errors import MarinLabError
from marin_lab.io import fs as mfs

FORMAT = "marin_lab.token_cache"
VERSION = 1
LEDGER_FILE = "ledger.json"
TOKENIZER_FILE = "tokenizer.json"


class TokenCacheError(MarinLabError, ValueError):
    """A token cache is missing, malformed, or too small for the request."""


def token_dtype(vocab_size: int) -> str:
    """The narrowest token dtype for a vocabulary."""
    return "uint16" if vocab_size <= 2**16 else "uint32"


def shard_name(index: int) -> str:
    return f"shard-{index:05d}"


def array_url(cache: str, split: str, shard: str, kind: str) -> str:
    """`{cache}/{split}/{shard}.{kind}.npy`; kind is tokens, offsets or loss_mask."""
    return mfs.join(cache, split, f"{shard}.{kind}.npy")


# ---- arrays -------------------------------------------------------------------------------------
def npy_header(dtype: np.dtype, length: int) -> bytes:
    """The .npy header of a 1-D array of `length` items, byte for byte what `np.save` writes."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (length,)}
    )
    return buf.getvalue()


def write_array(url: str, dtype: Any, parts: Sequence[np.ndarray]) -> str:
    """Write the concatenation of `parts` as one 1-D .npy file without concatenating them in
    memory (atomically); returns the sha256 of the array data (the ledger's checksum)."""
    dtype = np.dtype(dtype).newbyteorder("<")
    digest = hashlib.sha256()
    views = [np.ascontiguousarray(p, dtype=dtype).data.cast("B") for p in parts]
    for v in views:
        digest.update(v)
    mfs.atomic_write_chunks(url, [npy_header(dtype, sum(len(p) for p in parts)), *views])
    return digest.hexdigest()


def read_npy_header(f: BinaryIO) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """(shape, dtype, fortran_order, offset of the data) of an open .npy file, reading only its header."""
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    return tuple(shape), np.dtype(dtype), bool(fortran), f.tell()


class NpyRange:
    """A 1-D .npy file sliced by range: memory-mapped locally, byte-range reads elsewhere, so a
    reader never loads a whole shard to take one sequence."""

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
        shape, dtype, _, self._data_offset = read_npy_header(io.BytesIO(head))
        if len(shape) != 1:
            raise TokenCacheError(f"{url}: expected a 1-D array, found shape {shape}")
        self.dtype, self.length = dtype, int(shape[0])

    def __len__(self) -> int:
        return self.length

    def read(self, start: int, stop: int) -> np.ndarray:
        if self._mmap is not None:
            return np.asarray(self._mmap[start:stop])
        item = self.dtype.itemsize
        raw = self._fs.cat_file(self._path, start=self._data_offset + start * item, end=self._data_offset + stop * item)
        return np.frombuffer(raw, dtype=self.dtype)


# ---- shards and the ledger ------------------------------------------------------------------------
def write_shard(
    cache: str,
    split: str,
    shard: str,
    dtype: Any,
    tokens: Sequence[np.ndarray],
    lengths: Sequence[int] | np.ndarray,
    loss_mask: Sequence[np.ndarray] | None = None,
) -> dict[str, Any]:
    """Write one shard of a split (its documents' tokens, EOS included, as `tokens` parts whose
    document lengths are `lengths`; optionally their 0/1 loss masks) and return its ledger entry."""
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype="<i8")
    np.cumsum(lengths, out=offsets[1:])
    entry: dict[str, Any] = {"name": shard, "documents": int(len(lengths)), "tokens": int(offsets[-1])}
    flat_mask = None
    if loss_mask is not None:
        flat_mask = (np.concatenate(loss_mask) if len(loss_mask) else np.zeros(0)).astype(np.uint8)
        if len(flat_mask) != int(offsets[-1]):
            raise TokenCacheError(
                f"split {split!r} {shard}: {int(offsets[-1])} tokens but a loss mask of {len(flat_mask)}"
            )
        entry["loss_tokens"] = int(flat_mask.sum())
    entry["tokens_sha256"] = write_array(array_url(cache, split, shard, "tokens"), dtype, tokens)
    entry["offsets_sha256"] = write_array(array_url(cache, split, shard, "offsets"), offsets.dtype, [offsets])
    if flat_mask is not None:
        entry["loss_mask_sha256"] = write_array(array_url(cache, split, shard, "loss_mask"), np.uint8, [flat_mask])
    return entry


def new_ledger(
    *, dtype: str, vocab_size: int, eos_id: int, bos_id: int | None, tokenizer: dict[str, Any] | None, **fields: Any
) -> dict[str, Any]:
    """A ledger without splits; `fields` (e.g. `split`, `template`) are recorded as given."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "dtype": dtype,
        "vocab_size": vocab_size,
        "eos_id": eos_id,
        "bos_id": bos_id,
        "tokenizer": tokenizer,
        **fields,
        "splits": {},
    }


def add_split(ledger: dict[str, Any], split: str, shards: list[dict[str, Any]], *, masked: bool = False) -> None:
    """Record a split's shard entries and their totals in the ledger (`masked`: a cache with loss
    masks, whose splits count their loss tokens even when empty)."""
    totals: dict[str, Any] = {
        "documents": sum(e["documents"] for e in shards),
        "tokens": sum(e["tokens"] for e in shards),
    }
    if masked or any("loss_tokens" in e for e in shards):
        totals["loss_tokens"] = sum(e.get("loss_tokens", e["tokens"]) for e in shards)
    ledger["splits"][split] = {**totals, "shards": shards}


def write_ledger(cache: str, ledger: dict[str, Any]) -> None:
    """Write the ledger: last, since a cache with a ledger is complete."""
    mfs.write_json(mfs.join(cache, LEDGER_FILE), ledger)


def read_ledger(cache: str) -> dict[str, Any]:
    """The ledger of a complete cache; TokenCacheError naming the file when it is missing or not ours."""
    url = mfs.join(cache, LEDGER_FILE)
    ledger = mfs.read_json_or_none(url)
    if ledger is None:
        raise TokenCacheError(
            f"no token cache at {cache}: {url} is missing; run the tokenize step first or fix the cache path"
        )
    if not isinstance(ledger, dict) or ledger.get("format") != FORMAT:
        found = ledger.get("format") if isinstance(ledger, dict) else type(ledger).__name__
        raise TokenCacheError(f"{url}: format is {found!r}, expected {FORMAT!r}")
    return ledger
