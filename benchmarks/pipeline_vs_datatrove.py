"""The data pipeline end to end: marin_lab's steps through the executor vs datatrove 0.10.1, HTML
pages in, tokens out, the same input, 2 workers on each side.

The corpus (plain HTML files, one page per file, `pages/NNNN/NNNNNNN.html`, `--size-mb` of them)
is built from text nobody here wrote, the cached real corpus of `marin_lab.processing.corpus`:
- Page skeletons: real pages of the Python 3.11 manual (Debian's python3.11-doc, PSF licence),
  everything outside their main `<div class="body">` kept (head, scripts, navigation bars, the
  sidebar with its table of contents, footer): 20-100 KB of boilerplate per page.
- English pages: that body replaced by a `<section>` of 8-40 `<p>` paragraphs (with their inline
  markup) drawn at random from all ~50k paragraphs of the manual, under headings drawn from its
  `<h1>`/`<h2>` titles. Two pages share a paragraph by chance, rarely a page's worth.
- Near duplicates (`--dup-share`, 8%): an earlier English page's paragraphs again, with 2% of the
  words (4+ letters between tags) replaced by words of the same corpus, in another skeleton
  (a re-crawled page). Each comes after its original, so the earliest copy is the one to keep.
- Other languages (`--foreign-share`, 5%): paragraphs of the Debian Reference in German, French,
  Spanish or Italian (debian-reference-{de,fr,es,it}, GPL-2+), one language per page.
- Junk (`--junk-share`, 5%): 150-400 consecutive entries of the manual's general index
  (`genindex-*.html`) as a list, the page's only content: a link farm to a text filter.

The pipeline on each side: HTML -> text, language filter (fastText lid.176, English >= 0.65),
heuristic quality filter, MinHash fuzzy dedup, tokenize (the GPT-2 BPE `tokenizer.json` of the
corpus cache, EOS `<|endoftext|>` after every document).
- marin_lab: `default_extract` (resiliparse, main content, 8 shards) -> `default_language_filter`
  (lid.176.ftz) -> `default_quality_filter` (Gopher quality and repetition rules and FineWeb's
  line rules, in one step) -> `default_fuzzy_dedup` (28 bands x 4 rows, checked >= 0.7) ->
  `default_tokenize` (the token cache, 1% validation split by id), each step `num_workers=2`,
  run by the executor with the local backend into a fresh store (hashing, locks, records, one
  output per step, all counted).
- datatrove: `LocalPipelineExecutor(tasks=2, workers=2)` per stage, its FineWeb recipe:
  [a 10-line reader of HTML files, `Trafilatura` (its HTML extractor; it has no resiliparse one;
  10 s per page before it gives up, not its 1 s, so that a busy machine does not drop pages),
  `LanguageFilter` (ft176, en >= 0.65), `GopherRepetitionFilter`, `GopherQualityFilter`,
  `FineWebQualityFilter`, `JsonlWriter`] -> MinHash signatures -> buckets (14 tasks) -> cluster
  (1 task) -> [`JsonlReader`, `MinhashDedupFilter`, `JsonlWriter` (the kept documents, as our
  dedup step writes them), `DocumentTokenizer` (no shuffling)].
Where the sides differ: the HTML extractor (resiliparse vs Trafilatura; `--extractor trafilatura`
gives marin_lab Trafilatura too, like for like), the language model file (lid.176.ftz, the
compressed model, on both sides: datatrove would download lid.176.bin, so its model loader is
pointed at the local file), MinHash LSH (ours 28x4 checked >= 0.7; datatrove 14x8, unchecked)
and its word split (ours: lower case and whitespace; datatrove: spaCy's English tokenizer), and
the quality rules: the same published thresholds, counted by each side's own code. datatrove's
Gopher rules count spaCy tokens, so punctuation and code symbols are words of their own and its
non-alphabetic-word rule removes pages with code in them that ours keeps; its FineWeb filter also
has a duplicate-character rule that ours lacks.

Measured per side (each side is one child process; the other side does not run meanwhile): wall
time; CPU seconds of the process tree (`os.wait4` on the side and, as the child subreaper, on the
fork servers both sides start, which outlive their parent: every descendant counted); documents
(input pages) per second and per CPU-second; peak RSS of the largest process (wait4's ru_maxrss)
and of the whole tree (psutil, sampled every 0.2 s); tokens; kept documents; where the time goes
(ours: each step's duration from its record; datatrove: each stage's wall time, and stage 1's
per-block time from its stats.json, wall time summed over its two tasks). Across sides: the
Jaccard overlap of the kept page ids, and per kind of page (English, near duplicate, other
language, junk) how many each side kept. The 1-minute load average is sampled every 0.2 s during
both runs.

Run: python benchmarks/pipeline_vs_datatrove.py [--size-mb 100 --extractor resiliparse]
Needs the `bench` extra (datatrove, spacy), `fasteners` (datatrove's LanguageFilter asks for it)
and the real corpus (`python -m marin_lab.processing.corpus`, cached offline afterwards). Linux
only (the subreaper).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import glob
import html
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from marin_lab.io.documents import list_shards, read_documents

KINDS = ("english", "near_duplicate", "foreign", "junk")
FOREIGN = ("de", "fr", "es", "it")
WORKERS = 2
_PARAGRAPH = re.compile(r"<p>(.*?)</p>", re.S)
_HEADING = re.compile(r"<h[12]>(.*?)<a class=\"headerlink\"", re.S)
_TAGS = re.compile(r"<[^>]+>")
_INDEX_ENTRY = re.compile(r"^\s*<li>(<a href=\"(?!https?:).*)$", re.M)
# Words between tags (4+ letters): what a near duplicate's edits touch, so the markup stays valid.
_EDITABLE = re.compile(r"(?<=[>\s])[A-Za-z]{4,}(?=[\s<.,;:])")


# --- the corpus ---------------------------------------------------------------------------------


def _words(fragment: str) -> int:
    return len(_TAGS.sub(" ", fragment).split())


def _paragraphs(pages: list[str], min_words: int = 12) -> list[str]:
    out = []
    for page in pages:
        text = Path(page).read_text(encoding="utf-8", errors="replace")
        # A paragraph on one line: the manuals wrap their source at 80 columns, which an
        # extractor that keeps newlines (Trafilatura) would turn into short, unpunctuated lines.
        out += [" ".join(p.split()) for p in _PARAGRAPH.findall(text) if _words(p) >= min_words]
    return out


def _skeletons(pages: list[str]) -> list[tuple[str, str]]:
    """(before, after) the main body of real manual pages: the boilerplate a page is wrapped in."""
    out = []
    for page in pages:
        text = Path(page).read_text(encoding="utf-8", errors="replace")
        start = text.find('<div class="body" role="main">')
        end = text.rfind('<div class="clearer"></div>')
        if 0 < start < end:
            head = start + len('<div class="body" role="main">')
            out.append((text[:head] + "\n", "\n" + text[end:]))
    return out


def _index_entries(manual_root: str) -> list[str]:
    """The entries of the manual's general index, in order: one link (and its see-alsos) each."""
    out = []
    for page in sorted(glob.glob(os.path.join(manual_root, "genindex-*.html"))):
        out += _INDEX_ENTRY.findall(Path(page).read_text(encoding="utf-8", errors="replace"))
    return out


