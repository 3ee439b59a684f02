"""Partitioned MinHash-LSH: candidate pairs found without any process holding every signature.

`minhash.cluster_duplicates` finds candidates in one process from every document's band keys.
At corpus scale that process would hold all keys (and, with a threshold, all signatures). Here
the band keys of each shard are written as records split into `P` partitions by key hash; the
task of partition p reads partition p of every shard, so a bucket (documents sharing one band's
key) always lies whole in one partition. Each task links a bucket's members to its first
document -- exactly the star edges `cluster_duplicates` draws -- and writes them. The step's own
process then takes the connected components of those edges, holding only O(documents) integers,
and reads back signature rows one shard at a time where it needs them (threshold checks and the
similarity in removal records). The result is identical to `cluster_duplicates` on the same
keys: same candidate pairs, same components, same representatives.

A record is 16 bytes: the band key and a tag `band << 40 | document index in its shard`, so
buckets are told apart by band even if two bands' keys ever collided.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from marin_lab.io import fs as mfs
from marin_lab.processing.minhash import estimated_similarity, first_of_component

__all__ = [
    "RECORD",
    "Components",
    "ShardBands",
    "band_records",
    "bucket_edges",
    "components",
    "partition_of",
    "read_npy_rows",
    "read_partition",
    "save_npy",
    "signature_rows",
]

RECORD = np.dtype([("key", "<u8"), ("tag", "<u8")])
BAND_SHIFT = 40
_DOC_MASK = np.uint64((1 << BAND_SHIFT) - 1)


def partition_of(keys: np.ndarray, partitions: int) -> np.ndarray:
    return (keys % np.uint64(partitions)).astype(np.int64)


def band_records(keys: np.ndarray, valid: np.ndarray, partitions: int) -> tuple[np.ndarray, np.ndarray]:
    """The band-key records of one shard, grouped by partition, and the partition bounds.

    `keys` is (documents, bands); documents without words (`~valid`) get no records, as
    `cluster_duplicates` never links them. Partition p is `records[bounds[p]:bounds[p + 1]]`."""
    docs = np.flatnonzero(valid).astype(np.uint64)
    num_bands = keys.shape[1]
    flat = np.empty(docs.size * num_bands, dtype=RECORD)
    flat["key"] = keys[valid].reshape(-1)
    bands = np.arange(num_bands, dtype=np.uint64) << np.uint64(BAND_SHIFT)
    flat["tag"] = (docs[:, None] | bands[None, :]).reshape(-1)
    part = partition_of(flat["key"], partitions)
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(partitions + 1))
    return flat[order], bounds.astype(np.int64)


def bucket_edges(records: np.ndarray, first_doc: np.ndarray) -> np.ndarray:
    """Star edges (first document of the bucket, member), as (e, 2) int64 global indices.

    `records` may come from several shards; `first_doc[i]` is the global index of record i's
    shard's first document. Pairs are unique and sorted."""
    if records.size == 0:
        return np.empty((0, 2), dtype=np.int64)
    doc = (records["tag"] & _DOC_MASK).astype(np.int64) + first_doc
    band = records["tag"] >> np.uint64(BAND_SHIFT)
    order = np.lexsort((doc, band, records["key"]))
    key, band, doc = records["key"][order], band[order], doc[order]
    starts = np.ones(doc.size, dtype=bool)
    starts[1:] = (key[1:] != key[:-1]) | (band[1:] != band[:-1])
    first = doc[np.maximum.accumulate(np.where(starts, np.arange(doc.size), 0))]
    members = ~starts
    pairs = np.stack([first[members], doc[members]], axis=1)
    return np.unique(pairs, axis=0) if pairs.size else np.empty((0, 2), dtype=np.int64)


def save_npy(url: str, array: np.ndarray, *, durable: bool = True) -> None:
    """`durable=False` for files that live only within one run of the step (no fsync)."""
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    mfs.atomic_write_bytes(url, buf.getvalue(), durable=durable)


def read_npy_rows(url: str, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of a .npy file, reading only those bytes (a range read on object stores)."""
    fs, path = mfs.fs_and_path(url)
    with fs.open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
        row = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        stop = min(stop, shape[0]) if shape else 0
        if stop <= start:
            return np.empty((0, *shape[1:]), dtype=dtype)
        f.seek(f.tell() + start * row)
        data = f.read((stop - start) * row)
    return np.frombuffer(data, dtype=dtype).reshape(stop - start, *shape[1:])


@dataclass(frozen=True)
class ShardBands:
    """Where one shard's phase-1 outputs are, and its first document's global index."""

    signatures: str
    """(documents, permutations) uint32 signatures, .npy."""
    records: str
    """Band-key records grouped by partition, .npy (see `band_records`)."""
    bounds: tuple[int, ...]
    """Partition bounds into `records`."""
    first_doc: int
    """Global index (corpus order) of the shard's first document."""
    documents: int


def read_partition(shards: Sequence[ShardBands], partition: int) -> tuple[np.ndarray, np.ndarray]:
    """Partition `partition` of every shard's records, and each record's shard first-doc index."""
    parts, firsts = [], []
    for shard in shards:
        lo, hi = shard.bounds[partition], shard.bounds[partition + 1]
        if hi > lo:
            parts.append(read_npy_rows(shard.records, lo, hi))
            firsts.append(np.full(hi - lo, shard.first_doc, dtype=np.int64))
    if not parts:
        return np.empty(0, dtype=RECORD), np.empty(0, dtype=np.int64)
    return np.concatenate(parts), np.concatenate(firsts)


def signature_rows(shards: Sequence[ShardBands], docs: np.ndarray) -> np.ndarray:
    """Signatures of the documents with global indices `docs`, read one shard at a time."""
    docs = np.asarray(docs, dtype=np.int64)
    out = None
    starts = np.array([s.first_doc for s in shards], dtype=np.int64)
    shard_of = np.searchsorted(starts, docs, side="right") - 1
    for s in np.unique(shard_of):
        shard = shards[int(s)]
        mine = np.flatnonzero(shard_of == s)
        local = docs[mine] - shard.first_doc
        lo, hi = int(local.min()), int(local.max()) + 1
        rows = read_npy_rows(shard.signatures, lo, hi)[local - lo]
        if out is None:
            out = np.empty((docs.size, rows.shape[1]), dtype=rows.dtype)
        out[mine] = rows
    return out if out is not None else np.empty((0, 0), dtype=np.uint32)


def _in_chunks(n: int, size: int) -> Iterator[slice]:
    for lo in range(0, n, size):
        yield slice(lo, min(n, lo + size))


@dataclass(frozen=True)
class Components:
    representative: np.ndarray
    """(n,) int64: the first document of each document's component."""
    candidate_pairs: int
    linked_pairs: int


def components(
    n: int,
    edges: np.ndarray,
    shards: Sequence[ShardBands],
    threshold: float | None,
    *,
    chunk: int = 1 << 18,
) -> Components:
    """Connected components of the candidate `edges` (unique pairs), after the threshold check.

    Memory: the edges plus a few int64 arrays of `n`; signatures are read only for the
    candidate pairs, `chunk` pairs at a time, when there is a threshold."""
    src, dst = edges[:, 0], edges[:, 1]
    candidates = int(src.size)
    if threshold is not None and src.size:
        keep = np.zeros(src.size, dtype=bool)
        for part in _in_chunks(src.size, chunk):
            sim = estimated_similarity(signature_rows(shards, src[part]), signature_rows(shards, dst[part]))
            keep[part] = sim >= threshold
        src, dst = src[keep], dst[keep]
    return Components(first_of_component(n, src, dst), candidates, int(src.size))
