"""Classifier filter throughput: marin_lab's scoring + decisions vs raw fastText `predict`.

On the same in-memory documents, one core:
- raw fastText: `model.predict([text.replace("\\n", " ") ...], k=2)` in batches of 512 (the least
  a caller must do: fastText rejects newlines);
- marin_lab: `decide_documents` -- the per-shard core of `classify_filter`: whitespace folding,
  batched predict, score of the label, threshold, metadata / removal record per document.
Ratio = ours / raw, measured in CPU seconds (both sides are single-threaded; on a shared machine
wall time mostly measures the neighbours), runs alternating (goal >= 0.9x). For information, the
whole `classify_filter` step (reading and writing compressed shards) is timed too. Models:
fastText's `lid.176.ftz` (from the corpus cache, `python -m marin_lab.processing.corpus`) when
present, and a quality classifier trained here. Documents: the Python standard library's source
files (real text, PSF licence), 5,000 characters each at most.

Run: python benchmarks/quality_filter_throughput.py [--docs 5000 --repeats 5]
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
from pathlib import Path

from marin_lab.io.documents import write_documents
from marin_lab.processing.classify import (
    BATCH,
    ClassifyFilterConfig,
    FastTextScorer,
    TrainClassifierConfig,
    classify_filter,
    decide_documents,
    load_fasttext,
    train_quality_classifier,
)

logging.disable(logging.WARNING)
LID = os.path.expanduser(os.environ.get("MARIN_LAB_CORPUS", "~/.cache/marin_lab/corpus")) + "/models/lid.176.ftz"


def documents(n: int, seed: int) -> list[dict]:
    stdlib = sysconfig.get_paths()["stdlib"]
    docs = []
    for path in sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)):
        if "site-packages" in path:
            continue
        try:
            text = Path(path).read_text(encoding="utf-8")[:5_000]
        except (UnicodeDecodeError, OSError):
            continue
        if len(text.split()) >= 50:
            docs.append({"id": os.path.relpath(path, stdlib), "text": text})
    random.Random(seed).shuffle(docs)
    while len(docs) < n:  # the stdlib has ~2k such files; repeat for larger runs
        docs = docs + [{**d, "id": d["id"] + f"#{len(docs)}"} for d in docs]
    return docs[:n]


def raw_predict(model, texts: list[str]) -> int:
    n = 0
    for start in range(0, len(texts), BATCH):
        labels, _ = model.predict([t.replace("\n", " ") for t in texts[start : start + BATCH]], k=2)
        n += len(labels)
    return n


def cpu_time(fn) -> float:
    # CPU seconds of this process: both sides are single-threaded, and on a shared machine wall
    # time mostly measures the neighbours.
    t = time.process_time()
    fn()
    return time.process_time() - t


def paired(fn_a, fn_b, repeats: int) -> tuple[float, float, float]:
    """Median CPU time of a and b, and the median of the per-repeat ratios a/b; run in
    alternating order so drifts in machine load hit both alike."""
    ta, tb = [], []
    for i in range(repeats):
        if i % 2:
            tb.append(cpu_time(fn_b))
            ta.append(cpu_time(fn_a))
        else:
            ta.append(cpu_time(fn_a))
            tb.append(cpu_time(fn_b))
    return statistics.median(ta), statistics.median(tb), statistics.median(a / b for a, b in zip(ta, tb, strict=False))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench_quality_")
    try:
        docs = documents(args.docs, 0)
        texts = [d["text"] for d in docs]
        models = []
        if os.path.exists(LID):
            models.append(("lid.176.ftz", LID, "__label__en", 0.65))
        # A quality classifier: real files vs the same words shuffled (word salad).
        rng = random.Random(1)
        salad = []
        for d in docs[:1000]:
            words = d["text"].split()
            rng.shuffle(words)
            salad.append({"id": "salad/" + d["id"], "text": " ".join(words)})
        write_documents(f"{work}/pos/0.jsonl", docs[:1000])
        write_documents(f"{work}/neg/0.jsonl", salad)
        trained = train_quality_classifier(
            TrainClassifierConfig(
                positive_paths=(f"{work}/pos",), negative_paths=(f"{work}/neg",), output_path=f"{work}/model"
            )
        )
        models.append(("quality (trained)", trained["model"], "__label__hq", 0.5))
        write_documents(f"{work}/in/0.jsonl.zst", docs)

        print(
            f"classifier filter throughput, {len(docs)} documents (<= 5,000 chars), docs per CPU-second "
            f"of one core, median of {args.repeats} alternating runs; python {sys.version.split()[0]}"
        )
        print(f"{'model':<20}{'raw predict docs/s':>20}{'marin_lab docs/s':>18}{'ratio':>8}{'step docs/s':>13}")
        for name, path, label, threshold in models:
            model = load_fasttext(path)
            cfg = ClassifyFilterConfig(
                input_path=f"{work}/in",
                output_path=f"{work}/out",
                model_path=path,
                label=label,
                threshold=threshold,
                max_chars=None,
            )
            scorer = FastTextScorer(model, label, cfg.top_k, max_chars=None)
            raw_predict(model, texts[:200])  # warm up
            t_raw, t_ours, ratio = paired(
                lambda model=model: raw_predict(model, texts),
                lambda scorer=scorer, cfg=cfg: decide_documents(docs, scorer, cfg),
                args.repeats,
            )

            def step(cfg: ClassifyFilterConfig = cfg) -> None:
                shutil.rmtree(f"{work}/out", ignore_errors=True)
                classify_filter(cfg)

            t_step = statistics.median(cpu_time(step) for _ in range(max(1, args.repeats // 2)))
            n = len(docs)
            print(f"{name:<20}{n / t_raw:>20.0f}{n / t_ours:>18.0f}{ratio:>7.2f}x{n / t_step:>13.0f}")
        print(
            "ratio = median over runs of marin_lab / raw predict throughput (goal >= 0.9x); step = "
            "classify_filter end to end (read, score, write .jsonl.zst + removal records), for information"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
