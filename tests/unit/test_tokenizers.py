"""The tokenizer owner: lookup, one per-process cache that every caller shares, and no second loader."""

from __future__ import annotations

import hashlib
import pathlib
import re

import pytest

from marin_lab.io import fs as mfs
from marin_lab.io.documents import write_documents
from marin_lab.processing.errors import TokenizeError
from marin_lab.processing.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize, train_tokenizer
from marin_lab.processing.tokenizers import (
    CACHE_SIZE,
    load_tokenizer,
    optional_tokenizer_at,
    tokenizer_at,
    tokenizer_from_bytes,
)

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "marin_lab"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("owner")
    docs = [{"id": f"d{i}", "text": f"the river {i} runs by the old mill and the bridge"} for i in range(60)]
    for shard in range(3):
        write_documents(str(root / "docs" / f"part-{shard}.jsonl.gz"), docs[shard * 20 : (shard + 1) * 20])
    train_tokenizer(
        TrainTokenizerConfig(
            input_path=str(root / "docs"), output_path=str(root / "tok"), vocab_size=300, min_frequency=1
        )
    )
    return root


def test_every_way_in_shares_one_loaded_tokenizer(trained):
    path = trained / "tok" / "tokenizer.json"
    first = load_tokenizer(str(trained / "tok"))
    assert tokenizer_at(str(path)) is first
    assert tokenizer_from_bytes(path.read_bytes(), "here") is first
    assert optional_tokenizer_at(str(path)) is first
    assert optional_tokenizer_at(None) is None and optional_tokenizer_at(str(trained / "nothing.json")) is None


def test_a_recorded_checksum_of_a_loaded_tokenizer_reads_nothing(trained):
    data = (trained / "tok" / "tokenizer.json").read_bytes()
    loaded = tokenizer_from_bytes(data, "here")
    reads: list[str] = []

    def read(url: str) -> bytes:
        reads.append(url)
        return data

    assert tokenizer_at("anywhere/tokenizer.json", sha256=hashlib.sha256(data).hexdigest(), read=read) is loaded
    assert reads == []
    assert tokenizer_at("anywhere/tokenizer.json", sha256="0" * 64, read=read) is loaded  # unknown: read, then by bytes
    assert reads == ["anywhere/tokenizer.json"]


def test_the_cache_keeps_the_last_few(trained):
    data = (trained / "tok" / "tokenizer.json").read_bytes()
    first = tokenizer_from_bytes(data, "here")
    # As many others, each a different file (spaces added at the end).
    others = [tokenizer_from_bytes(data + b" " * (i + 1), f"other-{i}") for i in range(CACHE_SIZE)]
    assert tokenizer_from_bytes(data + b" " * CACHE_SIZE, "again") is others[-1]  # kept
    assert tokenizer_from_bytes(data, "here") is not first  # the oldest went first


def test_a_bad_file_is_one_line_naming_it():
    with pytest.raises(TokenizeError, match=r"tokenizer /x/tokenizer.json: not a valid tokenizer.json \("):
        tokenizer_from_bytes(b'{"model": 3}', "/x/tokenizer.json")


def test_tokenize_shards_use_the_tokenizer_their_step_loaded(trained, tmp_path, monkeypatch):
    """Inline shard tasks find the step's tokenizer by the ledger's checksum: the cache's copy of
    tokenizer.json is written once and never read back in this process."""
    reads: list[str] = []
    real = mfs.read_bytes

    def counting(url: str) -> bytes:
        reads.append(url)
        return real(url)

    monkeypatch.setattr(mfs, "read_bytes", counting)
    out = tmp_path / "cache"
    result = tokenize(
        TokenizeConfig(
            input_path=str(trained / "docs"),
            output_path=str(out),
            tokenizer=str(trained / "tok"),
            validation_fraction=0.2,
        )
    )
    assert result["input_shards"] == 3 and result["documents"] == 60
    assert [u for u in reads if u.endswith("tokenizer.json")] == [str(trained / "tok" / "tokenizer.json")]


# Where a tokenizer is still loaded apart from the owner, each with its reason. The list only shrinks.
# (Training a new tokenizer, as train_tokenizer and build_gpt2_tokenizer do, is not loading one.)
LOADED_ELSEWHERE: set[str] = set()
_LOADERS = re.compile(r"\b\w*Tokenizer\w*\.from_(str|file|buffer|pretrained)\(")


def test_no_module_but_the_owner_loads_a_tokenizer():
    found = {
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if _LOADERS.search(p.read_text(encoding="utf-8"))
    }
    assert "processing/tokenizers.py" in found  # the pattern sees the owner's own loader
    assert found - {"processing/tokenizers.py"} <= LOADED_ELSEWHERE, sorted(found)
