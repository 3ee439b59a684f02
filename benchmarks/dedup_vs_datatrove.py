"""Fuzzy dedup: marin_lab's `dedup_fuzzy` vs datatrove 0.10.1's MinHash pipeline, side by side.

Every side: 5-word shingles and 112 MinHash permutations, one worker, the whole pipeline timed
(signatures, buckets/clustering, filtering, writing gzip JSON lines). marin_lab runs its default
LSH (the 112 slots as 28 bands x 4 rows, a candidate pair linked when its estimated similarity is
>= 0.7) and, as `marin_lab-fineweb`, FineWeb's 14 bands x 8 rows without a check, which is also
what datatrove runs. Two datatrove configurations: its default (text simplification, then spaCy's
English word tokenizer) and like for like (the same simplification, then a whitespace split, which
is how marin_lab shingles: lower case, punctuation to spaces, digits to 0, split on whitespace).
The sides run alternately (the order rotates every repeat), each repeat with its own permutation
seed on every side. The corpus is real
text nobody here wrote -- the Python standard library's source files (PSF licence) of this
interpreter -- plus near duplicates made by mutating a sample of them (word substitutions,
deletions and insertions at a known rate), written after all originals so both pipelines keep
the original. Ground truth: a removal is correct when the removed document is a generated near
duplicate (mutation <= `--max-dup-rate`); documents mutated much more (`--far-rate`) are not
duplicates and removing them counts against precision.

Quality: which planted pairs near the LSH threshold are found is the luck of each seed's draw, so
the script also prints the recall an ideal MinHash-LSH would have in expectation, from the exact
5-gram Jaccard similarity of every planted pair (`minhash.link_probability`, averaged), for
FineWeb's 14 x 8 and for marin_lab's default.

Two optional rensa sides (rensa 0.5.0, Rust), both with the same words (our normalisation,
whitespace split) as 5-word shingle strings and `RMinHash.digest_matrix_from_token_sets`:
`rensa-step` is `dedup_fuzzy` itself with rensa as its signature engine (what adopting rensa
would run); `rensa` is a lighter pipeline held in memory: every shard read once and kept,
marin_lab's LSH (28 x 4, checked >= 0.7) and clustering, the kept documents as gzip JSON lines and
one removal record per removed document (zstd), no work files or markers, one process. The
signature stage alone against rensa, with its stages timed: `minhash_vs_rensa.py`. Each side's
previous output is removed before its timed run.

Run: python benchmarks/dedup_vs_datatrove.py [--docs 3000 --dups 1000 --repeats 5]
Needs the `bench` extra (datatrove, spacy, orjson, rensa).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import logging
import os
import random
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

from marin_lab.io.documents import read_documents, write_documents
from marin_lab.processing import dedup as dedup_module
from marin_lab.processing.dedup import DedupConfig, dedup_fuzzy
from marin_lab.processing.minhash import MinHasher, cluster_duplicates, link_probability, words_of

logging.disable(logging.WARNING)


def real_documents(n: int, seed: int) -> list[dict]:
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True))
    seen, docs = set(), []
    for path in files:
        if "site-packages" in path:
            continue
        try:
            # Web documents average a few thousand characters (FineWeb: ~3k).
            text = Path(path).read_text(encoding="utf-8")[:5_000]
        except (UnicodeDecodeError, OSError):
            continue
        if len(text.split()) < 100 or text in seen:
            continue
        seen.add(text)
        docs.append({"id": "orig/" + os.path.relpath(path, stdlib), "text": text})
    random.Random(seed).shuffle(docs)
    return drop_natural_near_duplicates(docs[: int(n * 1.2)])[:n]


def drop_natural_near_duplicates(docs: list[dict]) -> list[dict]:
    """The standard library has its own near duplicates (license headers, test templates); drop
    them so that the generated ones are the only ground truth. Candidates come from a 256-slot
    MinHash at a low threshold, checked with exact word-5-gram Jaccard >= 0.4 (words as both
    pipelines see them: lower case, no punctuation)."""
    hasher = MinHasher(num_bands=64, rows_per_band=4, seed=99)
    sigs, valid = hasher.signatures([d["text"] for d in docs])
    clusters = cluster_duplicates(hasher.band_keys(sigs), valid)

    def shingles(t):
        return {tuple(w[i : i + 5]) for w in [words_of(t)] for i in range(len(w) - 4)}

    drop = set()
    for i in np.flatnonzero(clusters.removed):
        a, b = shingles(docs[i]["text"]), shingles(docs[clusters.representative[i]]["text"])
        if len(a & b) / max(1, len(a | b)) >= 0.4 or not valid[i]:
            drop.add(int(i))
    return [d for i, d in enumerate(docs) if i not in drop and valid[i]]


def mutate(rng: random.Random, text: str, rate: float, vocab: list[str]) -> str:
    words = text.split()
    out = []
    for w in words:
        r = rng.random()
        if r < rate / 3:
            continue  # delete
        if r < 2 * rate / 3:
            out.append(rng.choice(vocab))  # substitute
            continue
        out.append(w)
        if r < rate:
            out.append(rng.choice(vocab))  # insert
    return " ".join(out)


def build(root: str, n_docs: int, n_dups: int, max_rate: float, far_rate: float, shards: int, seed: int):
    rng = random.Random(seed)
    docs = real_documents(n_docs, seed)
    vocab = sorted({w for d in docs[:200] for w in d["text"].split()})
    # A word edit touches up to 5 shingles: at <= 2% edits the 5-gram Jaccard similarity to the
    # original stays above ~0.8, where FineWeb's 14 x 8 bands find a pair with probability > 0.9.
    dups, far = [], []
    for i, orig in enumerate(rng.sample(docs, min(n_dups, len(docs)))):
        rate = rng.uniform(0.005, max_rate)
        dups.append({"id": f"dup{i}/{orig['id']}", "text": mutate(rng, orig["text"], rate, vocab)})
    for i, orig in enumerate(rng.sample(docs, min(n_dups // 5, len(docs)))):
        far.append({"id": f"far{i}/{orig['id']}", "text": mutate(rng, orig["text"], far_rate, vocab)})
    extra = dups + far
    rng.shuffle(extra)
    os.makedirs(root, exist_ok=True)
    # Originals first (shards 0..k-1), mutations after, so the first-kept original is right.
    half = shards // 2
    for s in range(half):
        write_documents(os.path.join(root, f"part-{s:02d}.jsonl.gz"), docs[s::half])
    for s in range(shards - half):
        write_documents(os.path.join(root, f"part-{half + s:02d}.jsonl.gz"), extra[s :: shards - half])
    return len(docs) + len(extra), {d["id"] for d in dups}


def shingle_strings(text: str) -> list[str]:
    """The 5-word shingles of `text` as strings (what rensa hashes); fewer words are one shingle."""
    w = words_of(text)
    if len(w) < 5:
        return [" ".join(w)] if w else []
    return list(map(" ".join, zip(*(w[i:] for i in range(5)), strict=False)))


def shingle_set(text: str) -> set[tuple[str, ...]]:
    """The 5-word shingles of `text` as a set, for exact Jaccard similarities."""
    w = words_of(text)
    return {tuple(w[i : i + 5]) for i in range(max(1, len(w) - 4))}


def score(removed: set[str], truth: set[str]) -> tuple[float, float, float]:
    tp = len(removed & truth)
    p = tp / len(removed) if removed else 1.0
    r = tp / len(truth) if truth else 1.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f1


SIDES = ("marin_lab", "datatrove-ws", "datatrove-spacy")
OPTIONAL_SIDES = ("marin_lab-fineweb", "rensa-step", "rensa")
FINEWEB_LSH = {"num_bands": 14, "rows_per_band": 8, "threshold": None}
LABELS = {
    "marin_lab": "marin_lab (28x4, checked >= 0.7)",
    "marin_lab-fineweb": "marin_lab, FineWeb's 14x8 (no check)",
    "datatrove-ws": "datatrove, whitespace words (like for like)",
    "datatrove-spacy": "datatrove, spaCy words (its default)",
    "rensa-step": "rensa as dedup_fuzzy's signature engine",
    "rensa": "rensa signatures, in memory, one read",
}
# Where each side writes; emptied before its timed run.
OUT_DIRS = {
    "marin_lab": "ours",
    "marin_lab-fineweb": "ours",
    "datatrove-ws": "datatrove",
    "datatrove-spacy": "datatrove",
    "rensa-step": "rensa-step",
    "rensa": "rensa",
}


def cpu_seconds() -> float:
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def run_ours(inp: str, work: str, seed: int, side: str = "marin_lab", **lsh) -> set[str]:
    out = os.path.join(work, OUT_DIRS[side])
    dedup_fuzzy(DedupConfig(input_path=inp, output_path=out, num_workers=1, seed=seed, **lsh))
    removed = set()
    for path in sorted(glob.glob(os.path.join(out, "removed", "*.jsonl.zst"))):
        removed |= {d["id"] for d in _records(path)}
    return removed


class RensaHasher(MinHasher):
    """`MinHasher` with rensa's signatures: the same words as 5-word shingle strings, then
    `RMinHash.digest_matrix_from_token_sets` (another draw of permutations, so other signatures)."""

    def signatures(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        from rensa import RMinHash

        token_sets = [shingle_strings(t) for t in texts]
        k = self.num_bands * self.rows_per_band
        sigs = np.asarray(RMinHash.digest_matrix_from_token_sets(token_sets, k, self.seed).to_rows(), dtype=np.uint32)
        return sigs.reshape(len(texts), k), np.array([bool(t) for t in token_sets], dtype=bool)

    def __repr__(self) -> str:
        return "Rensa" + super().__repr__()


def run_rensa_step(inp: str, work: str, seed: int) -> set[str]:
    """`dedup_fuzzy` itself with rensa as its signature engine (what adopting rensa would run)."""
    original = dedup_module.MinHasher
    dedup_module.MinHasher = RensaHasher
    try:
        return run_ours(inp, work, seed, side="rensa-step")
    finally:
        dedup_module.MinHasher = original


def run_rensa(inp: str, work: str, seed: int) -> set[str]:
    """rensa's signatures in a pipeline held in memory (see the module docstring); the removed ids."""
    from rensa import RMinHash

    config = DedupConfig(input_path=inp, output_path=work)
    out = os.path.join(work, OUT_DIRS["rensa"])
    paths = sorted(glob.glob(os.path.join(inp, "*.jsonl.gz")))
    shards = [list(read_documents(p)) for p in paths]
    docs = [d for shard in shards for d in shard]
    token_sets = [shingle_strings(d["text"]) for d in docs]
    k = config.num_bands * config.rows_per_band
    sigs = np.asarray(RMinHash.digest_matrix_from_token_sets(token_sets, k, seed).to_rows(), dtype=np.uint32)
    valid = np.array([bool(t) for t in token_sets])
    hasher = MinHasher(5, config.num_bands, config.rows_per_band)
    removed_rows = cluster_duplicates(hasher.band_keys(sigs), valid, sigs, config.threshold).removed
    removed, row = set(), 0
    for path, shard in zip(paths, shards, strict=True):
        drop = removed_rows[row : row + len(shard)]
        row += len(shard)
        name = os.path.basename(path)
        write_documents(os.path.join(out, "kept", name), (d for d, x in zip(shard, drop, strict=True) if not x))
        gone = [d["id"] for d, x in zip(shard, drop, strict=True) if x]
        stem = name.removesuffix(".jsonl.gz")
        write_documents(os.path.join(out, "removed", stem + ".jsonl.zst"), ({"id": i} for i in gone))
        removed |= set(gone)
    return removed


