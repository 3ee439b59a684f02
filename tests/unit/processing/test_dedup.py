"""Exact and fuzzy dedup: the MinHash pieces, the global clustering, and the steps end to end."""

from __future__ import annotations

import gzip
import json
import os
import random

import numpy as np
import pytest
import zstandard

from marin_lab.io.documents import BadRecordError, encode_documents, read_documents, read_lines, write_documents
from marin_lab.processing.dedup import DedupConfig, DedupError, dedup_exact, dedup_fuzzy
from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.minhash import (
    MinHasher,
    cluster_duplicates,
    estimated_similarity,
    link_probability,
    shingle_hashes,
    words_of,
)

VOCAB_RNG = random.Random(1234)
VOCAB = sorted(
    {
        "".join(VOCAB_RNG.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(VOCAB_RNG.randint(3, 9)))
        for _ in range(3000)
    }
)


def random_text(rng: random.Random, words: int = 200) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(words))


def mutate(rng: random.Random, text: str, fraction: float) -> str:
    """Replace about `fraction` of the words (a near duplicate)."""
    words = text.split()
    for i in rng.sample(range(len(words)), int(len(words) * fraction)):
        words[i] = rng.choice(VOCAB)
    return " ".join(words)


def jaccard(a: str, b: str, n: int = 5) -> float:
    def shingles(t):
        w = words_of(t)
        return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}

    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb)


# ------------------------------------------------------------------ MinHash pieces


def test_words_are_normalised_like_fineweb():
    assert words_of("Hello, WORLD! It's 2024-11-05.") == ["hello", "world", "it", "s", "0000", "00", "00"]
    assert words_of("Ａｂｃ\u3001déjà-vu «quoted» snake_case") == ["abc", "déjà", "vu", "quoted", "snake", "case"]


def test_shingle_hashes_are_order_sensitive_and_short_texts_are_one_shingle():
    a = shingle_hashes(["a", "b", "c", "d", "e"], 5)
    b = shingle_hashes(["e", "d", "c", "b", "a"], 5)
    assert a.shape == (1,) and a[0] != b[0]
    assert shingle_hashes(["a", "b"], 5).shape == (1,)
    assert shingle_hashes(list("abcdefg"), 5).shape == (3,)
    assert shingle_hashes([], 5).size == 0


def test_signature_is_deterministic_and_seeded():
    text = random_text(random.Random(0))
    a, b = MinHasher(seed=1), MinHasher(seed=1)
    assert np.array_equal(a.signature(text), b.signature(text))
    assert a.signature(text).shape == (112,) and a.signature(text).dtype == np.uint32
    assert not np.array_equal(a.signature(text), MinHasher(seed=2).signature(text))
    assert a.signature("  ... !!! ") is None


def test_signature_of_a_text_does_not_depend_on_its_batch(monkeypatch):
    from marin_lab.processing import minhash

    rng = random.Random(5)
    texts = [random_text(rng, rng.randint(0, 300)) for _ in range(40)]
    texts += [
        "",
        "  ... ",
        "one",
        "two words",
        "Ünïcode\u2028line\u3000space\x85next\x1csep word",
        "a lone \ud800 surrogate is still text",
        "x" * 5000 + " long word",
    ]
    h = MinHasher()
    alone = [h.signature(t) for t in texts]
    monkeypatch.setattr(minhash, "_BATCH_BYTES", 700)  # many batches, words cut across slices
    sigs, valid = h.signatures(texts)
    for i, sig in enumerate(alone):
        assert valid[i] == (sig is not None), texts[i][:40]
        if sig is not None:
            assert np.array_equal(sigs[i], sig), texts[i][:40]
    # Words found in the bytes are exactly the whitespace-split words of the normalised text.
    for t in texts:
        words, _ = minhash._word_hashes(minhash._encode_batch([t]))
        assert words.size == len(words_of(t))
        assert np.array_equal(shingle_hashes(words_of(t), 5), minhash.shingle_hashes(words_of(t), 5))