def _edit(rng: random.Random, fragment: str, rate: float, vocab: list[str]) -> str:
    return _EDITABLE.sub(lambda m: rng.choice(vocab) if rng.random() < rate else m.group(0), fragment)


def _page(skeleton: tuple[str, str], title: str, body: list[str]) -> str:
    return f'{skeleton[0]}<section id="main">\n<h1>{title}</h1>\n' + "\n".join(body) + f"\n</section>{skeleton[1]}"


def build_corpus(root: str, size_mb: float, seed: int, shares: dict[str, float]) -> dict[str, str]:
    """Write HTML pages under `root` until they hold `size_mb`; returns page id -> kind."""
    from marin_lab.processing.corpus import fetch_corpus

    corpus = fetch_corpus()
    rng = random.Random(seed)
    manual = sorted(glob.glob(os.path.join(corpus.python_doc_html, "**", "*.html"), recursive=True))
    english = _paragraphs(manual)
    headings = [_TAGS.sub("", h).strip() for p in manual[:200] for h in _HEADING.findall(Path(p).read_text())]
    headings = [h for h in headings if h] or ["Documentation"]
    skeletons = _skeletons(rng.sample(manual, min(60, len(manual))))
    foreign = {
        lang: _paragraphs(sorted(glob.glob(os.path.join(corpus.debian_reference_html, f"*.{lang}.html"))), 8)
        for lang in FOREIGN
    }
    index = _index_entries(corpus.python_doc_html)
    vocab = sorted({w for p in english[:2000] for w in _TAGS.sub(" ", p).split() if w.isalpha() and len(w) >= 4})
    kinds: dict[str, str] = {}
    bodies: list[tuple[str, list[str]]] = []  # English pages written so far: (title, paragraphs)
    total, n = 0, 0
    limit = size_mb * 1e6
    while total < limit:
        r = rng.random()
        if r < shares["near_duplicate"] and bodies:
            kind = "near_duplicate"
            title, paras = rng.choice(bodies)
            body = [_edit(rng, p, 0.02, vocab) for p in paras]
        elif r < shares["near_duplicate"] + shares["foreign"]:
            kind = "foreign"
            pool = foreign[rng.choice(FOREIGN)]
            title, body = rng.choice(headings), [f"<p>{p}</p>" for p in rng.sample(pool, rng.randint(8, 30))]
        elif r < shares["near_duplicate"] + shares["foreign"] + shares["junk"]:
            kind = "junk"
            at, k = rng.randrange(len(index) - 400), rng.randint(150, 400)
            title, body = "Index", ["<ul>", *(f"<li>{e}</li>" for e in index[at : at + k]), "</ul>"]
        else:
            kind = "english"
            title = rng.choice(headings)
            paras = []
            for i in range(rng.randint(8, 40)):
                if i and i % 6 == 0:
                    paras.append(f"<h2>{rng.choice(headings)}</h2>")
                paras.append(f"<p>{rng.choice(english)}</p>")
            body = paras
            bodies.append((title, paras))
        page = _page(rng.choice(skeletons), html.escape(title), body)
        rel = f"pages/{n // 1000:04d}/{n:07d}.html"
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = page.encode("utf-8")
        with open(path, "wb") as f:
            f.write(data)
        kinds[rel] = kind
        total += len(data)
        n += 1
    return kinds


