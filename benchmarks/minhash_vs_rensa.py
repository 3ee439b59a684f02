"""MinHash signatures end to end from raw text: marin_lab's `MinHasher` vs the Rust library rensa 0.5.0.

The corpus and the ground truth are `dedup_vs_datatrove.py`'s (the Python standard library's
sources capped at 5,000 characters, planted near duplicates at 0.5-2% word edits, far copies at
60%), held in memory: only the signature stage is timed, from the raw text of every document to a
(documents, 112) uint32 matrix. Both sides see the same words: marin_lab's normalisation (lower
case, punctuation to spaces, digits to 0, whitespace split, `minhash.words_of`) and 5-word
shingles; a document of fewer words is one shingle of all of them.

- `marin_lab`: `MinHasher(5, 28, 4, seed).signatures(texts)`, what the dedup step runs per shard
  (bytes to signatures in one loop compiled by numba); `--numpy-minima` adds
  `marin_lab-numpy-minima`, the same as numpy passes (what runs without numba; the same signatures).
- `rensa`: per document `words_of`, the 5-word shingles as strings (one `" ".join` per shingle
  over `zip` of the word list), then rensa's bulk `RMinHash.digest_matrix_from_token_sets(sets,
  112, seed)`: rensa hashes each shingle string and takes the 112 minima in Rust.
- `--per-doc` adds one call per document on both sides: `MinHasher.signature(text)` and
  `RMinHash(112, seed).update(shingles); digest()`.
- `--rensa-kernel` adds `marin_lab-hashes+rensa`: our shingle hashes, rensa's minima over them
  (`RMinHash.digest_matrix_from_flat_token_hashes`), i.e. rensa adopted as our permutation kernel.
- `--stages` prints where each side's time goes: ours normalise + UTF-8, then as numpy passes
  word hashes, shingle hashes, permutation minima, or compiled the whole of bytes to signatures;
  rensa words, shingle strings, its Rust call. Needs numba.
- `--bias` prints each side's similarity estimate minus the exact 5-gram Jaccard similarity (mean
  and standard error over the repeats' seeds) on the planted pairs and on random pairs of originals.

Dedup decisions: each side's signatures go through the same LSH and clustering (marin_lab's default,
28 bands x 4 rows, a candidate linked when its estimated Jaccard >= 0.7), the removed documents are
scored against the planted truth (precision, recall, F1), per seed. Repeat r uses seed r + 1 on
both sides; the order of the sides rotates every repeat.

Run: python benchmarks/minhash_vs_rensa.py [--docs 3000 --dups 1000 --repeats 5] [--per-doc]
[--rensa-kernel] [--numpy-minima] [--stages] [--bias]
Needs the `bench` extra (rensa) and numba (a dependency of marin_lab).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dedup_vs_datatrove import (  # noqa: E402  (the same corpus, shingles and scoring)
    build,
    planted_similarities,
    score,
    shingle_set,
    shingle_strings,
)

from marin_lab.io.documents import read_documents  # noqa: E402
from marin_lab.processing.dedup import DedupConfig  # noqa: E402
from marin_lab.processing.minhash import MinHasher, cluster_duplicates, link_probability, words_of  # noqa: E402

NGRAM = 5


def ours_batch(texts: list[str], seed: int, config: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    return MinHasher(NGRAM, config.num_bands, config.rows_per_band, seed).signatures(texts)


def ours_numpy_passes(texts: list[str], seed: int, config: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    """`marin_lab` as numpy passes (what runs where numba is not installed)."""
    from marin_lab.processing import minhash

    saved, minhash._KERNEL_JIT = minhash._KERNEL_JIT, False
    try:
        return ours_batch(texts, seed, config)
    finally:
        minhash._KERNEL_JIT = saved


def ours_per_doc(texts: list[str], seed: int, config: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    hasher = MinHasher(NGRAM, config.num_bands, config.rows_per_band, seed)
    sigs = [hasher.signature(t) for t in texts]
    return _stack(sigs, hasher.num_permutations)


def hashes_then_rensa(texts: list[str], seed: int, config: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    """Our normalisation, shingling and shingle hashes (`MinHasher.signatures` up to the
    permutations), then rensa's minima over those hashes: what adopting rensa as the permutation
    kernel would run. Its permutations are not ours, so neither are its signatures."""
    from rensa import RMinHash

    from marin_lab.processing import minhash

    k = config.num_bands * config.rows_per_band
    out = np.full((len(texts), k), 0xFFFFFFFF, dtype=np.uint32)
    valid = np.zeros(len(texts), dtype=bool)
    for start, end in minhash._batches(texts):
        words, doc_of_word = minhash._word_hashes(minhash._encode_batch(texts[start:end]))
        shingles, doc = minhash._shingles_of_words(words, doc_of_word, end - start, NGRAM)
        offsets = np.zeros(end - start + 1, dtype=np.uint64)
        np.cumsum(np.bincount(doc, minlength=end - start), out=offsets[1:])
        rows = RMinHash.digest_matrix_from_flat_token_hashes(shingles, offsets, k, seed).to_rows()
        has = offsets[1:] > offsets[:-1]
        out[start:end][has] = np.asarray(rows, dtype=np.uint32)[has]
        valid[start:end] = has
    return out, valid


def rensa_batch(texts: list[str], seed: int, config: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    from rensa import RMinHash

    sets = [shingle_strings(t) for t in texts]
    k = config.num_bands * config.rows_per_band
    matrix = RMinHash.digest_matrix_from_token_sets(sets, k, seed)
    sigs = np.asarray(matrix.to_rows(), dtype=np.uint32)
    return sigs, np.array([bool(s) for s in sets])


def rensa_per_doc(texts: list[str], seed: int, config: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    from rensa import RMinHash

    k = config.num_bands * config.rows_per_band
    sigs: list[np.ndarray | None] = []
    for t in texts:
        shingles = shingle_strings(t)
        if not shingles:
            sigs.append(None)
            continue
        m = RMinHash(k, seed)
        m.update(shingles)
        sigs.append(np.asarray(m.digest(), dtype=np.uint32))
    return _stack(sigs, k)


def _stack(sigs: list[np.ndarray | None], k: int) -> tuple[np.ndarray, np.ndarray]:
    valid = np.array([s is not None for s in sigs])
    out = np.full((len(sigs), k), 0xFFFFFFFF, dtype=np.uint32)
    for i, s in enumerate(sigs):
        if s is not None:
            out[i] = s
    return out, valid


SIDES = {
    "marin_lab": ours_batch,
    "marin_lab-numpy-minima": ours_numpy_passes,
    "rensa": rensa_batch,
    "marin_lab-per-doc": ours_per_doc,
    "rensa-per-doc": rensa_per_doc,
    "marin_lab-hashes+rensa": hashes_then_rensa,
}
PAIRS = (
    ("marin_lab", "rensa"),
    ("marin_lab-numpy-minima", "rensa"),
    ("marin_lab-per-doc", "rensa-per-doc"),
    ("marin_lab-hashes+rensa", "rensa"),
)


def removed_ids(sigs: np.ndarray, valid: np.ndarray, ids: list[str], config: DedupConfig) -> set[str]:
    hasher = MinHasher(NGRAM, config.num_bands, config.rows_per_band)
    clusters = cluster_duplicates(hasher.band_keys(sigs), valid, sigs, config.threshold)
    return {ids[i] for i in np.flatnonzero(clusters.removed)}


def bias(docs: list[dict], sides: list[str], config: DedupConfig, seeds: range) -> None:
    """Each side's similarity estimate (the share of equal signature slots) minus the exact 5-gram
    Jaccard similarity, on the planted pairs and on 3,000 random pairs of originals, over `seeds`:
    a biased estimator would move recall above or below the LSH's ideal by itself."""
    texts = [d["text"] for d in docs]
    row = {d["id"]: i for i, d in enumerate(docs)}

    sets = [shingle_set(t) for t in texts]
    planted = [(i, row[d["id"].split("/", 1)[1]]) for i, d in enumerate(docs) if d["id"].startswith("dup")]
    originals = [i for i, d in enumerate(docs) if not d["id"].startswith(("dup", "far"))]
    rng = np.random.default_rng(0)
    random_pairs = [(int(a), int(b)) for a, b in rng.choice(originals, size=(3000, 2)) if a != b]
    print(f"estimate - exact Jaccard, mean (standard error), over seeds {seeds.start}-{seeds.stop - 1}:")
    for name in sides:
        for label, pairs in (("planted pairs", planted), ("random pairs", random_pairs)):
            exact = np.array([len(sets[a] & sets[b]) / len(sets[a] | sets[b]) for a, b in pairs])
            a_rows, b_rows = (np.array(x) for x in zip(*pairs, strict=True))
            dev = []
            for seed in seeds:
                sigs, _ = SIDES[name](texts, seed, config)
                dev.append((sigs[a_rows] == sigs[b_rows]).mean(axis=1) - exact)
            d = np.concatenate(dev)
            print(f"  {name:<26}{label:<15}{d.mean():+.5f} ({d.std() / np.sqrt(d.size):.5f}), {len(pairs)} pairs")