def reference_signature(text: str, ngram_size: int, num_permutations: int, seed: int) -> list[int] | None:
    """MinHash of one text written out one value at a time with Python integers, from the
    definition in the minhash module's docstring: what the vectorised kernel must equal bit for bit
    (a changed kernel changes every dedup_fuzzy output, so it must come with a new step identity)."""
    mask = 2**64 - 1

    def fmix(x: int) -> int:  # murmur3's 64-bit finaliser
        x ^= x >> 33
        x = (x * 0xFF51AFD7ED558CCD) & mask
        x ^= x >> 33
        x = (x * 0xC4CEB9FE1A85EC53) & mask
        return x ^ (x >> 33)

    def word_hash(word: str) -> int:  # the polynomial of the UTF-8 bytes, then its length mixed in
        data = word.encode("utf-8", "surrogatepass")
        h = 0
        for byte in data:
            h = (h * 0xD6E8FEB86659FD93 + byte) & mask
        return fmix(h ^ ((len(data) * 0xA0761D6478BD642F) & mask))

    hashes = [word_hash(w) for w in words_of(text)]
    if not hashes:
        return None
    windows = [hashes[i : i + ngram_size] for i in range(len(hashes) - ngram_size + 1)] or [hashes]
    shingles = []
    for window in windows:  # an order-sensitive fold of the window's word hashes
        h = window[0]
        for x in window[1:]:
            h = (h * 0x9E3779B97F4A7C15 + x) & mask
        shingles.append(fmix(h))
    rng = np.random.default_rng(seed)  # the permutations: odd multipliers a, offsets b
    a = [int(x) * 2 + 1 for x in rng.integers(0, 2**63, size=num_permutations, dtype=np.uint64)]
    b = [int(x) for x in rng.integers(0, 2**63, size=num_permutations, dtype=np.uint64)]
    return [min(((ai * s + bi) & mask) >> 32 for s in shingles) for ai, bi in zip(a, b, strict=True)]


def reference_texts() -> list[str]:
    rng = random.Random(11)
    texts = [random_text(rng, rng.randint(1, 400)) for _ in range(6)]
    return texts + [
        "",
        "  ... !!! ",
        "one",
        "two words",
        "Hello, WORLD! It's 2024-11-05.",
        "Ünïcode\u2028line\u3000space\x85next\x1csep word déjà-vu «quoted»",
        "a lone \ud800 surrogate is still text",
        "x" * 3000 + " long word",
    ]


@pytest.mark.parametrize("kernel", ["installed", "numpy passes"])
@pytest.mark.parametrize("ngram_size, bands, rows, seed", [(5, 28, 4, 1), (3, 14, 8, 7)])
def test_signatures_equal_a_reference_written_one_value_at_a_time(monkeypatch, kernel, ngram_size, bands, rows, seed):
    """`installed`: the compiled loop where numba is installed (the numpy passes where it is not)."""
    from marin_lab.processing import minhash

    if kernel == "numpy passes":
        monkeypatch.setattr(minhash, "_KERNEL_JIT", False)
    texts = reference_texts()
    expected = [reference_signature(t, ngram_size, bands * rows, seed) for t in texts]
    hasher = MinHasher(ngram_size, bands, rows, seed)
    # One batch; one batch with documents cut by the permutation chunks; many batches (words cut too).
    for batch_bytes, chunk in ((1 << 20, 8192), (1 << 20, 64), (900, 64)):
        monkeypatch.setattr(minhash, "_BATCH_BYTES", batch_bytes)
        monkeypatch.setattr(minhash, "_MIN_CHUNK", chunk)
        sigs, valid = hasher.signatures(texts)
        for i, want in enumerate(expected):
            alone = hasher.signature(texts[i])
            assert bool(valid[i]) == (want is not None) == (alone is not None), texts[i][:40]
            if want is not None:
                assert sigs[i].tolist() == want, texts[i][:40]
                assert alone.tolist() == want, texts[i][:40]


def test_the_compiled_loop_as_plain_python_equals_the_reference():
    """`_signature_loop` is what numba compiles; run as Python it must give the reference's values
    (checked here even where numba is not installed)."""
    from marin_lab.processing import minhash

    texts = [t[:400] for t in reference_texts()] + ["a b c", "a b c d e"]
    hasher = MinHasher(5, 4, 2, seed=3)
    out = np.empty((len(texts), 8), dtype=np.uint32)
    valid = np.empty(len(texts), dtype=bool)
    with np.errstate(over="ignore"):  # numpy scalars warn on the wrap-around the kernel relies on
        minhash._signature_loop(minhash._encode_batch(texts), 5, hasher._a, hasher._b, out, valid)
    for i, t in enumerate(texts):
        want = reference_signature(t, 5, 8, 3)
        assert bool(valid[i]) == (want is not None), t[:40]
        if want is not None:
            assert out[i].tolist() == want, t[:40]


