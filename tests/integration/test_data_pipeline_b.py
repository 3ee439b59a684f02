"""Data steps B on the real corpus, through the executor: dedup, language ID, heuristics, classifier.

Input: the Debian Reference's English and German chapters (real HTML, GPL-2+) plus, made here,
two byte-identical copies of English chapters (exact duplicates) and four copies with about one
word in fifty changed (near duplicates). The language filter uses fastText's real `lid.176.ftz`.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import pytest

from experiments.defaults import (
    default_classify_filter,
    default_download,
    default_exact_dedup,
    default_extract,
    default_fuzzy_dedup,
    default_language_filter,
    default_quality_filter,
    default_train_quality_classifier,
)
from marin_lab.execution import Executor, ExecutorMainConfig
from marin_lab.io.documents import list_shards, read_documents, write_documents
from marin_lab.processing.corpus import LID_MODEL, fetch_corpus

pytestmark = pytest.mark.slow

EXACT_COPIES = ("ch01", "ch02")
NEAR_COPIES = ("ch03", "ch04", "ch05", "ch06")


def perturb(html: str) -> str:
    """Change every 50th word of the visible text (a near duplicate, like a re-crawled page)."""
    count = 0

    def swap(m: re.Match) -> str:
        nonlocal count
        count += 1
        return m.group(0) if count % 50 else "zzzedit"

    # Only words between tags, so the markup (and thus what extract sees as text) stays valid.
    return re.sub(r"(?<=[>\s])[A-Za-z]{4,}(?=[\s<.,])", swap, html)


def read_info(path: str) -> dict:
    return json.loads(Path(path, ".executor_info").read_text())


def accounted(result: dict) -> bool:
    return result["kept"] + result["removed_total"] + result["skipped_bad"] == result["input_records"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    corpus = fetch_corpus()
    src = tmp_path_factory.mktemp("src")
    pages = sorted(p for p in os.listdir(corpus.debian_reference_html) if p.endswith((".en.html", ".de.html")))
    for page in pages:
        shutil.copy(os.path.join(corpus.debian_reference_html, page), src / page)
    for ch in EXACT_COPIES:
        shutil.copy(src / f"{ch}.en.html", src / f"zz-copy-{ch}.en.html")
    for ch in NEAR_COPIES:
        html = (src / f"{ch}.en.html").read_text(encoding="utf-8")
        (src / f"zz-near-{ch}.en.html").write_text(perturb(html), encoding="utf-8")
    return corpus, src, pages


def test_dedup_language_quality_and_classifier_through_executor(source, tmp_path):
    corpus, src, pages = source
    n_en = sum(p.endswith(".en.html") for p in pages)
    n_de = len(pages) - n_en

    raw = default_download("debref-b", source=str(src), num_workers=1)
    docs = default_extract("debref-b", raw, num_shards=3, num_workers=1)
    exact = default_exact_dedup("debref-b", docs, num_workers=1)
    fuzzy = default_fuzzy_dedup("debref-b", exact, num_workers=1)
    english = default_language_filter("debref-b-en", fuzzy, LID_MODEL, num_workers=1)  # fetched by the step
    quality = default_quality_filter("debref-b", english, num_workers=1)
    # Negative examples for the classifier: the same words in random order.
    rng = random.Random(0)
    salad = []
    for i in range(40):
        words = [w for p in pages[:6] for w in Path(os.path.join(src, p)).read_text(encoding="utf-8").split()[:400]]
        rng.shuffle(words)
        salad.append({"id": f"salad-{i}", "text": " ".join(words[:300])})
    write_documents(str(tmp_path / "salad" / "0.jsonl"), salad)
    classifier = default_train_quality_classifier("debref-b", quality, str(tmp_path / "salad"), epoch=10)
    scored = default_classify_filter("debref-b", quality, classifier, threshold=0.5, num_workers=1)

    executor = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local", max_concurrent=2))
    report = executor.run([scored])
    assert len(report.executed) == 8

    store = tmp_path / "store"
    infos = {}
    for step_dir in store.glob("*/*"):
        if (step_dir / ".executor_info").exists():
            info = read_info(str(step_dir))
            infos[info["name"]] = (info, str(step_dir))
    assert all(info["status"] == "SUCCESS" for info, _ in infos.values())

    ex, ex_dir = infos["dedup-exact/debref-b"]
    assert ex["result"]["removed"] == {"exact_duplicate": len(EXACT_COPIES)} and accounted(ex["result"])
    removed = [
        json.loads(line)
        for p in sorted((store / os.path.relpath(ex_dir, store) / "removed").iterdir())
        for line in read_bytes_zst(p).splitlines()
        if line
    ]
    assert sorted((r["id"], r["duplicate_of"]) for r in removed) == sorted(
        (f"zz-copy-{ch}.en.html", f"{ch}.en.html") for ch in EXACT_COPIES
    )

    fz, fz_dir = infos["dedup/debref-b"]
    assert fz["result"]["removed"] == {"fuzzy_duplicate": len(NEAR_COPIES)} and accounted(fz["result"])
    recs = [
        json.loads(line)
        for p in sorted((store / os.path.relpath(fz_dir, store) / "removed").iterdir())
        for line in read_bytes_zst(p).splitlines()
        if line
    ]
    assert sorted((r["id"], r["duplicate_of"]) for r in recs) == sorted(
        (f"zz-near-{ch}.en.html", f"{ch}.en.html") for ch in NEAR_COPIES
    )
    assert all(0.5 < r["similarity"] < 1.0 for r in recs)

    lang, lang_dir = infos["classified/debref-b-en"]
    assert lang["result"]["removed"] == {"language": n_de} and lang["result"]["kept"] == n_en
    kept = [d for s in list_shards(os.path.join(lang_dir, "data")) for d in read_documents(s)]
    assert all(d["id"].endswith(".en.html") and d["metadata"]["language"]["score"] >= 0.65 for d in kept)

    q, _ = infos["quality/debref-b"]
    assert accounted(q["result"]) and q["result"]["input_records"] == n_en
    clf, _ = infos["classifiers/debref-b"]
    assert clf["result"]["validation"]["accuracy"] >= 0.8
    final, _ = infos["classified/debref-b"]
    assert accounted(final["result"]) and final["result"]["input_records"] == q["result"]["kept"]

    # Everything succeeded: a second run reuses all of it.
    again = Executor(ExecutorMainConfig(prefix=str(store), backend="local")).run([scored])
    assert len(again.executed) == 0


def read_bytes_zst(path) -> str:
    import zstandard

    with open(path, "rb") as f:
        return zstandard.ZstdDecompressor().stream_reader(f).read().decode()