def _records(path: str):
    import json

    import zstandard

    with open(path, "rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f).read().decode()
    return [json.loads(line) for line in data.splitlines() if line]


class WhitespaceWords:
    """A datatrove word tokenizer that splits on whitespace (after its own text simplification)."""

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()


def run_datatrove(inp: str, work: str, shards: int, seed: int, words: str) -> set[str]:
    from datatrove.executor.local import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    out = os.path.join(work, "datatrove")
    cfg = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8, seed=seed, hash_config=HashConfig(precision=64))
    logs = os.path.join(out, "logs")

    def run(pipeline, tasks, name):
        # Each task adds its own log sink on sys.stderr (stats tables): keep them out of the table.
        with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):
            LocalPipelineExecutor(
                pipeline=pipeline, tasks=tasks, workers=1, logging_dir=os.path.join(logs, name), skip_completed=False
            ).run()

    signature = MinhashDedupSignature(output_folder=f"{out}/sigs", config=cfg)
    if words == "whitespace":
        signature.word_tokenizer = WhitespaceWords()
    run([JsonlReader(inp, glob_pattern="*.jsonl.gz"), signature], shards, "sigs")
    run(
        [MinhashDedupBuckets(input_folder=f"{out}/sigs", output_folder=f"{out}/buckets", config=cfg)],
        cfg.num_buckets,
        "buckets",
    )
    run([MinhashDedupCluster(input_folder=f"{out}/buckets", output_folder=f"{out}/remove", config=cfg)], 1, "cluster")
    # Kept and removed documents as gzip JSON lines, as marin_lab writes them for .jsonl.gz input.
    run(
        [
            JsonlReader(inp, glob_pattern="*.jsonl.gz"),
            MinhashDedupFilter(input_folder=f"{out}/remove", exclusion_writer=JsonlWriter(f"{out}/removed")),
            JsonlWriter(f"{out}/kept"),
        ],
        shards,
        "filter",
    )
    removed = set()
    for path in glob.glob(f"{out}/removed/*.jsonl.gz"):
        removed |= {d["id"] for d in read_documents(path)}
    return removed