def stages(texts: list[str], seed: int, config: DedupConfig, repeats: int) -> None:
    """Where each side's time goes, stage by stage over the whole corpus (min and median of repeats)."""
    from rensa import RMinHash

    from marin_lab.processing import minhash

    hasher = MinHasher(NGRAM, config.num_bands, config.rows_per_band, seed)
    k = hasher.num_permutations
    times: dict[str, list[float]] = {}

    def timed(name: str, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        times.setdefault(name, []).append(time.perf_counter() - t0)
        return out

    for _ in range(repeats):
        acc = {
            name: 0.0
            for name in (
                "ours: normalise + UTF-8",
                "ours, numpy passes: word hashes",
                "ours, numpy passes: shingle hashes",
                "ours, numpy passes: permutation minima",
                "ours, compiled: bytes to signatures",
            )
        }
        for start, end in minhash._batches(texts):
            for name, step in (
                ("ours: normalise + UTF-8", lambda start=start, end=end: minhash._encode_batch(texts[start:end])),
            ):
                t0 = time.perf_counter()
                data = step()
                acc[name] += time.perf_counter() - t0
            t0 = time.perf_counter()
            words, doc_of_word = minhash._word_hashes(data)
            t1 = time.perf_counter()
            shingles, doc = minhash._shingles_of_words(words, doc_of_word, end - start, NGRAM)
            t2 = time.perf_counter()
            hasher._min_hashes(shingles, doc, end - start)
            t3 = time.perf_counter()
            minhash._kernel()(
                data,
                NGRAM,
                hasher._a,
                hasher._b,
                np.empty((end - start, k), np.uint32),
                np.empty(end - start, dtype=bool),
            )
            t4 = time.perf_counter()
            acc["ours, numpy passes: word hashes"] += t1 - t0
            acc["ours, numpy passes: shingle hashes"] += t2 - t1
            acc["ours, numpy passes: permutation minima"] += t3 - t2
            acc["ours, compiled: bytes to signatures"] += t4 - t3
        for name, value in acc.items():
            times.setdefault(name, []).append(value)
        words_lists = timed("rensa: words (our normalisation, split)", lambda: [words_of(t) for t in texts])
        sets = timed(
            "rensa: shingle strings",
            lambda words_lists=words_lists: [
                list(map(" ".join, zip(*(w[i:] for i in range(NGRAM)), strict=False)))
                if len(w) >= NGRAM
                else [" ".join(w)]
                for w in words_lists
            ],
        )
        timed("rensa: hash strings + minima (Rust)", RMinHash.digest_matrix_from_token_sets, sets, k, seed)
    print(f"stages, {repeats} repeats, whole corpus: seconds min / median")
    for name, values in times.items():
        print(f"  {name:<44}{min(values):>7.3f} /{statistics.median(values):>7.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=3000, help="original documents")
    ap.add_argument("--dups", type=int, default=1000, help="near duplicates generated")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="corpus seed")
    ap.add_argument("--per-doc", action="store_true", help="also one call per document on both sides")
    ap.add_argument(
        "--numpy-minima", action="store_true", help="also marin_lab as numpy passes (what runs without numba)"
    )
    ap.add_argument("--stages", action="store_true", help="also where each side's time goes, stage by stage")
    ap.add_argument("--bias", action="store_true", help="also each side's similarity estimate minus the exact Jaccard")
    ap.add_argument(
        "--rensa-kernel",
        action="store_true",
        help="also our shingle hashes with rensa's minima (marin_lab-hashes+rensa)",
    )
    args = ap.parse_args(argv)
    sides = ["marin_lab", "rensa"]
    if args.per_doc:
        sides += ["marin_lab-per-doc", "rensa-per-doc"]
    if args.rensa_kernel:
        sides += ["marin_lab-hashes+rensa"]
    if args.numpy_minima:
        sides += ["marin_lab-numpy-minima"]
    config = DedupConfig(input_path="in", output_path="out")

    work = tempfile.mkdtemp(prefix="bench_minhash_")
    try:
        n, truth = build(work, args.docs, args.dups, 0.02, 0.6, 4, args.seed)
        docs = [d for p in sorted(glob.glob(os.path.join(work, "*.jsonl.gz"))) for d in read_documents(p)]
        sims = planted_similarities(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    texts, ids = [d["text"] for d in docs], [d["id"] for d in docs]
    chars = sum(map(len, texts))
    for name in sides:  # warm-up: imports, rensa's and numpy's first-call costs
        SIDES[name](texts[:50], 1, config)

    walls: dict[str, list[float]] = {s: [] for s in sides}
    scores: dict[str, list[tuple[float, float, float]]] = {s: [] for s in sides}
    loads = [os.getloadavg()[0]]
    for rep in range(args.repeats):
        seed = rep + 1
        for name in sides[rep % len(sides) :] + sides[: rep % len(sides)]:
            t0 = time.perf_counter()
            sigs, valid = SIDES[name](texts, seed, config)
            walls[name].append(time.perf_counter() - t0)
            scores[name].append(score(removed_ids(sigs, valid, ids, config), truth))
            loads.append(os.getloadavg()[0])

    print(
        f"MinHash signatures from raw text, {len(texts)} documents ({chars / len(texts):,.0f} characters "
        f"on average; {len(truth)} planted near duplicates), 5-word shingles, "
        f"{config.num_bands * config.rows_per_band} permutations, one process; python {sys.version.split()[0]}"
    )
    print(
        f"{args.repeats} repeats, sides alternating (rotating order), seed = repeat + 1; 1-min load average "
        f"{min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f}); time: median (min-max); "
        f"dedup decisions: {config.num_bands} bands x {config.rows_per_band} rows, checked >= {config.threshold}"
    )
    print(
        f"{'side':<26}{'wall s':>8}{'docs/s':>8}{'min-max docs/s':>16}{'prec':>8}{'recall':>8}{'F1':>8}   F1 per seed"
    )
    rate = {}
    for name in sides:
        wall = statistics.median(walls[name])
        rate[name] = len(texts) / wall
        lo, hi = len(texts) / max(walls[name]), len(texts) / min(walls[name])
        p, r, f1 = (statistics.mean(x[i] for x in scores[name]) for i in range(3))
        per_seed = " ".join(f"{x[2]:.4f}" for x in scores[name])
        print(
            f"{name:<26}{wall:>8.3f}{rate[name]:>8.0f}{f'{lo:.0f}-{hi:.0f}':>16}{p:>8.4f}{r:>8.4f}{f1:>8.4f}   "
            f"{per_seed}"
        )
    ideal = link_probability(sims, config.num_bands, config.rows_per_band, config.threshold).mean()
    print(
        f"ideal MinHash-LSH expected recall on the {sims.size} planted pairs (exact 5-gram Jaccard, "
        f"min {sims.min():.3f}, median {np.median(sims):.3f}): {ideal:.4f}; a side above or below it "
        f"by a document or two has had a lucky or unlucky draw of permutations"
    )
    for mine, peer in PAIRS:
        if mine not in rate:
            continue
        ratios = [b / a for a, b in zip(walls[mine], walls[peer], strict=True)]  # per repeat: their time / ours
        ours_f1 = [x[2] for x in scores[mine]]
        their_f1 = [x[2] for x in scores[peer]]
        ahead = sum(a >= b for a, b in zip(ours_f1, their_f1, strict=True))
        print(
            f"{mine} / {peer}: docs/s {rate[mine] / rate[peer]:.2f}x (medians; per repeat "
            f"{min(ratios):.2f}-{max(ratios):.2f}x, goal >= 1x); F1 {statistics.mean(ours_f1):.4f} vs "
            f"{statistics.mean(their_f1):.4f}, ours >= theirs on {ahead} of {len(ours_f1)} seeds"
        )
    if args.stages:
        stages(texts, 1, config, args.repeats)
    if args.bias:
        bias(docs, ["marin_lab", "rensa"], config, range(1, args.repeats + 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
