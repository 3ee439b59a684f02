"""MinHash signatures, LSH band keys and duplicate clustering, vectorised with numpy.

Why write this rather than use `datasketch`: datasketch hashes one shingle at a time in Python
(`update`) or one document at a time, and its LSH index lives in one process's memory; a corpus
split into shards needs signatures computed in parallel, written to storage, and clustered
globally. The pieces here are small and pure (no I/O), so the dedup step composes them and the
tests check them directly.

- Text is normalised for shingling the way FineWeb does (lower case, punctuation dropped, digits
  folded to "0") and split into words on whitespace.
- Everything after normalisation runs on about a megabyte of documents at a time, as numpy
  passes over their UTF-8 bytes: a word's hash is a polynomial of its bytes modulo 2**64 (found
  for all words at once from one prefix sum), mixed with murmur3's finaliser; a shingle (n
  consecutive words of one document) hash is an order-sensitive polynomial of its word hashes.
  Wrap-around of uint64 arithmetic is intended throughout. Batching makes the cost per document
  arithmetic rather than Python calls; a document's signature does not depend on its batch.
- The permutations are multiply-add-shift hashes `(a * x + b) mod 2**64 >> 32` with seeded random
  odd `a`; the signature keeps the minimum per permutation as uint32. Taking the minimum before
  the shift is the same as after it (the shift is monotonic), which saves a pass.
- With numba installed (a dependency), everything after normalisation is one compiled loop over
  the bytes (`_signature_loop`): the same word, shingle and permutation arithmetic one value at a
  time, each shingle against all k permutations (an inner loop the compiler can vectorise), no
  temporaries and no per-call numpy overhead. The permutation minima were half the time of the
  numpy passes; compiled, bytes to signatures take about 40% of the passes' time (measured in
  benchmarks/results/history.md, "MinHash signatures vs rensa"). Without numba the numpy passes
  run. Both give bit-identical signatures, equal to those since the kernel was written (tested
  against a reference written one Python integer at a time), so no step identity changed.
- A band key folds the band's rows into one uint64; two documents are candidates when any band key
  matches. Clustering links each bucket member to the bucket's first document (star, not all
  pairs), optionally checking the estimated similarity, and takes connected components with
  scipy; the representative of a component is its first document in corpus order.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "MinHasher",
    "Clusters",
    "normalize_for_shingles",
    "words_of",
    "shingle_hashes",
    "band_keys",
    "estimated_similarity",
    "link_probability",
    "cluster_duplicates",
]


def _fold_table() -> dict[int, str]:
    """str.translate table: punctuation, symbols and every kind of whitespace to " ", digits to "0".

    One translate and one split() is about four times faster than regex substitution plus
    findall, and gives the same words up to the length of digit runs ("2024" -> "0000"). After
    it the only separator left is " ", which is what lets words be found in the UTF-8 bytes.
    """
    table: dict[int, str] = {}
    for cp in range(0x3000):  # Latin, Greek, Cyrillic, ... and general punctuation
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat[0] in "PS" or (ch.isspace() and ch != " "):
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
_U64_MAX = np.uint64(0xFFFFFFFFFFFFFFFF)
# Shingles per permutation pass: k x chunk uint64 (7.3 MB for 112 permutations).
_MIN_CHUNK = 8192


def normalize_for_shingles(text: str) -> str:
    """Lower-cased, NFKC-normalised text, punctuation dropped, digits folded to "0" (FineWeb)."""
    if not text.isascii():  # isascii() is a flag check; ASCII is already NFKC
        text = unicodedata.normalize("NFKC", text)
    return text.lower().translate(_FOLD)


def words_of(text: str) -> list[str]:
    """The words shingling sees: the whitespace-separated runs of the normalised text."""
    return normalize_for_shingles(text).split()


_BYTE_MUL = np.uint64(0xD6E8FEB86659FD93)  # odd: the byte polynomial of a word
_LEN_MUL = np.uint64(0xA0761D6478BD642F)
_SPACE, _DOC_END = 0x20, 0x0A  # after normalisation "\n" never occurs in a text: it ends one
_BATCH_BYTES = 1 << 20  # bytes of normalised text hashed per numpy pass (bounds temporaries)


_BYTE_INV = np.uint64(pow(int(_BYTE_MUL), -1, 2**64))  # its inverse modulo 2**64


class _Powers:
    """M ** k (mod 2**64) for k < n, grown on demand."""

    def __init__(self, base: np.uint64) -> None:
        self.base = base
        self.table = np.ones(1, dtype=np.uint64)

    def upto(self, n: int) -> np.ndarray:
        if n > self.table.size:
            size = max(n, 2 * self.table.size, 1024)
            with np.errstate(over="ignore"):  # wrap-around is the arithmetic we want
                steps = np.full(size - 1, self.base, dtype=np.uint64)
                self.table = np.concatenate((np.ones(1, dtype=np.uint64), np.cumprod(steps)))
        return self.table[:n]


_POWERS = _Powers(_BYTE_MUL)
_INV_POWERS = _Powers(_BYTE_INV)


def _signature_loop(
    data: np.ndarray, ngram_size: int, a: np.ndarray, b: np.ndarray, out: np.ndarray, valid: np.ndarray
) -> None:
    """Signatures straight from the UTF-8 bytes of normalised documents (words separated by " ",
    documents by "\\n", as `_encode_batch` joins them) into `out` (documents, k) and `valid`: the
    same arithmetic as the numpy passes, one byte, word and shingle at a time. A word's hash is
    its byte polynomial (Horner) with its length mixed in, then murmur3's finaliser; the last
    `ngram_size` word hashes of the document (a ring) fold into each shingle hash; each shingle
    updates the minima of all k permutations (the inner loop); a document of
    1..ngram_size-1 words is one shingle of all of them; one of none keeps EMPTY_SLOT and is not
    valid. Run compiled by numba (`_kernel`); as plain Python it is a readable statement of the
    kernel, checked against the reference in the tests."""
    k = a.size
    mins = np.empty(k, dtype=np.uint64)
    mins[:] = _U64_MAX
    ring = np.empty(ngram_size, dtype=np.uint64)
    doc, count, length, first, size = 0, 0, 0, 0, 0
    h = np.uint64(0)
    for pos in range(data.size + 1):
        c = data[pos] if pos < data.size else _DOC_END
        if c != _SPACE and c != _DOC_END:
            h = h * _BYTE_MUL + np.uint64(c)
            length += 1
            continue
        emit = False
        if length:  # a word ended
            x = h ^ (np.uint64(length) * _LEN_MUL)
            x ^= x >> _S33  # murmur3's finaliser, as _fmix
            x *= _FMIX1
            x ^= x >> _S33
            x *= _FMIX2
            ring[count % ngram_size] = x ^ (x >> _S33)
            count += 1
            h, length = np.uint64(0), 0
            if count >= ngram_size:  # the last ngram_size words, oldest first
                first, size, emit = count, ngram_size, True
        if c == _DOC_END and 0 < count < ngram_size:  # a short document: one shingle of all its words
            first, size, emit = 0, count, True
        if emit:
            s = ring[first % ngram_size]
            for j in range(1, size):
                s = s * _MIX_MUL + ring[(first + j) % ngram_size]
            s ^= s >> _S33
            s *= _FMIX1
            s ^= s >> _S33
            s *= _FMIX2
            s ^= s >> _S33
            for p in range(k):
                mins[p] = min(mins[p], a[p] * s + b[p])
        if c == _DOC_END:
            valid[doc] = count > 0
            for p in range(k):
                out[doc, p] = mins[p] >> _S32
            mins[:] = _U64_MAX
            doc, count = doc + 1, 0


_KERNEL_JIT: Any = None  # the compiled `_signature_loop`; False where numba is not installed


def _kernel() -> Any:
    """`_signature_loop` compiled by numba (imported on first use: 0.5 s), or None without numba,
    where the numpy passes give the same signatures at about half the speed. cache=True:
    compiled once per installation (~2 s, kept in __pycache__), not in every worker process."""
    global _KERNEL_JIT
    if _KERNEL_JIT is None:
        try:
            import numba
        except ImportError:
            _KERNEL_JIT = False
            return None
        if getattr(numba.config, "DISABLE_JIT", False):  # NUMBA_DISABLE_JIT=1 would run the loop as Python
            _KERNEL_JIT = False
        else:
            try:
                _KERNEL_JIT = numba.njit(cache=True, nogil=True)(_signature_loop)
            except RuntimeError:  # no writable cache location: compile in this process only
                _KERNEL_JIT = numba.njit(nogil=True)(_signature_loop)
    return _KERNEL_JIT or None


def _fmix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> _S33)
    x = x * _FMIX1
    x = x ^ (x >> _S33)
    x = x * _FMIX2
    return x ^ (x >> _S33)


def _word_hashes(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For UTF-8 bytes whose words are separated by spaces and documents by "\\n": the 64-bit
    hash of every word (a polynomial of its bytes, mixed), and its document number (0-based).

    All words at once in a few numpy passes (a Python dict lookup per word costs more than this
    whole function per byte), over slices of about a megabyte cut between words."""
    word_parts, doc_parts = [], []
    docs_before = 0
    lo = 0
    while lo < data.size:
        hi = min(lo + _BATCH_BYTES, data.size)
        if hi < data.size:  # cut after a separator, never inside a word
            cut = np.flatnonzero((data[lo:hi] == _SPACE) | (data[lo:hi] == _DOC_END))
            if cut.size:
                hi = lo + int(cut[-1]) + 1
            else:
                rest = np.flatnonzero((data[hi:] == _SPACE) | (data[hi:] == _DOC_END))
                hi = hi + int(rest[0]) + 1 if rest.size else data.size
        words, docs = _slice_word_hashes(data[lo:hi])
        word_parts.append(words)
        doc_parts.append(docs + docs_before)
        docs_before += int(np.count_nonzero(data[lo:hi] == _DOC_END))
        lo = hi
    if not word_parts:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    return np.concatenate(word_parts), np.concatenate(doc_parts)


