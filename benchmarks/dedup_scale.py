"""Fuzzy dedup at corpus scale: docs/s, peak memory per process and F1 at 100k and 1M documents.

Question: does `dedup_fuzzy` stay within a fixed memory budget per process as the corpus grows,
with the LSH stage partitioned across tasks, and does its quality hold?

Documents are built deterministically from real text nobody here wrote: the Python 3.11 manual
and the Debian Reference in five languages (the corpus cache, `marin_lab.processing.corpus`),
extracted with our extract step and cut into pieces of `--piece-words` words. A document is
`--pieces` pieces drawn at random from the whole pool (~100k pieces), so two independent
documents share almost nothing. Then near duplicates are planted: a share `--dup-share` of the
documents are copies of an earlier document with 0.5-3% of their words substituted, deleted
or inserted (ground truth: these should be removed), and `--far-share` are copies mutated at 60%
(these should be kept). Shards are written as .jsonl.zst.

The step runs as users run it: on the local backend (`--workers` processes, the calling one
included) or, with `--ray`, inside a Ray task so that its shards and LSH partitions are Ray tasks.
A psutil thread samples the resident memory of this process and all its descendants every 0.2 s;
the table gives the peak of each process that did work (the step's process and its workers).

    python benchmarks/dedup_scale.py --docs 100000 [--workers 2] [--partitions 16] [--ray]
    python benchmarks/dedup_scale.py --docs 1000000 --shards 64 --partitions 16
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time

import psutil

BUDGET_GIB = 4.0  # per process at 1M documents, the documented budget (docs/dedup_and_quality.md)


def pieces_of_corpus(piece_words: int, work: str) -> list[str]:
    """Every `piece_words`-word piece of the real corpus's text, deduplicated, in a fixed order."""
    from marin_lab.io.documents import list_shards, read_documents
    from marin_lab.processing.corpus import fetch_corpus
    from marin_lab.processing.extract import ExtractConfig, extract

    corpus = fetch_corpus()
    texts = []
    for name, src in (("python", corpus.python_doc_html), ("debian", corpus.debian_reference_html)):
        out = os.path.join(work, "extract", name)
        extract(ExtractConfig(input_path=src, output_path=out, num_shards=8, num_workers=2))
        texts += [d["text"] for s in list_shards(os.path.join(out, "data")) for d in read_documents(s)]
    seen, pieces = set(), []
    for text in texts:
        words = text.split()
        for i in range(0, len(words) - piece_words + 1, piece_words):
            piece = " ".join(words[i : i + piece_words])
            if piece not in seen:
                seen.add(piece)
                pieces.append(piece)
    return pieces


def mutate(rng: random.Random, text: str, rate: float, vocab: list[str]) -> str:
    out = []
    for w in text.split():
        r = rng.random()
        if r < rate / 3:
            continue
        if r < 2 * rate / 3:
            out.append(rng.choice(vocab))
            continue
        out.append(w)
        if r < rate:
            out.append(rng.choice(vocab))
    return " ".join(out)


def build(
    root: str, n: int, shards: int, pieces: list[str], per_doc: int, dup_share: float, far_share: float, seed: int
) -> dict[str, float]:
    """Write `n` documents in `shards` .jsonl.zst shards; returns the planted near duplicates' ids
    with the exact 5-gram Jaccard similarity to their original."""
    import zstandard

    from marin_lab.processing.minhash import words_of

    def shingles(text: str) -> set[tuple[str, ...]]:
        w = words_of(text)
        return {tuple(w[i : i + 5]) for i in range(max(1, len(w) - 4))}

    rng = random.Random(seed)
    vocab = sorted({w for p in pieces[:2000] for w in p.split()})
    originals: list[int] = []  # indices of documents that are not copies
    texts: dict[int, str] = {}  # originals' texts, kept only while they may still be copied
    truth: dict[str, float] = {}
    os.makedirs(root, exist_ok=True)
    per_shard = -(-n // shards)
    cctx = zstandard.ZstdCompressor(level=3)
    for s in range(shards):
        lines = []
        for i in range(s * per_shard, min(n, (s + 1) * per_shard)):
            r = rng.random()
            if originals and r < dup_share + far_share:
                # recent: bounded memory
                src = originals[rng.randrange(max(0, len(originals) - 50_000), len(originals))]
                if r < dup_share:
                    doc_id, text = f"dup-{i:07d}-of-{src:07d}", mutate(rng, texts[src], rng.uniform(0.005, 0.03), vocab)
                    a, b = shingles(text), shingles(texts[src])
                    truth[doc_id] = len(a & b) / len(a | b)
                else:
                    doc_id, text = f"far-{i:07d}-of-{src:07d}", mutate(rng, texts[src], 0.6, vocab)
            else:
                doc_id, text = f"doc-{i:07d}", " ".join(rng.choice(pieces) for _ in range(per_doc))
                originals.append(i)
                texts[i] = text
                if len(originals) > 50_000:
                    texts.pop(originals[-50_001], None)
            lines.append(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False))
        with open(os.path.join(root, f"part-{s:05d}.jsonl.zst"), "wb") as f:
            f.write(cctx.compress(("\n".join(lines) + "\n").encode()))
    return truth