@pytest.mark.parametrize("fraction", [0.02, 0.1, 0.3])
def test_estimated_similarity_tracks_jaccard(fraction):
    rng = random.Random(7)
    base = random_text(rng, 400)
    other = mutate(rng, base, fraction)
    m = MinHasher()
    est = float(estimated_similarity(m.signature(base), m.signature(other)))
    # 112 permutations: the standard error of the estimate is at most ~0.05.
    assert abs(est - jaccard(base, other)) < 0.15


def test_link_probability_without_a_check_is_the_banding_curve():
    j = np.linspace(0, 1, 21)
    curve = 1 - (1 - j**8) ** 14
    assert np.allclose(link_probability(j, 14, 8), curve)
    # A threshold of 0 rejects nothing: the band-by-band count must give the same curve.
    assert np.allclose(link_probability(j, 14, 8, 0.0), curve)


@pytest.mark.parametrize("bands, rows, threshold", [(14, 8, None), (28, 4, 0.7), (14, 8, 0.75)])
@pytest.mark.parametrize("jaccard", [0.6, 0.7, 0.8])
def test_link_probability_matches_clustering_of_simulated_pairs(bands, rows, threshold, jaccard):
    """Pairs whose signatures agree slot by slot with probability `jaccard`, clustered by the real
    code: the share linked is what `link_probability` predicts (within 4.5 standard errors)."""
    rng = np.random.default_rng(int(jaccard * 100) + bands)
    pairs, k = 3000, bands * rows
    a = rng.integers(0, 2**32, size=(pairs, k), dtype=np.uint32)
    b = np.where(rng.random((pairs, k)) < jaccard, a, rng.integers(0, 2**32, size=(pairs, k), dtype=np.uint32))
    sigs = np.stack([a, b], axis=1).reshape(2 * pairs, k)  # pair i: documents 2i and 2i + 1
    hasher = MinHasher(num_bands=bands, rows_per_band=rows)
    clusters = cluster_duplicates(hasher.band_keys(sigs), np.ones(2 * pairs, dtype=bool), sigs, threshold)
    linked = np.mean(clusters.representative[1::2] == np.arange(0, 2 * pairs, 2))
    p = float(link_probability(jaccard, bands, rows, threshold)[0])
    assert abs(linked - p) <= 4.5 * np.sqrt(p * (1 - p) / pairs) + 1e-3, (linked, p)


def test_default_lsh_cuts_at_its_threshold_where_fineweb_leaves_it_to_luck():
    config = DedupConfig(input_path="in", output_path="out")
    ours = link_probability([0.5, 0.6, 0.8], config.num_bands, config.rows_per_band, config.threshold)
    fineweb = link_probability([0.5, 0.6, 0.8], 14, 8)
    assert config.num_bands * config.rows_per_band == 112  # same signatures as FineWeb's 14 x 8
    assert ours[2] > 0.99 and fineweb[2] < 0.93  # found whatever the band draws
    assert np.all(ours[:2] < fineweb[:2])  # dissimilar pairs that share a band by chance are rejected


def test_cluster_links_transitively_and_keeps_the_first_document():
    # 0-1 share band 0, 1-2 share band 1, 3 shares nothing, 4 is invalid but has 0's keys.
    keys = np.array([[10, 20], [11, 21], [12, 21], [13, 23], [11, 20]], dtype=np.uint64)
    keys[1, 0] = 10
    valid = np.array([True, True, True, True, False])
    clusters = cluster_duplicates(keys, valid)
    assert clusters.representative.tolist() == [0, 0, 0, 3, 4]
    assert clusters.removed.tolist() == [False, True, True, False, False]


def test_cluster_threshold_rejects_dissimilar_candidates():
    sigs = np.array([[1, 2, 3, 4], [1, 2, 3, 9], [1, 8, 8, 8]], dtype=np.uint32)
    keys = np.array([[5], [5], [5]], dtype=np.uint64)  # all in one bucket
    valid = np.ones(3, dtype=bool)
    loose = cluster_duplicates(keys, valid, sigs)
    strict = cluster_duplicates(keys, valid, sigs, threshold=0.7)
    assert loose.representative.tolist() == [0, 0, 0]
    assert strict.representative.tolist() == [0, 0, 2]
    assert strict.similarity[1] == pytest.approx(0.75)
    assert strict.candidate_pairs == 2 and strict.linked_pairs == 1


