"""Fuzzy dedup: marin_lab's `dedup_fuzzy` vs datatrove 0.10.1's MinHash pipeline, side by side.

Same parameters on both sides (5-word shingles, 14 bands x 8 rows, seed 1), one worker each, the
whole pipeline timed (signatures, buckets/clustering, filtering, writing). The corpus is real
text nobody here wrote -- the Python standard library's source files (PSF licence) of this
interpreter -- plus near duplicates made by mutating a sample of them (word substitutions,
deletions and insertions at a known rate), written after all originals so both pipelines keep
the original. Ground truth: a removal is correct when the removed document is a generated near
duplicate (mutation <= `--max-dup-rate`); documents mutated much more (`--far-rate`) are not
duplicates and removing them counts against precision.

Run: python benchmarks/dedup_vs_datatrove.py [--docs 3000 --dups 1000 --repeats 3]
Needs the `bench` extra (datatrove, spacy, orjson).
"""

from __future__ import annotations

import argparse
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

import numpy as np

from marin_lab.io.documents import read_documents, write_documents
from marin_lab.processing.dedup import DedupConfig, dedup_fuzzy
from marin_lab.processing.minhash import MinHasher, cluster_duplicates, words_of

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
            text = open(path, encoding="utf-8").read()[:5_000]
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
    shingles = lambda t: {tuple(w[i : i + 5]) for w in [words_of(t)] for i in range(len(w) - 4)}
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


def score(removed: set[str], truth: set[str]) -> tuple[float, float, float]:
    tp = len(removed & truth)
    p = tp / len(removed) if removed else 1.0
    r = tp / len(truth) if truth else 1.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f1


STAGE_TIMES: dict[str, list[float]] = {"marin_lab": [], "datatrove": []}


def time_our_signatures(inp: str, seed: int) -> None:
    """Our signature phase alone (read + MinHash + band keys per shard), as the step runs it."""
    hasher = MinHasher(seed=seed)
    t = time.perf_counter()
    for path in sorted(glob.glob(os.path.join(inp, "*.jsonl.gz"))):
        sigs, _ = hasher.signatures([d["text"] for d in read_documents(path)])
        hasher.band_keys(sigs)
    STAGE_TIMES["marin_lab"].append(time.perf_counter() - t)


def run_ours(inp: str, work: str, seed: int) -> tuple[float, set[str]]:
    out = os.path.join(work, "ours")
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    dedup_fuzzy(DedupConfig(input_path=inp, output_path=out, num_workers=1, seed=seed))
    dt = time.perf_counter() - t
    time_our_signatures(inp, seed)
    removed = set()
    for path in sorted(glob.glob(os.path.join(out, "removed", "*.jsonl.zst"))):
        removed |= _ids(path)
    return dt, removed


def _ids(path: str) -> set[str]:
    import json

    import zstandard

    with open(path, "rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f).read().decode()
    return {json.loads(line)["id"] for line in data.splitlines() if line}


def run_datatrove(inp: str, work: str, shards: int, seed: int) -> tuple[float, set[str]]:
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
    shutil.rmtree(out, ignore_errors=True)
    cfg = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8, seed=seed,
                        hash_config=HashConfig(precision=64))
    logs = os.path.join(out, "logs")

    def run(pipeline, tasks, name):
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1,
                              logging_dir=os.path.join(logs, name), skip_completed=False).run()

    t = time.perf_counter()
    run([JsonlReader(inp, glob_pattern="*.jsonl.gz"),
         MinhashDedupSignature(output_folder=f"{out}/sigs", config=cfg)], shards, "sigs")
    STAGE_TIMES["datatrove"].append(time.perf_counter() - t)
    run([MinhashDedupBuckets(input_folder=f"{out}/sigs", output_folder=f"{out}/buckets", config=cfg)],
        cfg.num_buckets, "buckets")
    run([MinhashDedupCluster(input_folder=f"{out}/buckets", output_folder=f"{out}/remove", config=cfg)],
        1, "cluster")
    run([JsonlReader(inp, glob_pattern="*.jsonl.gz"),
         MinhashDedupFilter(input_folder=f"{out}/remove",
                            exclusion_writer=JsonlWriter(f"{out}/removed", compression=None)),
         JsonlWriter(f"{out}/kept", compression=None)], shards, "filter")
    dt = time.perf_counter() - t
    removed = set()
    for path in glob.glob(f"{out}/removed/*.jsonl"):
        removed |= {d["id"] for d in read_documents(path)}
    return dt, removed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=3000, help="original documents")
    ap.add_argument("--dups", type=int, default=1000, help="near duplicates generated")
    ap.add_argument("--max-dup-rate", type=float, default=0.02, help="max word mutation rate of a near duplicate")
    ap.add_argument("--far-rate", type=float, default=0.6, help="mutation rate of non-duplicates")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    work = tempfile.mkdtemp(prefix="bench_dedup_")
    try:
        inp = os.path.join(work, "input")
        n, truth = build(inp, args.docs, args.dups, args.max_dup_rate, args.far_rate, args.shards, args.seed)
        times = {"marin_lab": [], "datatrove": []}
        scores = {"marin_lab": [], "datatrove": []}
        removed_counts = {"marin_lab": [], "datatrove": []}
        # Each repeat draws other permutations (seed = repeat + 1) on both sides: which pairs near
        # the LSH threshold are found is luck of the draw, so quality is averaged over draws.
        for rep in range(args.repeats):
            seed = rep + 1
            for name, fn in (("marin_lab", lambda: run_ours(inp, work, seed)),
                             ("datatrove", lambda: run_datatrove(inp, work, args.shards, seed))):
                dt, rem = fn()
                times[name].append(dt)
                scores[name].append(score(rem, truth))
                removed_counts[name].append(len(rem))
        print(f"fuzzy dedup, {n} documents ({len(truth)} near duplicates, mutation <= "
              f"{args.max_dup_rate:.0%}; {args.dups // 5} far copies at {args.far_rate:.0%}), "
              f"{args.shards} shards, 1 worker; time: median of {args.repeats}, quality: mean over "
              f"seeds 1..{args.repeats}; python {sys.version.split()[0]}")
        print(f"{'pipeline':<12}{'seconds':>9}{'docs/s':>9}{'removed':>9}{'precision':>11}{'recall':>8}{'F1':>7}"
              f"   F1 per seed")
        rows = {}
        for name in ("marin_lab", "datatrove"):
            med = statistics.median(times[name])
            p, r, f1 = (statistics.mean(x[i] for x in scores[name]) for i in range(3))
            rows[name] = (n / med, f1)
            per_seed = " ".join(f"{x[2]:.4f}" for x in scores[name])
            removed = statistics.mean(removed_counts[name])
            print(f"{name:<12}{med:>9.2f}{n / med:>9.0f}{removed:>9.0f}{p:>11.4f}{r:>8.4f}{f1:>7.4f}   {per_seed}")
        sig = {k: statistics.median(v) for k, v in STAGE_TIMES.items()}
        print(f"signature stage alone (read + MinHash): marin_lab {n / sig['marin_lab']:.0f} docs/s, "
              f"datatrove {n / sig['datatrove']:.0f} docs/s, ratio {sig['datatrove'] / sig['marin_lab']:.2f}x")
        speed = rows["marin_lab"][0] / rows["datatrove"][0]
        print(f"ratio marin_lab/datatrove: docs/s {speed:.2f}x (goal >= 3x), "
              f"F1 {rows['marin_lab'][1]:.4f} vs {rows['datatrove'][1]:.4f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
