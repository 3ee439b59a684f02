"""MinHash signatures, LSH band keys and duplicate clustering, vectorised with numpy.

Why write this rather than use `datasketch`: datasketch hashes one shingle at a time in Python
(`update`) or one document at a time, and its LSH index lives in one process's memory; a corpus
split into shards needs signatures computed in parallel, written to storage, and clustered
globally. The pieces here are small and pure (no I/O), so the dedup step composes them and the
tests check them directly.

- Text is normalised for shingling the way FineWeb does (lower case, punctuation dropped, digits
  folded to "0") and split into words; each distinct word is hashed once with xxh3-64.
- A shingle (n consecutive words) hash is an order-sensitive polynomial of its word hashes,
  computed for all shingles of a document at once in uint64 arithmetic (wrap-around is intended).
- The permutations are multiply-add-shift hashes `(a * x + b) mod 2**64 >> 32` with seeded random
  odd `a`; the signature keeps the minimum per permutation as uint32. Taking the minimum before
  the shift is the same as after it (the shift is monotonic), which saves a pass.
- A band key folds the band's rows into one uint64; two documents are candidates when any band key
  matches. Clustering links each bucket member to the bucket's first document (star, not all
  pairs), optionally checking the estimated similarity, and takes connected components with
  scipy; the representative of a component is its first document in corpus order.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import numpy as np
import xxhash
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

__all__ = [
    "MinHasher",
    "Clusters",
    "normalize_for_shingles",
    "words_of",
    "shingle_hashes",
    "band_keys",
    "estimated_similarity",
    "cluster_duplicates",
]



def _fold_table() -> dict[int, str]:
    """str.translate table: punctuation and symbols to spaces, digits to "0".

    One translate and one split() is about four times faster than regex substitution plus
    findall, and gives the same words up to the length of digit runs ("2024" -> "0000").
    """
    table: dict[int, str] = {}
    for cp in range(0x3000):  # Latin, Greek, Cyrillic, ... and general punctuation
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat[0] in "PS":
            table[cp] = " "
        elif cat == "Nd" and ch != "0":
            table[cp] = "0"
    for cp in range(0x3000, 0x3040):  # CJK punctuation
        table[cp] = " "
    for cp in range(0xFF00, 0xFF10):  # full-width punctuation
        table[cp] = " "
    return table


_FOLD = _fold_table()
_MIX_MUL = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio: spreads bits in the fold
_FMIX1 = np.uint64(0xFF51AFD7ED558CCD)  # murmur3's 64-bit finaliser constants
_FMIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
EMPTY_SLOT = np.uint32(0xFFFFFFFF)


def normalize_for_shingles(text: str) -> str:
    """Lower-cased, NFKC-normalised text, punctuation dropped, digits folded to "0" (FineWeb)."""
    return unicodedata.normalize("NFKC", text).lower().translate(_FOLD)


def words_of(text: str) -> list[str]:
    """The words shingling sees: the whitespace-separated runs of the normalised text."""
    return normalize_for_shingles(text).split()


class _WordHashes(dict):
    """xxh3-64 of words, memoised: most words of a corpus repeat, and a dict hit is ~3x cheaper
    than hashing. Cleared when large so memory stays bounded."""

    limit = 1 << 20

    def __missing__(self, word: str) -> int:
        if len(self) >= self.limit:
            self.clear()
        h = self[word] = xxhash.xxh3_64_intdigest(word)
        return h


_WORD_HASHES = _WordHashes()


def _fmix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> _S33)
    x = x * _FMIX1
    x = x ^ (x >> _S33)
    x = x * _FMIX2
    return x ^ (x >> _S33)


def shingle_hashes(words: list[str], ngram_size: int) -> np.ndarray:
    """uint64 hashes of every `ngram_size`-word shingle; a shorter document is one shingle."""
    if not words:
        return np.empty(0, dtype=np.uint64)
    w = np.fromiter(map(_WORD_HASHES.__getitem__, words), dtype=np.uint64, count=len(words))
    n = min(ngram_size, len(w))
    count = len(w) - n + 1
    with np.errstate(over="ignore"):
        acc = w[:count].copy()
        for j in range(1, n):
            acc *= _MIX_MUL
            acc += w[j : j + count]
        return _fmix(acc)


def band_keys(signatures: np.ndarray, num_bands: int, rows_per_band: int) -> np.ndarray:
    """(n, num_bands) uint64 keys: each band's rows folded into one hash."""
    n = signatures.shape[0]
    bands = signatures.reshape(n, num_bands, rows_per_band).astype(np.uint64)
    with np.errstate(over="ignore"):
        acc = np.zeros((n, num_bands), dtype=np.uint64)
        for r in range(rows_per_band):
            acc *= _MIX_MUL
            acc += bands[:, :, r] + np.uint64(1)
        # Different bands must never share a bucket: mix the band number in.
        acc ^= np.arange(num_bands, dtype=np.uint64) * _FMIX1
        return _fmix(acc)


