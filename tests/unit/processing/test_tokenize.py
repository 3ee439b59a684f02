"""tokenize and train_tokenizer: the token cache format, determinism, resumption, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from marin_lab.io.documents import BadRecordError, write_documents
from marin_lab.processing.errors import ShardTaskError, TokenizeError
from marin_lab.processing.tokenize import (
    TokenizeConfig,
    TrainTokenizerConfig,
    split_of,
    tokenize,
    train_tokenizer,
)
from marin_lab.processing.tokenizers import load_tokenizer, resolve_tokenizer_bytes
from tests.data_fixtures import make_document_shards


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    docs = make_document_shards(root / "docs", shards=3, per_shard=40)
    result = train_tokenizer(
        TrainTokenizerConfig(input_path=str(root / "docs"), output_path=str(root / "tokenizer"), vocab_size=400)
    )
    return root, docs, result


def cache_files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_train_tokenizer_is_deterministic(corpus, tmp_path):
    root, docs, first = corpus
    again = train_tokenizer(
        TrainTokenizerConfig(input_path=str(root / "docs"), output_path=str(tmp_path), vocab_size=400)
    )
    assert again == first
    assert (tmp_path / "tokenizer.json").read_bytes() == (root / "tokenizer" / "tokenizer.json").read_bytes()
    assert first["documents"] == len(docs) and first["vocab_size"] == 400
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.token_to_id("<|endoftext|>") == 0
    assert tok.decode(tok.encode("Garden bridge, ünïcode!").ids) == "Garden bridge, ünïcode!"


def test_train_tokenizer_sample_limits(corpus, tmp_path):
    root, docs, _ = corpus
    capped = train_tokenizer(
        TrainTokenizerConfig(
            input_path=str(root / "docs"), output_path=str(tmp_path / "a"), vocab_size=300, max_chars=2000
        )
    )
    assert 0 < capped["documents"] < len(docs)
    half = train_tokenizer(
        TrainTokenizerConfig(
            input_path=str(root / "docs"), output_path=str(tmp_path / "b"), vocab_size=300, sample_fraction=0.5
        )
    )
    assert 0.3 * len(docs) < half["documents"] < 0.7 * len(docs)
    with pytest.raises(TokenizeError, match="vocab_size=100"):
        train_tokenizer(
            TrainTokenizerConfig(input_path=str(root / "docs"), output_path=str(tmp_path / "c"), vocab_size=100)
        )


def test_token_cache_format(corpus, tmp_path):
    root, docs, _ = corpus
    out = tmp_path / "cache"
    result = tokenize(
        TokenizeConfig(
            input_path=str(root / "docs"),
            output_path=str(out),
            tokenizer=str(root / "tokenizer"),
            validation_fraction=0.2,
            batch_size=7,
        )
    )
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["format"] == "marin_lab.token_cache" and ledger["version"] == 1
    assert ledger["dtype"] == "uint16" and ledger["vocab_size"] == 400
    assert ledger["eos_id"] == 0 and ledger["bos_id"] is None
    assert ledger["tokenizer"]["file"] == "tokenizer.json"
    assert (out / "tokenizer.json").read_bytes() == (root / "tokenizer" / "tokenizer.json").read_bytes()
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))

    expected = {s: [d for d in docs if split_of(d["id"], 0.2) == s] for s in ("train", "validation")}
    assert 0 < len(expected["validation"]) < len(docs) // 2
    for split, split_docs in expected.items():
        info = ledger["splits"][split]
        assert info["documents"] == len(split_docs) == result["documents_by_split"][split]
        assert [s["name"] for s in info["shards"]] == ["shard-00000", "shard-00001", "shard-00002"]
        decoded, total = [], 0
        for shard in info["shards"]:
            tokens = np.load(out / split / f"{shard['name']}.tokens.npy", mmap_mode="r")
            offsets = np.load(out / split / f"{shard['name']}.offsets.npy", mmap_mode="r")
            assert tokens.dtype == np.uint16 and offsets.dtype == np.int64
            assert offsets[0] == 0 and offsets[-1] == len(tokens) == shard["tokens"]
            assert len(offsets) == shard["documents"] + 1
            total += len(tokens)
            for i in range(len(offsets) - 1):
                doc = tokens[offsets[i] : offsets[i + 1]]
                assert doc[-1] == 0  # EOS closes every document
                decoded.append(tok.decode(doc[:-1].tolist()))
        assert decoded == [d["text"] for d in split_docs]
        assert info["tokens"] == total == result["tokens"][split]
    assert result["documents_in"] == result["documents"] == len(docs)


def test_checksums_in_ledger_match_files(corpus, tmp_path):
    import hashlib

    root, _, _ = corpus
    out = tmp_path / "cache"
    tokenize(TokenizeConfig(input_path=str(root / "docs"), output_path=str(out), tokenizer=str(root / "tokenizer")))
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["tokenizer"]["sha256"] == hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()
    for split, info in ledger["splits"].items():
        for shard in info["shards"]:
            for kind in ("tokens", "offsets"):
                data = np.load(out / split / f"{shard['name']}.{kind}.npy").tobytes()
                assert shard[f"{kind}_sha256"] == hashlib.sha256(data).hexdigest()


@pytest.mark.slow
def test_same_bytes_whatever_the_worker_count(corpus, tmp_path):
    root, _, _ = corpus
    outs = []
    for workers in (1, 2, 3):
        out = tmp_path / f"w{workers}"
        tokenize(
            TokenizeConfig(
                input_path=str(root / "docs"),
                output_path=str(out),
                tokenizer=str(root / "tokenizer" / "tokenizer.json"),
                validation_fraction=0.1,
                num_workers=workers,
            )
        )
        outs.append(cache_files(out))
    assert outs[0] == outs[1] == outs[2]
    assert "train/shard-00002.tokens.npy" in outs[0]


def test_arrays_are_written_as_np_save_writes_them(corpus, tmp_path):
    import io

    root, _, _ = corpus
    out = tmp_path / "cache"
    tokenize(
        TokenizeConfig(
            input_path=str(root / "docs"), output_path=str(out), tokenizer=str(root / "tokenizer"), batch_size=5
        )
    )  # several batches per shard, written without joining them
    for path in sorted(out.rglob("*.npy")):
        buf = io.BytesIO()
        np.save(buf, np.load(path), allow_pickle=False)
        assert path.read_bytes() == buf.getvalue(), path


def test_rerun_redoes_only_unfinished_shards(corpus, tmp_path):
    root, _, _ = corpus
    cfg = TokenizeConfig(
        input_path=str(root / "docs"), output_path=str(tmp_path / "c"), tokenizer=str(root / "tokenizer")
    )
    tokenize(cfg)
    before = cache_files(tmp_path / "c")
    (tmp_path / "c" / "progress" / "shard-00001.done").unlink()  # as if it crashed before its marker
    (tmp_path / "c" / "train" / "shard-00001.tokens.npy").write_bytes(b"half-written")
    (tmp_path / "c" / "ledger.json").unlink()
    result = tokenize(cfg)
    assert result["shards_reused"] == 2
    assert cache_files(tmp_path / "c") == before


def test_bos_and_uint32(tmp_path):
    from tokenizers import models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(70_000)} | {"[UNK]": 70_000, "<s>": 70_001, "</s>": 70_002}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    write_documents(str(tmp_path / "docs" / "a.jsonl"), [{"id": "a", "text": "w1 w69999 zzz"}])
    result = tokenize(
        TokenizeConfig(
            input_path=str(tmp_path / "docs"),
            output_path=str(tmp_path / "out"),
            tokenizer=str(tmp_path / "tokenizer.json"),
            validation_fraction=0.0,
            bos_token="<s>",
        )
    )
    assert result["dtype"] == "uint32"
    tokens = np.load(tmp_path / "out" / "train" / "shard-00000.tokens.npy")
    assert tokens.dtype == np.uint32
    assert tokens.tolist() == [70_001, 1, 69_999, 70_000, 70_002]
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert ledger["bos_id"] == 70_001 and ledger["eos_id"] == 70_002
    assert ledger["splits"]["validation"] == {"documents": 0, "tokens": 0, "shards": []}


def test_bad_records_raise_or_skip(corpus, tmp_path):
    root, _, _ = corpus
    docs = tmp_path / "docs"
    write_documents(str(docs / "a.jsonl"), [{"id": "a", "text": "river stone"}])
    (docs / "b.jsonl").write_bytes(
        b'{"id": "b1", "text": "ok"}\n{"id": "b2"}\nnot json\n{"id": "b4", "text": "fine"}\n'
    )
    cfg = TokenizeConfig(input_path=str(docs), output_path=str(tmp_path / "out"), tokenizer=str(root / "tokenizer"))
    with pytest.raises(ShardTaskError, match=r"b.jsonl:2: bad record \(missing_text\)") as info:
        tokenize(cfg)
    assert isinstance(info.value.__cause__, BadRecordError)
    result = tokenize(
        TokenizeConfig(**{**cfg.__dict__, "output_path": str(tmp_path / "skip"), "on_bad_record": "skip"})
    )
    assert result["documents_in"] == 5 and result["documents"] == 3 and result["skipped"] == 2
    assert result["skip_reasons"] == {"bad_json": 1, "missing_text": 1}


def test_empty_inputs(corpus, tmp_path):
    root, _, _ = corpus
    write_documents(str(tmp_path / "docs" / "a.jsonl.gz"), [])
    cfg = TokenizeConfig(
        input_path=str(tmp_path / "docs"), output_path=str(tmp_path / "out"), tokenizer=str(root / "tokenizer")
    )
    with pytest.raises(TokenizeError, match="no documents in 1 input shard"):
        tokenize(cfg)
    write_documents(str(tmp_path / "docs" / "b.jsonl.gz"), [{"id": "x", "text": "the river"}])
    result = tokenize(cfg)
    assert result["empty_input_shards"] == 1 and result["documents"] == 1


@pytest.mark.parametrize("spec", ["/nonexistent/tokenizer.json", "./missing-dir/tok", "no/such/folder/here"])
def test_missing_tokenizer_path(spec, tmp_path):
    with pytest.raises(TokenizeError, match="does not exist"):
        resolve_tokenizer_bytes(spec)


def test_tokenizer_from_hub_cache_offline(corpus, tmp_path, monkeypatch):
    """The hub code path, served from a local hub-layout cache with HF_HUB_OFFLINE=1."""
    import huggingface_hub.constants as hc

    root, _, _ = corpus
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--example-org--tiny-bpe"
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    data = (root / "tokenizer" / "tokenizer.json").read_bytes()
    (repo / "snapshots" / commit / "tokenizer.json").write_bytes(data)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    got, origin = resolve_tokenizer_bytes("example-org/tiny-bpe", commit)
    assert got == data and origin.startswith("hf://example-org/tiny-bpe@0123")
    assert load_tokenizer("example-org/tiny-bpe").get_vocab_size() == 400  # revision main -> refs/main
    with pytest.raises(TokenizeError, match=r"field .tokenizer.: .* not in the Hugging Face cache and the hub is off"):
        resolve_tokenizer_bytes("example-org/not-cached", commit)


def test_bad_config_values(corpus, tmp_path):
    root, _, _ = corpus
    with pytest.raises(TokenizeError, match="validation_fraction=1.5"):
        tokenize(
            TokenizeConfig(
                input_path=str(root / "docs"), output_path=str(tmp_path), tokenizer="x", validation_fraction=1.5
            )
        )
    with pytest.raises(TokenizeError, match="eos_token"):
        tokenize(
            TokenizeConfig(
                input_path=str(root / "docs"),
                output_path=str(tmp_path),
                tokenizer=str(root / "tokenizer"),
                eos_token="<nope>",
            )
        )


def test_split_is_stable_and_salted():
    ids = [f"id-{i}" for i in range(2000)]
    val = [i for i in ids if split_of(i, 0.1) == "validation"]
    assert 120 < len(val) < 280
    assert val == [i for i in ids if split_of(i, 0.1) == "validation"]
    assert val != [i for i in ids if split_of(i, 0.1, salt="other") == "validation"]
    assert all(split_of(i, 0.0) == "train" for i in ids)