class MemoryWatch:
    """Peak resident memory of this process and every descendant, sampled every 0.2 s."""

    def __init__(self) -> None:
        self.peak: dict[int, tuple[int, str]] = {}
        self.cpu_start: dict[int, float] = {}  # CPU seconds of each process when first seen
        self.cpu_last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            for p in [me, *me.children(recursive=True)]:
                try:
                    rss = p.memory_info().rss
                    name = " ".join(p.cmdline()[:3])[:60] or p.name()
                    t = p.cpu_times()
                    cpu = t.user + t.system
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                # A process first seen now started during the step (its CPU counts from 0),
                # unless it was there at the first sample.
                self.cpu_start.setdefault(p.pid, cpu if self._first else 0.0)
                self.cpu_last[p.pid] = cpu
                if rss > self.peak.get(p.pid, (0, ""))[0]:
                    self.peak[p.pid] = (rss, name)
            self._first = False
            self._stop.wait(0.2)

    def cpu_seconds(self) -> float:
        """CPU seconds of all watched processes during the watch (processes that exited between
        two samples lose at most 0.2 s each)."""
        return sum(self.cpu_last[pid] - self.cpu_start[pid] for pid in self.cpu_last)

    def __enter__(self):
        self._first = True
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def removed_ids(out: str) -> set[str]:
    import zstandard

    ids = set()
    for path in glob.glob(os.path.join(out, "removed", "*.jsonl.zst")):
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read().decode()
        ids |= {json.loads(line)["id"] for line in data.splitlines() if line}
    return ids