# --- marin_lab ----------------------------------------------------------------------------------


def run_ours(inp: str, work: str, extractor: str) -> dict:
    from experiments.defaults import (
        default_extract,
        default_fuzzy_dedup,
        default_language_filter,
        default_quality_filter,
        default_tokenize,
    )
    from marin_lab.execution import Executor, ExecutorMainConfig
    from marin_lab.processing.corpus import fetch_corpus

    corpus = fetch_corpus()
    docs = default_extract("bench", inp, method=extractor, num_workers=WORKERS)
    english = default_language_filter("bench", docs, corpus.lid_model, num_workers=WORKERS)
    quality = default_quality_filter("bench", english, num_workers=WORKERS)
    dedup = default_fuzzy_dedup("bench", quality, num_workers=WORKERS)
    tokens = default_tokenize("bench", dedup, corpus.gpt2_tokenizer, num_workers=WORKERS)
    store = os.path.join(work, "store")
    Executor(ExecutorMainConfig(prefix=store, backend="local")).run([tokens])
    return {"store": store}


def _records(store: str) -> dict[str, dict]:
    out = {}
    for info in glob.glob(os.path.join(store, "*", "*", ".executor_info")):
        record = json.loads(Path(info).read_text())
        out[record["name"]] = {**record, "output_path": os.path.dirname(info)}
    return out


def ours_outcome(store: str) -> dict:
    records = _records(store)

    def step(prefix: str) -> dict:
        return next(r for name, r in records.items() if name.startswith(prefix))

    kept = os.path.join(step("dedup/")["output_path"], "data")
    ids = {d["id"] for p in list_shards(kept) for d in read_documents(p)}
    ledger = json.loads(Path(step("tokenized/")["output_path"], "ledger.json").read_text())
    tokens = sum(s["tokens"] for s in ledger["splits"].values())
    prefixes = {
        "extract": "documents/",
        "language": "classified/",
        "quality": "quality/",
        "dedup": "dedup/",
        "tokenize": "tokenized/",
    }
    return {"kept_ids": ids, "tokens": tokens, "stages": {k: _duration(step(p)) for k, p in prefixes.items()}}