# ------------------------------------------------------------------ corpus fixture


def make_corpus(root, rng_seed: int = 3):
    """Three shards; returns (expected fuzzy-removed ids, their originals)."""
    rng = random.Random(rng_seed)
    originals = [{"id": f"orig-{i:03d}", "text": random_text(rng, 150)} for i in range(60)]
    near = {}
    shards = [[], [], []]
    for i, doc in enumerate(originals):
        shards[i % 3].append(doc)
    # Near duplicates of the first 15 originals land in a later shard (cross-shard clustering).
    for i in range(15):
        dup = {"id": f"near-{i:03d}", "text": mutate(rng, originals[i]["text"], 0.01)}
        shards[(i % 3 + 1) % 3 if i % 3 < 2 else 2].append(dup)
        near[dup["id"]] = originals[i]["id"]
    names = ["a.jsonl.zst", "b.jsonl.gz", "c.jsonl"]
    for name, docs in zip(names, shards, strict=True):
        write_documents(str(root / name), docs)
    return near


def read_dir(path) -> dict[str, dict]:
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".done"):
            continue
        for doc in read_documents(os.path.join(path, name)):
            out[doc["id"]] = doc
    return out


def removed_records(out) -> list[dict]:
    recs = []
    folder = out / "removed"
    for name in sorted(os.listdir(folder)):
        with open(folder / name, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read().decode()
        recs.extend(json.loads(line) for line in data.splitlines() if line)
    return recs


def test_dedup_fuzzy_removes_near_duplicates_across_shards(tmp_path):
    (tmp_path / "in").mkdir()
    near = make_corpus(tmp_path / "in")
    out = tmp_path / "out"
    result = dedup_fuzzy(DedupConfig(input_path=str(tmp_path / "in"), output_path=str(out)))
    kept = read_dir(out / "data")
    assert sorted(os.listdir(out / "data")) == sorted(
        ["a.jsonl.zst", "a.jsonl.zst.done", "b.jsonl.gz", "b.jsonl.gz.done", "c.jsonl", "c.jsonl.done"]
    )
    assert set(kept) == {f"orig-{i:03d}" for i in range(60)}
    recs = {r["id"]: r for r in removed_records(out)}
    assert {k: r["duplicate_of"] for k, r in recs.items()} == near
    assert all(r["rule"] == "fuzzy_duplicate" and 0.8 < r["similarity"] <= 1.0 for r in recs.values())
    assert result["documents_read"] == 75 and result["kept"] == 60
    assert result["removed"] == {"fuzzy_duplicate": 15} and result["skipped_bad"] == 0


def test_dedup_fuzzy_representative_is_first_in_corpus_order(tmp_path):
    (tmp_path / "in").mkdir()
    text = random_text(random.Random(5))
    write_documents(str(tmp_path / "in" / "1.jsonl"), [{"id": "z-late", "text": text}])
    write_documents(str(tmp_path / "in" / "0.jsonl"), [{"id": "z-early", "text": text + " extra"}])
    dedup_fuzzy(DedupConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "out")))
    assert set(read_dir(tmp_path / "out" / "data")) == {"z-early"}
    (rec,) = removed_records(tmp_path / "out")
    assert rec == {
        "id": "z-late",
        "shard": "1.jsonl",
        "rule": "fuzzy_duplicate",
        "duplicate_of": "z-early",
        "duplicate_of_shard": "0.jsonl",
        "similarity": rec["similarity"],
    }


@pytest.mark.slow
def test_dedup_fuzzy_output_bytes_do_not_depend_on_worker_count(tmp_path):
    (tmp_path / "in").mkdir()
    make_corpus(tmp_path / "in")
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        dedup_fuzzy(DedupConfig(input_path=str(tmp_path / "in"), output_path=str(out), num_workers=workers))
        outs.append(out)
    for sub in ("data", "removed"):
        names = sorted(os.listdir(outs[0] / sub))
        assert names == sorted(os.listdir(outs[1] / sub))
        for name in names:
            if not name.endswith(".done"):
                assert (outs[0] / sub / name).read_bytes() == (outs[1] / sub / name).read_bytes()


