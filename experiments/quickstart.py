"""Quickstart: a small real DAG through the executor on local Ray.

Question: what are the most common words in the licence texts of the packages this project
installs? (Real text nobody on this project wrote, present on every machine after `make venv`.)
Three steps: collect the documents, count words per document, write a report.

    python experiments/quickstart.py               # run (again: nothing is redone)
    python experiments/quickstart.py --dry_run true
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import json
import os
import re
import sys

from marin_lab.execution import ExecutorStep, executor_main, output_path_of, this_output_path, versioned
from marin_lab.io.fs import atomic_write_text, read_json, write_json


@dataclasses.dataclass(frozen=True)
class CollectConfig:
    source_glob: str
    output_path: str
    max_docs: int = 200


def collect(cfg: CollectConfig) -> dict:
    """Copy matching text files into one JSON list of {id, text} documents."""
    docs = []
    for path in sorted(glob.glob(cfg.source_glob))[: cfg.max_docs]:
        with open(path, encoding="utf-8", errors="replace") as f:
            docs.append({"id": os.path.relpath(path, sys.prefix), "text": f.read()})
    write_json(f"{cfg.output_path}/docs.json", docs)
    return {"documents": len(docs)}


@dataclasses.dataclass(frozen=True)
class CountConfig:
    input_path: str
    output_path: str
    lowercase: bool = True


def count_words(cfg: CountConfig) -> dict:
    docs = read_json(f"{cfg.input_path}/docs.json")
    counts = collections.Counter()
    for doc in docs:
        text = doc["text"].lower() if cfg.lowercase else doc["text"]
        counts.update(re.findall(r"[a-zA-Z]{3,}", text))
    write_json(f"{cfg.output_path}/counts.json", dict(counts.most_common()))
    return {"distinct_words": len(counts), "total_words": sum(counts.values())}


@dataclasses.dataclass(frozen=True)
class ReportConfig:
    input_path: str
    output_path: str
    top: int = 10


def report(cfg: ReportConfig) -> dict:
    counts = read_json(f"{cfg.input_path}/counts.json")
    top = list(counts.items())[: cfg.top]
    lines = [f"{w:>16} {n}" for w, n in top]
    atomic_write_text(f"{cfg.output_path}/report.txt", "\n".join(lines) + "\n")
    return {"top": top}


docs = ExecutorStep(
    name="quickstart/licences",
    fn=collect,
    config=CollectConfig(
        source_glob=versioned(os.path.join(sys.prefix, "lib", "python3.11", "site-packages", "*", "LICENSE*")),
        output_path=this_output_path(),
    ),
    description="Licence texts of the installed packages",
)
counts = ExecutorStep(
    name="quickstart/word_counts",
    fn=count_words,
    config=CountConfig(input_path=output_path_of(docs), output_path=this_output_path(), lowercase=versioned(True)),
)
top_words = ExecutorStep(
    name="quickstart/report",
    fn=report,
    config=ReportConfig(input_path=output_path_of(counts), output_path=this_output_path(), top=versioned(10)),
)

if __name__ == "__main__":
    executor_main(steps=[top_words], description="Quickstart: word counts over real licence texts")