def _duration(record: dict) -> float:
    return float(record["timings"]["duration_s"])


# --- datatrove ----------------------------------------------------------------------------------


def run_datatrove(inp: str, work: str) -> dict:
    import multiprocessing.util

    import multiprocess.util
    from datatrove.executor.local import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import (
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
        LanguageFilter,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.readers.base import BaseDiskReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.lid import FT176LID

    from marin_lab.processing.corpus import fetch_corpus

    corpus = fetch_corpus()
    # multiprocess 0.70.19 (datatrove's process pools) calls fork_exec with another Python's
    # arguments; this interpreter's own multiprocessing has the matching call (with the path as bytes).
    multiprocess.util.spawnv_passfds = lambda path, args, fds: multiprocessing.util.spawnv_passfds(
        os.fsencode(path), args, fds
    )

    class HtmlFileReader(BaseDiskReader):
        """One document per HTML file; its id is the file's path below the input folder."""

        name = "HTML files"

        def read_file(self, filepath: str):
            with self.data_folder.open(filepath, "rt", encoding="utf-8", errors="replace") as f:
                doc = self.get_document_from_dict({"text": f.read(), "id": filepath}, filepath, 0)
            if doc:
                yield doc

    class LocalLID(FT176LID):
        """fastText's lid.176 from the corpus cache (datatrove would download lid.176.bin)."""

        @property
        def model(self):
            if self._model is None:
                from fasttext.FastText import _FastText

                self._model = _FastText(corpus.lid_model)
            return self._model

    language = LanguageFilter(languages=["en"], language_threshold=0.65)
    language.model = LocalLID(["en"])
    out = os.path.join(work, "datatrove")
    cfg = MinhashConfig()  # FineWeb's: 5-grams, 14 buckets x 8 hashes
    stages: dict[str, float] = {}

    def run(name: str, pipeline: list, tasks: int) -> None:
        t0 = time.perf_counter()
        LocalPipelineExecutor(
            pipeline=pipeline,
            tasks=tasks,
            workers=WORKERS,
            logging_dir=os.path.join(out, "logs", name),
            skip_completed=False,
        ).run()
        stages[name] = time.perf_counter() - t0

    run(
        "extract+filters",
        [
            HtmlFileReader(inp, glob_pattern="**/*.html"),
            # 10 s per page, not its 1 s: a loaded machine would drop pages.
            Trafilatura(favour_precision=True, timeout=10.0),
            language,
            GopherRepetitionFilter(),
            GopherQualityFilter(),
            FineWebQualityFilter(),
            JsonlWriter(f"{out}/filtered"),
        ],
        WORKERS,
    )
    run(
        "minhash signatures",
        [JsonlReader(f"{out}/filtered"), MinhashDedupSignature(output_folder=f"{out}/sigs", config=cfg)],
        WORKERS,
    )
    run(
        "minhash buckets",
        [MinhashDedupBuckets(input_folder=f"{out}/sigs", output_folder=f"{out}/buckets", config=cfg)],
        cfg.num_buckets,
    )
    run(
        "minhash cluster",
        [MinhashDedupCluster(input_folder=f"{out}/buckets", output_folder=f"{out}/remove", config=cfg)],
        1,
    )
    run(
        "dedup filter+tokenize",
        [
            JsonlReader(f"{out}/filtered"),
            MinhashDedupFilter(input_folder=f"{out}/remove"),
            JsonlWriter(f"{out}/kept"),
            DocumentTokenizer(
                output_folder=f"{out}/tokens",
                tokenizer_name_or_path=corpus.gpt2_tokenizer,
                eos_token="<|endoftext|>",
                shuffle_documents=False,
            ),
        ],
        WORKERS,
    )
    return {"out": out, "stages": stages}


def datatrove_outcome(out: str, stages: dict[str, float]) -> dict:
    ids = {d["id"] for p in sorted(glob.glob(os.path.join(out, "kept", "*.jsonl.gz"))) for d in read_documents(p)}
    # Token files: 2 bytes per token (GPT-2's vocabulary fits 16 bits).
    tokens = sum(os.path.getsize(p) // 2 for p in glob.glob(os.path.join(out, "tokens", "*.ds")))
    blocks: dict[str, float] = {}
    stats = json.loads(Path(out, "logs", "extract+filters", "stats.json").read_text())
    for block in stats:
        if isinstance(block.get("time_stats"), dict):
            name = block["name"].split(": ", 1)[-1].encode("ascii", "ignore").decode().strip()
            blocks[name] = float(block["time_stats"]["total"])
    return {"kept_ids": ids, "tokens": tokens, "stages": stages, "blocks": blocks}


# --- measurement --------------------------------------------------------------------------------


def measure(argv: list[str], log: str) -> dict:
    """Run one side as a child process; its wall time, CPU, peak RSS and the load while it ran."""
    peak_tree, loads = 0, []
    done = threading.Event()

    def poll(proc: psutil.Process) -> None:
        nonlocal peak_tree
        while not done.is_set():
            with contextlib.suppress(psutil.Error):
                procs = [proc, *proc.children(recursive=True)]
                rss = 0
                for p in procs:
                    with contextlib.suppress(psutil.Error):
                        rss += p.memory_info().rss
                peak_tree = max(peak_tree, rss)
            loads.append(os.getloadavg()[0])
            done.wait(0.2)

    cpu, maxrss = 0.0, 0
    with open(log, "w") as sink:
        t0 = time.perf_counter()
        child = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
        sampler = threading.Thread(target=poll, args=(psutil.Process(child.pid),), daemon=True)
        sampler.start()
        # Both sides start workers from a fork server that outlives its parent; as the subreaper
        # this process reaps it too, so its CPU (and its reaped workers') is counted.
        while True:
            try:
                pid, status, usage = os.wait4(-1, 0)
            except ChildProcessError:
                break
            cpu += usage.ru_utime + usage.ru_stime
            maxrss = max(maxrss, usage.ru_maxrss)
            if pid == child.pid:
                wall = time.perf_counter() - t0
                child.returncode = os.waitstatus_to_exitcode(status)
                done.set()
        sampler.join()
    if child.returncode != 0:
        tail = Path(log).read_text(errors="replace")[-4000:]
        raise RuntimeError(f"{' '.join(argv)} exited with {child.returncode}; the end of {log}:\n{tail}")
    return {
        "wall": wall,
        "cpu": cpu,
        "maxrss_mb": maxrss / 1024,
        "tree_rss_mb": peak_tree / 2**20,
        "loads": loads,
    }


def side_main(side: str, inp: str, work: str, extractor: str, result: str) -> int:
    from loguru import logger as datatrove_log

    datatrove_log.remove()  # datatrove logs every block of every task to stderr
    outcome = run_ours(inp, work, extractor) if side == "ours" else run_datatrove(inp, work)
    Path(result).write_text(json.dumps(outcome))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=100, help="HTML input size, MB")
    ap.add_argument("--extractor", default="resiliparse", choices=("resiliparse", "trafilatura"), help="ours")
    ap.add_argument("--dup-share", type=float, default=0.08)
    ap.add_argument("--foreign-share", type=float, default=0.05)
    ap.add_argument("--junk-share", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--order", default="ours,datatrove", help="which side runs first")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (printed)")
    ap.add_argument("--side", choices=("ours", "datatrove"), help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        return side_main(args.side, args.input, args.work, args.extractor, args.result)

    # PR_SET_CHILD_SUBREAPER: orphaned descendants of a side become this process's children.
    if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed; this benchmark needs Linux")
    work = tempfile.mkdtemp(prefix="bench_pipeline_")
    try:
        inp = os.path.join(work, "input")
        t0 = time.perf_counter()
        shares = {"near_duplicate": args.dup_share, "foreign": args.foreign_share, "junk": args.junk_share}
        kinds = build_corpus(inp, args.size_mb, args.seed, shares)
        size = sum(os.path.getsize(os.path.join(inp, k)) for k in kinds)
        counts = {k: sum(v == k for v in kinds.values()) for k in KINDS}
        n = len(kinds)
        print(
            f"input: {n} HTML pages, {size / 1e6:.0f} MB ({', '.join(f'{counts[k]} {k}' for k in KINDS)}), "
            f"built in {time.perf_counter() - t0:.0f} s; {WORKERS} workers per side; python {sys.version.split()[0]}",
            flush=True,
        )
        results = {}
        for side in args.order.split(","):
            side_work = os.path.join(work, side)
            os.makedirs(side_work)
            result = os.path.join(work, f"{side}.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--input", inp, "--work", side_work]
            cmd += ["--extractor", args.extractor, "--result", result]
            m = measure(cmd, os.path.join(work, f"{side}.log"))
            raw = json.loads(Path(result).read_text())
            outcome = ours_outcome(raw["store"]) if side == "ours" else datatrove_outcome(raw["out"], raw["stages"])
            results[side] = {**m, **outcome}
            print(f"{side}: {m['wall']:.1f} s wall, {m['cpu']:.1f} CPU-s", flush=True)
        report(results, kinds, n, args)
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _split(label: str, stages: dict[str, float], wall: float, rest: str) -> None:
    print(f"where the time goes, {label}:")
    for name, sec in [*stages.items(), (rest, wall - sum(stages.values()))]:
        print(f"  {name:<24}{sec:>8.1f}  {sec / wall:>5.0%}")


def report(results: dict, kinds: dict[str, str], n: int, args: argparse.Namespace) -> None:
    ours, theirs = results["ours"], results["datatrove"]
    loads = ours["loads"] + theirs["loads"]
    print(
        f"1-min load average during the runs: min {min(loads):.2f}, median {statistics.median(loads):.2f}, "
        f"max {max(loads):.2f}; HTML extractor: ours {args.extractor}, datatrove Trafilatura"
    )
    rows = (
        ("wall s", lambda r: r["wall"], "{:.1f}"),
        ("CPU s (process tree)", lambda r: r["cpu"], "{:.1f}"),
        ("pages/s", lambda r: n / r["wall"], "{:.1f}"),
        ("pages/CPU-s", lambda r: n / r["cpu"], "{:.2f}"),
        ("peak RSS, largest process MB", lambda r: r["maxrss_mb"], "{:.0f}"),
        ("peak RSS, process tree MB", lambda r: r["tree_rss_mb"], "{:.0f}"),
        ("kept documents", lambda r: len(r["kept_ids"]), "{:.0f}"),
        ("tokens", lambda r: r["tokens"], "{:.0f}"),
    )
    print(f"{'':<30}{'marin_lab':>14}{'datatrove':>14}{'ours/theirs':>13}")
    for label, get, fmt in rows:
        a, b = get(ours), get(theirs)
        print(f"{label:<30}{fmt.format(a):>14}{fmt.format(b):>14}{(a / b if b else float('nan')):>12.2f}x")
    a, b = ours["kept_ids"], theirs["kept_ids"]
    print(
        f"kept-page overlap: Jaccard {len(a & b) / max(1, len(a | b)):.4f} "
        f"({len(a & b)} both, {len(a - b)} only ours, {len(b - a)} only datatrove)"
    )
    print(f"kept per kind of page{'':<7}{'ours':>8}{'theirs':>8}")
    for k in KINDS:
        total = sum(v == k for v in kinds.values())
        print(f"  {k:<26}{sum(kinds.get(i) == k for i in a):>8}{sum(kinds.get(i) == k for i in b):>8}   of {total}")
    _split("marin_lab (each step's duration from its record, s)", ours["stages"], ours["wall"], "executor, start-up")
    _split("datatrove (each stage's wall time, s)", theirs["stages"], theirs["wall"], "start-up")
    blocks = ", ".join(f"{k} {v:.1f}" for k, v in theirs["blocks"].items())
    print(f"  its stage 1 per block (time summed over both tasks, s): {blocks}")
    print(
        f"end to end, ours/datatrove: {theirs['wall'] / ours['wall']:.2f}x faster by wall, "
        f"{theirs['cpu'] / ours['cpu']:.2f}x pages per CPU-second (goal >= 3x)"
    )


if __name__ == "__main__":
    sys.exit(main())