def chained_corpus(root, seed: int = 11) -> list[dict]:
    """Four shards with near-duplicate clusters spread across them, chains (a~b~c with a, c far
    apart) and wordless documents: enough to tell a wrong bucket split from a right one."""
    rng = random.Random(seed)
    docs = []
    for i in range(30):
        base = random_text(rng, 120)
        docs.append({"id": f"o{i:02d}", "text": base})
        step = base
        for j in range(rng.randint(0, 3)):
            step = mutate(rng, step, rng.choice([0.01, 0.02, 0.04]))  # a chain of near copies
            docs.append({"id": f"o{i:02d}-c{j}", "text": step})
    docs += [{"id": "empty-1", "text": "!!!"}, {"id": "empty-2", "text": "!!!"}]
    rng.shuffle(docs)
    for s in range(4):
        write_documents(str(root / f"s{s}.jsonl"), docs[s::4])
    return [d for s in range(4) for d in docs[s::4]]  # corpus order: shard, then line


DEFAULT_LSH = (DedupConfig.num_bands, DedupConfig.rows_per_band, DedupConfig.threshold)


@pytest.mark.parametrize(
    "bands, rows, threshold", [(14, 8, None), (14, 8, 0.75), DEFAULT_LSH], ids=["fineweb", "fineweb-checked", "default"]
)
def test_partitioned_lsh_matches_single_process_clustering(tmp_path, bands, rows, threshold):
    """Bands bucketed by hash across partition tasks give exactly what one process holding every
    signature gives (`cluster_duplicates`): same removals, representatives and similarities."""
    (tmp_path / "in").mkdir()
    corpus = chained_corpus(tmp_path / "in")
    hasher = MinHasher(num_bands=bands, rows_per_band=rows)
    sigs, valid = hasher.signatures([d["text"] for d in corpus])
    ref = cluster_duplicates(hasher.band_keys(sigs), valid, sigs, threshold)
    expected = {
        corpus[g]["id"]: (corpus[ref.representative[g]]["id"], round(float(ref.similarity[g]), 4))
        for g in np.flatnonzero(ref.removed)
    }
    assert len(expected) >= 10
    if threshold is not None:
        assert ref.linked_pairs < ref.candidate_pairs  # the check rejected some candidates
    outputs = []
    for partitions in (1, 3, 8):
        out = tmp_path / f"p{partitions}"
        result = dedup_fuzzy(
            DedupConfig(
                input_path=str(tmp_path / "in"),
                output_path=str(out),
                num_bands=bands,
                rows_per_band=rows,
                threshold=threshold,
                lsh_partitions=partitions,
            )
        )
        got = {r["id"]: (r["duplicate_of"], r["similarity"]) for r in removed_records(out)}
        assert got == expected
        assert result["candidate_pairs"] == ref.candidate_pairs and result["linked_pairs"] == ref.linked_pairs
        outputs.append({p.name: p.read_bytes() for p in sorted((out / "data").iterdir())})
    assert outputs[0] == outputs[1] == outputs[2]


def test_dedup_fuzzy_rerun_redoes_only_unfinished_shards(tmp_path):
    (tmp_path / "in").mkdir()
    make_corpus(tmp_path / "in")
    out = tmp_path / "out"
    cfg = DedupConfig(input_path=str(tmp_path / "in"), output_path=str(out))
    first = dedup_fuzzy(cfg)
    before = {n: (out / "data" / n).read_bytes() for n in ("a.jsonl.zst", "c.jsonl")}
    untouched_mtime = os.stat(out / "data" / "a.jsonl.zst").st_mtime_ns
    # A crash after shard c was written but before its marker.
    os.remove(out / "data" / "c.jsonl.done")
    (out / "data" / "c.jsonl").write_text("partial garbage")
    second = dedup_fuzzy(cfg)
    assert os.stat(out / "data" / "a.jsonl.zst").st_mtime_ns == untouched_mtime
    assert (out / "data" / "c.jsonl").read_bytes() == before["c.jsonl"]
    assert {k: v for k, v in second.items() if k != "resumed"} == first
    assert dedup_fuzzy(cfg)["resumed"] is True