def _slice_word_hashes(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sep = np.ones(data.size + 2, dtype=bool)  # a separator before the first byte and after the last
    np.equal(data, _SPACE, out=sep[1:-1])
    sep[1:-1] |= data == _DOC_END
    edges = np.flatnonzero(sep[1:] != sep[:-1])
    starts, ends = edges[0::2], edges[1::2]  # word = a run of non-separators [start, end)
    if starts.size == 0:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    # Word [s, e) hashes to sum(b_j * M**(e-1-j)) = M**(e-1) * (C[e-1] - C[s-1]) with
    # C = cumsum(b_j * M**-j): three passes over the bytes, then a few per word. (Array arithmetic
    # wraps around silently; only numpy scalar arithmetic warns, and there is none here.)
    prefix = np.empty(data.size + 1, dtype=np.uint64)
    prefix[0] = 0
    np.multiply(data, _INV_POWERS.upto(data.size), out=prefix[1:])
    np.cumsum(prefix[1:], out=prefix[1:])
    words = (prefix[ends] - prefix[starts]) * _POWERS.upto(data.size)[ends - 1]
    words ^= (ends - starts).astype(np.uint64) * _LEN_MUL
    words = _fmix(words)
    doc_ends = np.flatnonzero(data == _DOC_END)
    return words, np.searchsorted(doc_ends, starts)


def _shingles_of_words(words: np.ndarray, doc_of_word: np.ndarray, num_docs: int, ngram_size: int):
    """Shingle hashes of documents given their word hashes in order: (hashes, document of each).

    A shingle is `ngram_size` consecutive words of one document (never across two); a document
    with fewer words is one shingle of all of them."""
    counts = np.bincount(doc_of_word, minlength=num_docs)
    doc_start = np.zeros(num_docs + 1, dtype=np.int64)
    np.cumsum(counts, out=doc_start[1:])
    n = ngram_size
    total = words.size
    padded = np.concatenate((words, np.zeros(n - 1, dtype=np.uint64)))
    with np.errstate(over="ignore"):
        acc = padded[:total].copy()
        for j in range(1, n):
            acc *= _MIX_MUL
            acc += padded[j : j + total]
        keep = np.arange(total) + (n - 1) < doc_start[doc_of_word + 1]
        hashes, docs = acc[keep], doc_of_word[keep]
        short = np.flatnonzero((counts > 0) & (counts < n))
        if short.size:  # rare: documents of 1..n-1 words are one shingle of all their words
            extra = np.empty(short.size, dtype=np.uint64)
            for k, d in enumerate(short):
                w = words[doc_start[d] : doc_start[d + 1]]
                h = w[0]
                for x in w[1:]:
                    h = h * _MIX_MUL + x
                extra[k] = h
            hashes = np.concatenate((hashes, extra))
            docs = np.concatenate((docs, short))
            order = np.argsort(docs, kind="stable")
            hashes, docs = hashes[order], docs[order]
        return _fmix(hashes), docs


def _encode_batch(texts: list[str]) -> np.ndarray:
    joined = "\n".join(normalize_for_shingles(t) for t in texts)
    # surrogatepass: a lone surrogate (legal in JSON) must not stop the step.
    return np.frombuffer(joined.encode("utf-8", "surrogatepass"), dtype=np.uint8)


def shingle_hashes(words: list[str], ngram_size: int) -> np.ndarray:
    """uint64 hashes of every `ngram_size`-word shingle; a shorter document is one shingle."""
    if not words:
        return np.empty(0, dtype=np.uint64)
    data = np.frombuffer(" ".join(words).encode("utf-8", "surrogatepass"), dtype=np.uint8)
    hashes, doc = _word_hashes(data)
    return _shingles_of_words(hashes, doc, 1, ngram_size)[0]


def _batches(texts: list[str]) -> list[tuple[int, int]]:
    """[start, end) ranges of `texts` holding about `_BATCH_BYTES` characters each."""
    out, start, size = [], 0, 0
    for i, t in enumerate(texts):
        size += len(t) + 1
        if size >= _BATCH_BYTES:
            out.append((start, i + 1))
            start, size = i + 1, 0
    if start < len(texts):
        out.append((start, len(texts)))
    return out


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


def link_probability(
    jaccard: np.ndarray | float, num_bands: int, rows_per_band: int, threshold: float | None = None
) -> np.ndarray:
    """The probability that MinHash-LSH links a pair of documents of Jaccard similarity `jaccard`
    (the pair alone, without help from a third document), under independent permutations.

    Without a threshold: some band matches, `1 - (1 - J**rows)**bands`. With one: some band
    matches AND the estimated similarity (matching slots / permutations) reaches `threshold`.
    The two are not independent (a matching band is `rows` matching slots), so the count of
    matching slots is followed band by band together with "a band matched so far"."""
    j = np.atleast_1d(np.asarray(jaccard, dtype=np.float64))
    if threshold is None:
        return 1.0 - (1.0 - j**rows_per_band) ** num_bands
    k, r = num_bands * rows_per_band, rows_per_band
    # The same float comparison as the step's: mean of k booleans >= threshold.
    passes = np.arange(k + 1) / k >= threshold
    rows = np.arange(r + 1)
    binom = np.array([math.comb(r, m) for m in rows], dtype=np.float64)
    out = np.empty(j.size)
    for lo in range(0, j.size, 4096):  # bounds the (pairs, 2, k + 1) state
        jj = j[lo : lo + 4096, None]
        pm = binom * jj**rows * (1.0 - jj) ** (r - rows)  # (pairs, r + 1): matching rows in a band
        state = np.zeros((jj.shape[0], 2, k + 1))  # [pair, some band matched, matching slots]
        state[:, 0, 0] = 1.0
        for _ in range(num_bands):
            new = np.zeros_like(state)
            for m in range(r):
                new[:, :, m:] += state[:, :, : k + 1 - m] * pm[:, m, None, None]
            new[:, 1, r:] += state[:, :, : k + 1 - r].sum(axis=1) * pm[:, r, None]
            state = new
        out[lo : lo + 4096] = state[:, 1, :] @ passes
    return out


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
        # Set past the frozen dataclass's __setattr__; declared here so that they are not fields.
        self._a: np.ndarray
        self._b: np.ndarray
        object.__setattr__(self, "_a", a)
        object.__setattr__(self, "_b", b)

    @property
    def num_permutations(self) -> int:
        return self.num_bands * self.rows_per_band

    def signature(self, text: str) -> np.ndarray | None:
        """The uint32 signature of `text`, or None when it has no words."""
        sigs, valid = self.signatures([text])
        return sigs[0] if valid[0] else None

    def signatures(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(signatures (n, k) uint32, valid (n,) bool); a text without words is not valid.

        Texts are normalised in Python and joined in batches of about a megabyte; from the bytes on,
        one compiled loop per batch (`_signature_loop`, with numba) or numpy passes over the whole
        batch give the same signatures, so the cost per document is arithmetic, not calls."""
        out = np.full((len(texts), self.num_permutations), EMPTY_SLOT, dtype=np.uint32)
        valid = np.zeros(len(texts), dtype=bool)
        kernel = _kernel()
        for start, end in _batches(texts):
            data = _encode_batch(texts[start:end])
            if kernel is not None:
                kernel(data, self.ngram_size, self._a, self._b, out[start:end], valid[start:end])
                continue
            words, doc_of_word = _word_hashes(data)
            shingles, doc = _shingles_of_words(words, doc_of_word, end - start, self.ngram_size)
            has = np.zeros(end - start, dtype=bool)
            has[doc] = True
            best = self._min_hashes(shingles, doc, end - start)
            out[start:end][has] = (best[:, has] >> _S32).T.astype(np.uint32)
            valid[start:end] = has
        return out, valid

    def _min_hashes(self, shingles: np.ndarray, doc: np.ndarray, num_docs: int) -> np.ndarray:
        """(k, num_docs) minimum of each permutation over each document's shingles (`doc` sorted).

        The cost is k multiply-adds per shingle, done `_MIN_CHUNK` shingles at a time into a
        buffer sized to the work (a buffer of the full chunk for a short document costs more in
        page faults than its arithmetic). Array arithmetic wraps around silently in numpy; only
        scalar arithmetic would warn, and there is none here."""
        k = self.num_permutations
        best = np.full((k, num_docs), _U64_MAX, dtype=np.uint64)
        if shingles.size == 0:
            return best
        chunk = min(_MIN_CHUNK, shingles.size)
        buf = np.empty((k, chunk), dtype=np.uint64)
        a, b = self._a[:, None], self._b[:, None]
        if num_docs == 1:  # one document (`signature`): a plain row minimum, no segments
            row = best[:, 0]
            for lo in range(0, shingles.size, chunk):
                part = shingles[lo : lo + chunk]
                m = buf[:, : part.size]
                np.multiply(a, part, out=m)
                m += b
                np.minimum(row, m.min(axis=1), out=row)
            return best
        for lo in range(0, shingles.size, chunk):
            part, part_doc = shingles[lo : lo + chunk], doc[lo : lo + chunk]
            m = buf[:, : part.size]
            np.multiply(a, part, out=m)
            m += b
            first = np.empty(part_doc.size, dtype=bool)
            first[0] = True
            np.not_equal(part_doc[1:], part_doc[:-1], out=first[1:])
            starts = np.flatnonzero(first)
            docs = part_doc[starts]
            # A document cut by the chunk boundary meets its other part through the minimum.
            best[:, docs] = np.minimum(best[:, docs], np.minimum.reduceat(m, starts, axis=1))
        return best

    def band_keys(self, signatures: np.ndarray) -> np.ndarray:
        return band_keys(signatures, self.num_bands, self.rows_per_band)


def first_of_component(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """For each of `n` documents linked by edges (src, dst): the first document of its connected
    component, i.e. its cluster's representative in corpus order."""
    from scipy.sparse import coo_matrix  # here, not at import: scipy.sparse takes 0.4-0.7 s to import
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    first_of_label = np.full(labels.max() + 1 if n else 0, n, dtype=np.int64)
    np.minimum.at(first_of_label, labels, np.arange(n, dtype=np.int64))
    return first_of_label[labels] if n else np.empty(0, dtype=np.int64)


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
    if threshold is not None and signatures is not None and src.size:  # signatures: checked above
        keep = estimated_similarity(signatures[src], signatures[dst]) >= threshold
        src, dst = src[keep], dst[keep]
    rep = first_of_component(n, src, dst)
    sim = np.ones(n, dtype=np.float64)
    dup = np.flatnonzero(rep != np.arange(n))
    if signatures is not None and dup.size:
        sim[dup] = estimated_similarity(signatures[dup], signatures[rep[dup]])
    return Clusters(rep, sim, candidates, int(src.size))