def estimated_similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The fraction of equal MinHash slots, row by row: an estimate of Jaccard similarity."""
    return (a == b).mean(axis=-1)


@dataclass(frozen=True)
class MinHasher:
    """Computes MinHash signatures with `num_bands * rows_per_band` seeded permutations."""

    ngram_size: int = 5
    """Words per shingle (FineWeb: 5)."""
    num_bands: int = 14
    """LSH bands (FineWeb: 14)."""
    rows_per_band: int = 8
    """Signature rows per band (FineWeb: 8); 14 x 8 = 112 permutations."""
    seed: int = 1
    """Seed of the permutations; documents are comparable only under the same seed."""

    def __post_init__(self) -> None:
        for name in ("ngram_size", "num_bands", "rows_per_band"):
            if getattr(self, name) < 1:
                raise ValueError(f"MinHasher.{name}={getattr(self, name)}: must be at least 1")
        rng = np.random.default_rng(self.seed)
        k = self.num_permutations
        # Odd multipliers make each permutation a bijection of the 64-bit hashes.
        a = rng.integers(0, 2**63, size=k, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        b = rng.integers(0, 2**63, size=k, dtype=np.uint64)
        object.__setattr__(self, "_a", a)
        object.__setattr__(self, "_b", b)

    @property
    def num_permutations(self) -> int:
        return self.num_bands * self.rows_per_band

    def signature(self, text: str) -> np.ndarray | None:
        """The uint32 signature of `text`, or None when it has no words."""
        shingles = shingle_hashes(words_of(text), self.ngram_size)
        if shingles.size == 0:
            return None
        return self.signature_of_hashes(shingles)

    def signature_of_hashes(self, shingles: np.ndarray) -> np.ndarray:
        # Chunked so a huge document does not allocate shingles x permutations at once.
        chunk = 4096
        best = None
        with np.errstate(over="ignore"):
            for start in range(0, shingles.size, chunk):
                part = shingles[start : start + chunk, None] * self._a
                part += self._b
                low = part.min(axis=0)
                best = low if best is None else np.minimum(best, low)
        return (best >> _S32).astype(np.uint32)

    def signatures(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(signatures (n, k) uint32, valid (n,) bool); a text without words is not valid."""
        out = np.full((len(texts), self.num_permutations), EMPTY_SLOT, dtype=np.uint32)
        valid = np.zeros(len(texts), dtype=bool)
        for i, text in enumerate(texts):
            sig = self.signature(text)
            if sig is not None:
                out[i] = sig
                valid[i] = True
        return out, valid

    def band_keys(self, signatures: np.ndarray) -> np.ndarray:
        return band_keys(signatures, self.num_bands, self.rows_per_band)


@dataclass(frozen=True)
class Clusters:
    """The result of clustering: per document, its representative and estimated similarity."""

    representative: np.ndarray
    """(n,) int64: the index of the first document of each document's cluster (itself if kept)."""
    similarity: np.ndarray
    """(n,) float64: estimated similarity to the representative (1.0 for representatives)."""
    candidate_pairs: int
    """Candidate pairs found by LSH (before any threshold check)."""
    linked_pairs: int
    """Pairs that passed the threshold check and were linked."""

    @property
    def removed(self) -> np.ndarray:
        return self.representative != np.arange(self.representative.size)


def cluster_duplicates(
    keys: np.ndarray,
    valid: np.ndarray,
    signatures: np.ndarray | None = None,
    threshold: float | None = None,
) -> Clusters:
    """Group documents sharing any LSH band key into connected components.

    `keys` is (n, bands) in corpus order; invalid documents (no words) are never linked. With
    `threshold`, a candidate pair is linked only if its estimated similarity reaches it (needs
    `signatures`). The result depends only on the order of the rows, never on how they were made.
    """
    n = keys.shape[0]
    if threshold is not None and signatures is None:
        raise ValueError("cluster_duplicates: a threshold needs the signatures to check pairs")
    idx = np.flatnonzero(valid)
    src_parts, dst_parts = [], []
    for band in range(keys.shape[1]):
        k = keys[idx, band]
        order = np.argsort(k, kind="stable")
        sk = k[order]
        starts = np.ones(sk.size, dtype=bool)
        starts[1:] = sk[1:] != sk[:-1]
        # Stable sort of ascending indices: a bucket's first entry is its earliest document.
        first = order[np.maximum.accumulate(np.where(starts, np.arange(sk.size), 0))]
        members = ~starts
        src_parts.append(idx[first[members]])
        dst_parts.append(idx[order[members]])
    src = np.concatenate(src_parts) if src_parts else np.empty(0, dtype=np.int64)
    dst = np.concatenate(dst_parts) if dst_parts else np.empty(0, dtype=np.int64)
    if src.size:
        pairs = np.unique(np.stack([src, dst], axis=1), axis=0)
        src, dst = pairs[:, 0], pairs[:, 1]
    candidates = int(src.size)
    if threshold is not None and src.size:
        keep = estimated_similarity(signatures[src], signatures[dst]) >= threshold
        src, dst = src[keep], dst[keep]
    graph = coo_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    first_of_label = np.full(labels.max() + 1 if n else 0, n, dtype=np.int64)
    np.minimum.at(first_of_label, labels, np.arange(n, dtype=np.int64))
    rep = first_of_label[labels] if n else np.empty(0, dtype=np.int64)
    sim = np.ones(n, dtype=np.float64)
    dup = np.flatnonzero(rep != np.arange(n))
    if signatures is not None and dup.size:
        sim[dup] = estimated_similarity(signatures[dup], signatures[rep[dup]])
    return Clusters(rep, sim, candidates, int(src.size))