def test_dedup_skips_and_counts_bad_records(tmp_path):
    (tmp_path / "in").mkdir()
    text = random_text(random.Random(9))
    (tmp_path / "in" / "s.jsonl").write_text(
        json.dumps({"id": "a", "text": text})
        + "\n"
        + "{not json\n"
        + json.dumps({"id": "b"})
        + "\n"
        + json.dumps({"id": "c", "text": text})
        + "\n"
    )
    with pytest.raises(ProcessingError, match=r"s\.jsonl:2: bad record \(bad_json\)") as err:
        dedup_fuzzy(DedupConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "o1")))
    assert isinstance(err.value.__cause__, BadRecordError)
    result = dedup_fuzzy(
        DedupConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "o2"), on_bad_record="skip")
    )
    assert result["input_records"] == 4 and result["skipped_bad"] == 2
    assert result["skip_reasons"] == {"bad_json": 1, "missing_text": 1}
    assert result["kept"] == 1 and result["removed"] == {"fuzzy_duplicate": 1}


def test_dedup_fuzzy_works_on_memory_filesystem_and_keeps_wordless_documents():
    docs = [{"id": "e1", "text": "..."}, {"id": "e2", "text": "..."}, {"id": "w", "text": "one two"}]
    write_documents("memory://dedup-test/in/s.jsonl.gz", docs)
    result = dedup_fuzzy(DedupConfig(input_path="memory://dedup-test/in", output_path="memory://dedup-test/out"))
    # Documents without words are never fuzzy duplicates (exact dedup handles them).
    assert result["kept"] == 3 and result["documents_without_words"] == 2
    assert [d["id"] for d in read_documents("memory://dedup-test/out/data/s.jsonl.gz")] == ["e1", "e2", "w"]


@pytest.mark.parametrize("field, value", [("threshold", 1.5), ("num_bands", 0), ("on_bad_record", "ignore")])
def test_dedup_rejects_bad_config(tmp_path, field, value):
    cfg = DedupConfig(input_path=str(tmp_path), output_path=str(tmp_path / "o"), **{field: value})
    with pytest.raises(ProcessingError, match=field):
        dedup_fuzzy(cfg)


def test_dedup_error_is_a_processing_error():
    assert issubclass(DedupError, ProcessingError)


# ------------------------------------------------------------------ exact


def test_dedup_exact_removes_normalised_copies(tmp_path):
    (tmp_path / "in").mkdir()
    write_documents(
        str(tmp_path / "in" / "0.jsonl"),
        [
            {"id": "a", "text": "Hello   world.\nSecond line."},
            {"id": "b", "text": "Something else."},
        ],
    )
    write_documents(
        str(tmp_path / "in" / "1.jsonl.zst"),
        [
            {"id": "c", "text": "Hello world.\n Second line.  "},  # same after whitespace collapsing
            {"id": "d", "text": "hello world.\nSecond line."},  # case differs: not a copy
        ],
    )
    result = dedup_exact(DedupConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "out")))
    assert set(read_dir(tmp_path / "out" / "data")) == {"a", "b", "d"}
    (rec,) = removed_records(tmp_path / "out")
    assert rec["id"] == "c" and rec["duplicate_of"] == "a" and rec["rule"] == "exact_duplicate"
    strict = dedup_exact(
        DedupConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "o2"), normalize=False)
    )
    assert strict["removed_total"] == 0 and result["removed_total"] == 1


def test_dedup_exact_paragraph_level(tmp_path):
    (tmp_path / "in").mkdir()
    write_documents(
        str(tmp_path / "in" / "0.jsonl"),
        [
            {"id": "a", "text": "Cookie banner\n\nReal content of a.\nCookie banner"},
            {"id": "b", "text": "Cookie banner\nReal content of b."},
            {"id": "c", "text": "Real content of a.\n\nCookie banner"},  # every line seen before
            {"id": "d", "text": "Cookie banner\n\nReal content of a.\nCookie banner"},  # copy of a
        ],
    )
    result = dedup_exact(
        DedupConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "out"), paragraph_level=True)
    )
    kept = read_dir(tmp_path / "out" / "data")
    assert kept["a"]["text"] == "Cookie banner\n\nReal content of a."
    assert kept["b"]["text"] == "Real content of b."
    assert set(kept) == {"a", "b"}
    recs = {r["id"]: r for r in removed_records(tmp_path / "out")}
    assert recs["c"]["rule"] == "exact_paragraph_duplicate" and recs["c"]["duplicate_of"] == "a"
    assert recs["d"]["rule"] == "exact_duplicate"
    assert result["paragraphs_removed"] == 4  # a: 1, b: 1, c: 2 (d went whole)
    assert result["removed"] == {"exact_duplicate": 1, "exact_paragraph_duplicate": 1}