def run_step(config, use_ray: bool):
    from marin_lab.processing.dedup import dedup_fuzzy

    if not use_ray:
        return dedup_fuzzy(config)
    import ray

    return ray.get(ray.remote(num_cpus=1)(dedup_fuzzy).remote(config))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=0, help="default: one per ~16k documents, at least 4")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--pieces", type=int, default=6, help="pieces per document")
    ap.add_argument("--piece-words", type=int, default=40)
    ap.add_argument("--dup-share", type=float, default=0.1)
    ap.add_argument("--far-share", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ray", action="store_true", help="run the step inside a Ray task")
    ap.add_argument(
        "--fineweb",
        action="store_true",
        help="FineWeb's LSH (14 bands x 8 rows, no threshold) instead of the step's default",
    )
    ap.add_argument("--work", default="", help="folder for inputs and outputs (default: a temp folder, removed)")
    args = ap.parse_args()

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from marin_lab.processing.dedup import DedupConfig
    from marin_lab.processing.minhash import link_probability
    from marin_lab.processing.shards import close_idle_pool

    shards = args.shards or max(4, args.docs // 16_000)
    work = args.work or tempfile.mkdtemp(prefix="bench_dedup_scale_")
    try:
        t = time.perf_counter()
        pieces = pieces_of_corpus(args.piece_words, work)
        inp = os.path.join(work, f"input-{args.docs}")
        shutil.rmtree(inp, ignore_errors=True)
        truth = build(inp, args.docs, shards, pieces, args.pieces, args.dup_share, args.far_share, args.seed)
        build_s = time.perf_counter() - t
        size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(inp, "*")))
        out = os.path.join(work, f"out-{args.docs}")
        shutil.rmtree(out, ignore_errors=True)
        lsh = {"num_bands": 14, "rows_per_band": 8, "threshold": None} if args.fineweb else {}
        config = DedupConfig(
            input_path=inp, output_path=out, num_workers=args.workers, lsh_partitions=args.partitions, **lsh
        )
        if args.ray:
            import ray

            t = time.perf_counter()
            ray.init(address="local", num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
            print(f"ray.init: {time.perf_counter() - t:.1f} s (not counted below)")
        load_start = os.getloadavg()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        before = psutil.Process().memory_info().rss
        with MemoryWatch() as watch:
            t = time.perf_counter()
            result = run_step(config, args.ray)
            wall = time.perf_counter() - t
            close_idle_pool()  # its worker's CPU time counts only once it has exited
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (
            r1.ru_utime
            + r1.ru_stime
            - r0.ru_utime
            - r0.ru_stime
            + c1.ru_utime
            + c1.ru_stime
            - c0.ru_utime
            - c0.ru_stime
        )
        if args.ray:  # Ray's workers are not our waited-for children: sum what psutil saw
            cpu = watch.cpu_seconds()
            ray.shutdown()
        load_end = os.getloadavg()
        removed = removed_ids(out)
        tp = len(removed & truth.keys())
        sims = list(truth.values())
        ideal = (
            float(link_probability(sims, config.num_bands, config.rows_per_band, config.threshold).mean())
            if sims
            else 1.0
        )
        ideal_fineweb = float(link_probability(sims, 14, 8).mean()) if sims else 1.0
        precision = tp / len(removed) if removed else 1.0
        recall = tp / len(truth) if truth else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        print(
            f"fuzzy dedup at scale: {args.docs:,} documents ({size / 2**20:,.0f} MiB .jsonl.zst in {shards} shards, "
            f"{len(pieces):,} real-text pieces of {args.piece_words} words, {args.pieces} per document), "
            f"{len(truth):,} planted near duplicates (0.5-3% word edits), "
            f"{int(args.far_share * args.docs):,} far copies (60%); built in {build_s:.0f} s"
        )
        print(
            f"step: {'Ray tasks' if args.ray else 'local processes'}, num_workers={args.workers} (the calling "
            f"process included), lsh_partitions={args.partitions}, LSH {config.num_bands} bands x "
            f"{config.rows_per_band} rows, threshold {config.threshold}; python {sys.version.split()[0]}, "
            f"{os.cpu_count()} cores; load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the "
            f"end (15-min {load_end[2]:.1f})"
        )
        print(
            f"wall {wall:,.1f} s = {args.docs / wall:,.0f} docs/s; CPU {cpu:,.1f} s (all processes) = "
            f"{args.docs / cpu:,.0f} docs per CPU-second"
            + (" (psutil samples of every process, Ray's own daemons included)" if args.ray else "")
        )
        print(
            f"removed {len(removed):,} (result: {result['removed']}), candidate pairs "
            f"{result['candidate_pairs']:,}; precision {precision:.4f} recall {recall:.4f} F1 {f1:.4f}"
        )
        print(
            f"ideal MinHash-LSH expected recall on the planted pairs (exact 5-gram Jaccard, "
            f"median {statistics.median(sims) if sims else 1:.3f}): this LSH {ideal:.4f}, "
            f"FineWeb's 14 x 8 {ideal_fineweb:.4f}"
        )
        print(
            f"peak resident memory per process (those above 50 MiB); this process held {before / 2**20:,.0f} MiB "
            f"of benchmark data (text pieces, ground truth) before the step started:"
        )
        for pid, (rss, name) in sorted(watch.peak.items(), key=lambda kv: -kv[1][0]):
            if rss > 50 * 2**20:
                print(f"  {rss / 2**20:>8,.0f} MiB  pid {pid}  {name}")
        worst = max(rss for rss, _ in watch.peak.values()) / 2**30
        print(f"largest: {worst:.2f} GiB (budget {BUDGET_GIB:.1f} GiB per process at 1M documents)")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
