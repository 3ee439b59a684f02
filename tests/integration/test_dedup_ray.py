"""Fuzzy dedup as the ray backend runs it: shards and LSH partitions as Ray tasks."""

from __future__ import annotations

import random

import pytest

from marin_lab.io.documents import write_documents
from marin_lab.processing.dedup import DedupConfig, dedup_fuzzy

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _corpus(root) -> None:
    rng = random.Random(21)
    vocab = sorted({"".join(rng.choice("abcdefghij") for _ in range(6)) for _ in range(2000)})
    docs = []
    for i in range(40):
        words = [rng.choice(vocab) for _ in range(150)]
        docs.append({"id": f"d{i}", "text": " ".join(words)})
        if i % 3 == 0:
            near = list(words)
            near[rng.randrange(150)] = rng.choice(vocab)
            docs.append({"id": f"d{i}-near", "text": " ".join(near)})
    rng.shuffle(docs)
    for s in range(3):
        write_documents(str(root / f"part-{s}.jsonl.zst"), docs[s::3])


def test_dedup_fuzzy_in_a_ray_task_matches_one_process(ray_cluster, tmp_path):
    import ray

    from tests import data_fixtures as fx  # importable by Ray workers

    (tmp_path / "in").mkdir()
    _corpus(tmp_path / "in")
    ray_cfg = DedupConfig(
        input_path=str(tmp_path / "in"), output_path=str(tmp_path / "ray"), num_workers=2, lsh_partitions=4
    )
    on_ray = ray.get(ray.remote(fx.dedup_fuzzy_in_ray_task).remote(ray_cfg))
    local = dedup_fuzzy(
        DedupConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "one"), num_workers=1, lsh_partitions=1)
    )
    assert on_ray == local and local["removed"] == {"fuzzy_duplicate": 14}
    for sub in ("data", "removed"):
        for path in sorted((tmp_path / "one" / sub).iterdir()):
            if not path.name.endswith(".done"):
                assert path.read_bytes() == (tmp_path / "ray" / sub / path.name).read_bytes()