# ------------------------------------------------------------------ the filter phase copies lines


def awkward_shard(path, rng: random.Random) -> list[str]:
    """A gzip shard mixing lines as `write_documents` writes them with lines it would rewrite
    (keys out of order, \\u escapes, CRLF, spaces), blank and bad lines, near duplicates and a
    truncated end; returns its lines."""
    base = random_text(rng, 120)
    lines = [
        json.dumps({"id": "canon", "text": base + " café"}, ensure_ascii=False, sort_keys=True),
        json.dumps({"text": random_text(rng, 80), "id": "unsorted", "meta": {"z": 1, "a": [1.5, None]}}),
        json.dumps({"id": "escaped", "text": "naïve " + random_text(rng, 60)}),  # ensure_ascii: \u00ef
        "",
        "{not json",
        json.dumps({"id": "near", "text": mutate(rng, base, 0.01) + " café"}, ensure_ascii=False) + "\r",
        "  " + json.dumps({"id": "spaced", "text": random_text(rng, 50)}, sort_keys=True) + "  ",
        json.dumps({"id": "no-text"}),
        json.dumps({"id": "last", "text": random_text(rng, 40)}, ensure_ascii=False, sort_keys=True),
    ]
    whole = gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), mtime=0)
    tail = gzip.compress(json.dumps({"id": "cut", "text": random_text(rng, 300)}).encode(), mtime=0)
    path.write_bytes(whole + tail[: len(tail) // 2])  # a second gzip member that ends early
    return lines


def test_filter_phase_writes_the_bytes_a_parse_and_rewrite_would(tmp_path):
    """Kept lines are copied when they already read as `canonical_line` writes them and rewritten
    otherwise: the output is byte for byte what parsing every document and writing it again gives."""
    (tmp_path / "in").mkdir()
    awkward_shard(tmp_path / "in" / "s.jsonl.gz", random.Random(5))
    make_corpus(tmp_path / "in")  # a.jsonl.zst, b.jsonl.gz, c.jsonl: the canonical case
    out = tmp_path / "out"
    result = dedup_fuzzy(DedupConfig(input_path=str(tmp_path / "in"), output_path=str(out), on_bad_record="skip"))
    removed = {r["id"] for r in removed_records(out)}
    assert "near" in removed and "canon" not in removed
    assert result["skip_reasons"] == {"bad_json": 1, "missing_text": 1, "truncated_stream": 1}
    for name in ("s.jsonl.gz", "a.jsonl.zst", "b.jsonl.gz", "c.jsonl"):
        docs = read_documents(str(tmp_path / "in" / name), on_bad_record="skip")
        expected = encode_documents(d for d in docs if d["id"] not in removed)[0]
        got = list(read_lines(str(out / "data" / name)))
        assert b"\n".join(got) + b"\n" == expected, name
    with gzip.open(out / "data" / "s.jsonl.gz", "rt", encoding="utf-8") as f:
        kept = [json.loads(line)["id"] for line in f]
    assert kept == ["canon", "unsorted", "escaped", "spaced", "last"]


@pytest.mark.parametrize("change", ["edit a kept line", "drop a line", "truncate"])
def test_a_shard_changed_between_hashing_and_filtering_fails_the_step(tmp_path, monkeypatch, change):
    from marin_lab.processing import dedup

    (tmp_path / "in").mkdir()
    make_corpus(tmp_path / "in")
    target = tmp_path / "in" / "c.jsonl"
    original = dedup._removal_filter_task

    def change_then_filter(task):
        if task[0].input_file.endswith("c.jsonl") and target.read_bytes() == before:
            lines = before.split(b"\n")
            if change == "edit a kept line":
                lines[3] = lines[3].replace(b'"text": "', b'"text": "x')
            elif change == "drop a line":
                del lines[3]
            else:
                lines = lines[:5]
            target.write_bytes(b"\n".join(lines))
        return original(task)

    before = target.read_bytes()
    monkeypatch.setattr(dedup, "_removal_filter_task", change_then_filter)
    with pytest.raises(ProcessingError, match=r"c\.jsonl: its lines differ from those read when hashing"):
        dedup_fuzzy(DedupConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "out")))
    assert not (tmp_path / "out" / "data" / "c.jsonl.done").exists()
