"""Small data the data-step tests generate: HTML pages, document shards, a tiny tokenizer.

Words come from a fixed list and a seeded generator, so every run builds the same bytes.
"""

from __future__ import annotations

import random
from pathlib import Path

from marin_lab.io.documents import write_documents

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no what "
    "river stone window garden music paper engine market winter letter forest bridge silver ocean"
).split()


def sentence(rng: random.Random, n: int = 12) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def paragraph(rng: random.Random, sentences: int = 4) -> str:
    return " ".join(sentence(rng, rng.randint(6, 16)) for _ in range(sentences))


def make_html_site(root: Path, n: int = 12, seed: int = 0) -> list[str]:
    """`n` HTML pages (with nav, title, paragraphs) in nested folders; returns relative paths."""
    rng = random.Random(seed)
    rels = []
    for i in range(n):
        rel = f"section{i % 3}/page-{i:03d}.html"
        body = "".join(f"<p>{paragraph(rng)}</p>\n" for _ in range(3))
        html = (
            f"<!doctype html><html><head><meta charset='utf-8'><title>Page {i} title</title></head>"
            f"<body><nav><a href='/'>Home</a> | <a href='/x'>Index</a></nav>"
            f"<main><h1>Heading {i}</h1>\n{body}</main>"
            f"<footer>Copyright footer</footer></body></html>"
        )
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(html, encoding="utf-8")
        rels.append(rel)
    return sorted(rels)


def make_documents(n: int, seed: int = 0, prefix: str = "doc") -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "id": f"{prefix}-{i:05d}",
            "text": "\n\n".join(paragraph(rng) for _ in range(rng.randint(1, 3))),
            "source": "fixture",
        }
        for i in range(n)
    ]


def make_document_shards(root: Path, shards: int = 3, per_shard: int = 40, ext: str = "jsonl.zst") -> list[dict]:
    """Document shards `part-00000.{ext}`... under `root`; returns all documents in order."""
    docs = make_documents(shards * per_shard)
    root.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        write_documents(str(root / f"part-{s:05d}.{ext}"), docs[s * per_shard : (s + 1) * per_shard])
    return docs


# Task functions for map_shards tests on Ray: Ray workers import them by module path, which a
# test module (imported by pytest under its bare name) does not offer.
def pid_of(_: object) -> int:
    import os

    return os.getpid()


def fail_on_two(x: int) -> int:
    if x == 2:
        raise ValueError("two")
    return x + 1


def map_pids_in_ray_task(n: int) -> tuple[int, list[int]]:
    """Run inside a Ray task: (this task's pid, the pids of the tasks map_shards ran)."""
    import os

    from marin_lab.processing.shards import map_shards

    return os.getpid(), map_shards(pid_of, list(range(n)), num_workers=2, desc="pids")


def fail_in_ray_task() -> None:
    from marin_lab.processing.shards import map_shards

    map_shards(fail_on_two, [0, 1, 2, 3], num_workers=2, desc="ray-test")


def tokenize_in_ray_task(config):
    from marin_lab.processing.tokenize import tokenize

    return tokenize(config)


def dedup_fuzzy_in_ray_task(config):
    from marin_lab.processing.dedup import dedup_fuzzy

    return dedup_fuzzy(config)


def map_pids_on_a_full_cluster(n: int) -> list[int]:
    """Run inside a Ray task that holds every CPU of the cluster: map_shards must still finish."""
    from marin_lab.processing.shards import map_shards

    return map_shards(pid_of, list(range(n)), num_workers=3, desc="full")