def planted_similarities(inp: str) -> np.ndarray:
    """The exact 5-gram Jaccard similarity of every planted near duplicate to its original."""
    docs = [d for p in sorted(glob.glob(os.path.join(inp, "*.jsonl.gz"))) for d in read_documents(p)]
    by_id = {d["id"]: d["text"] for d in docs}
    sims = []
    for d in docs:
        if d["id"].startswith("dup"):
            a, b = shingle_set(d["text"]), shingle_set(by_id[d["id"].split("/", 1)[1]])
            sims.append(len(a & b) / len(a | b))
    return np.array(sims)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=3000, help="original documents")
    ap.add_argument("--dups", type=int, default=1000, help="near duplicates generated")
    ap.add_argument("--max-dup-rate", type=float, default=0.02, help="max word mutation rate of a near duplicate")
    ap.add_argument("--far-rate", type=float, default=0.6, help="mutation rate of non-duplicates")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--sides", default=",".join(SIDES), help="comma-separated subset of " + ",".join(SIDES + OPTIONAL_SIDES)
    )
    args = ap.parse_args(argv)
    sides = [s for s in args.sides.split(",") if s]
    if any(s.startswith("datatrove") for s in sides):
        from loguru import logger as datatrove_log  # datatrove logs every stage to stderr

        datatrove_log.remove()

    work = tempfile.mkdtemp(prefix="bench_dedup_")
    try:
        inp = os.path.join(work, "input")
        n, truth = build(inp, args.docs, args.dups, args.max_dup_rate, args.far_rate, args.shards, args.seed)
        runners = {
            "marin_lab": lambda seed: run_ours(inp, work, seed),
            "marin_lab-fineweb": lambda seed: run_ours(inp, work, seed, "marin_lab-fineweb", **FINEWEB_LSH),
            "datatrove-ws": lambda seed: run_datatrove(inp, work, args.shards, seed, "whitespace"),
            "datatrove-spacy": lambda seed: run_datatrove(inp, work, args.shards, seed, "spacy"),
            "rensa-step": lambda seed: run_rensa_step(inp, work, seed),
            "rensa": lambda seed: run_rensa(inp, work, seed),
        }
        walls = {s: [] for s in sides}
        cpus = {s: [] for s in sides}
        scores = {s: [] for s in sides}
        removed_counts = {s: [] for s in sides}
        loads = [os.getloadavg()[0]]
        # Repeat r uses permutation seed r + 1 on every side; the order of the sides rotates so
        # that none always runs first (or right after the slowest).
        for rep in range(args.repeats):
            seed = rep + 1
            for name in sides[rep % len(sides) :] + sides[: rep % len(sides)]:
                shutil.rmtree(os.path.join(work, OUT_DIRS[name]), ignore_errors=True)  # not timed
                w0, c0 = time.perf_counter(), cpu_seconds()
                rem = runners[name](seed)
                walls[name].append(time.perf_counter() - w0)
                cpus[name].append(cpu_seconds() - c0)
                scores[name].append(score(rem, truth))
                removed_counts[name].append(len(rem))
                loads.append(os.getloadavg()[0])
        sims = planted_similarities(inp)
        ours = DedupConfig(input_path=inp, output_path=work)
        print(
            f"fuzzy dedup, {n} documents ({len(truth)} near duplicates, mutation <= "
            f"{args.max_dup_rate:.0%}; {args.dups // 5} far copies at {args.far_rate:.0%}), "
            f"{args.shards} shards, 1 worker, 5-word shingles, 112 permutations; marin_lab: "
            f"{ours.num_bands} bands x {ours.rows_per_band} rows, threshold {ours.threshold}; "
            f"datatrove and marin_lab-fineweb: 14 bands x 8 rows, no threshold; python {sys.version.split()[0]}"
        )
        print(
            f"{args.repeats} repeats, sides alternating (rotating order), seed = repeat + 1; 1-min load "
            f"average {min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f}); "
            f"time: medians; quality: means over seeds"
        )
        print(
            f"{'side':<46}{'wall s':>8}{'docs/s':>8}{'CPU s':>8}{'docs/CPU-s':>11}{'removed':>8}"
            f"{'prec':>8}{'recall':>8}{'F1':>8}   F1 per seed"
        )
        rows = {}
        for name in sides:
            wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
            p, r, f1 = (statistics.mean(x[i] for x in scores[name]) for i in range(3))
            rows[name] = (n / wall, n / cpu, f1)
            per_seed = " ".join(f"{x[2]:.4f}" for x in scores[name])
            print(
                f"{LABELS[name]:<46}{wall:>8.2f}{n / wall:>8.0f}{cpu:>8.2f}{n / cpu:>11.0f}"
                f"{statistics.mean(removed_counts[name]):>8.0f}{p:>8.4f}{r:>8.4f}{f1:>8.4f}   {per_seed}"
            )
        print(
            f"ideal MinHash-LSH expected recall on the {sims.size} planted pairs (exact 5-gram Jaccard, "
            f"min {sims.min():.3f}, median {np.median(sims):.3f}): 14x8 {link_probability(sims, 14, 8).mean():.4f}, "
            f"{ours.num_bands}x{ours.rows_per_band} checked >= {ours.threshold} "
            f"{link_probability(sims, ours.num_bands, ours.rows_per_band, ours.threshold).mean():.4f}"
        )
        for mine in ("marin_lab", "marin_lab-fineweb"):
            peers = (("datatrove-ws", ">= 5x"), ("datatrove-spacy", ""), ("rensa-step", ">= 1x"), ("rensa", ""))
            for peer, goal in peers:
                if peer.startswith("rensa") and mine != "marin_lab":  # the same LSH on both sides
                    continue
                if mine not in rows or peer not in rows:
                    continue
                ours_f1 = [x[2] for x in scores[mine]]
                their_f1 = [x[2] for x in scores[peer]]
                ahead = sum(a >= b for a, b in zip(ours_f1, their_f1, strict=True))
                print(
                    f"{LABELS[mine]} / {LABELS[peer]}: docs/s {rows[mine][0] / rows[peer][0]:.2f}x wall, "
                    f"{rows[mine][1] / rows[peer][1]:.2f}x per CPU-second{' (goal ' + goal + ')' if goal else ''}; "
                    f"F1 {rows[mine][2]:.4f} vs {rows[peer][2]:.4f}, ours >= theirs on {ahead} of "
                    f"{len(ours_f1)} seeds"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
