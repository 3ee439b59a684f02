"""The tokenizer owner: lookup, one per-process cache that every caller shares, and no second loader."""

from __future__ import annotations

import hashlib
import http.server
import logging
import pathlib
import re
import socket
import threading
import time

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

PACKAGE = pathlib.Path(__file__).resolve().parents[3] / "marin_lab"


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


@pytest.fixture()
def hub_at(tmp_path, monkeypatch):
    """Point huggingface_hub at an empty cache and at `endpoint` (a local address: tests never
    touch the network); returns the function that sets the endpoint."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    def point(endpoint: str) -> None:
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        )

    return point


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed: connections are refused


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE", "hub-unreachable"])
def test_a_hub_tokenizer_not_in_the_cache_is_one_line_at_once_without_retries(hub_at, monkeypatch, caplog, offline):
    """Regression: an unreachable hub was retried five times with back-off (a screen of log lines)."""
    from huggingface_hub import constants

    hub_at(f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    started = time.monotonic()
    with caplog.at_level(logging.INFO), pytest.raises(TokenizeError) as raised:
        load_tokenizer("someone/their-tokenizer", "0123abc")
    message = str(raised.value)
    assert "\n" not in message and message.startswith("field 'tokenizer': hub tokenizer 'someone/their-tokenizer'")
    assert "hf download someone/their-tokenizer tokenizer.json --revision 0123abc" in message
    assert ("HF_HUB_OFFLINE is set" if offline else "cannot be reached") in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert not [r for r in caplog.records if "retry" in r.getMessage().lower()]
    assert time.monotonic() - started < 5  # the back-off alone took 23 s


def test_a_hub_that_has_no_such_tokenizer_says_so_and_the_cache_still_answers_offline(hub_at, tmp_path, trained):
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 (http.server's name)
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hub_at(f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(
            TokenizeError, match=r"^field 'tokenizer': .* has no tokenizer.json on the Hugging Face hub"
        ):
            load_tokenizer("someone/their-tokenizer", "0123abc")
    finally:
        server.shutdown()
        server.server_close()
    # A tokenizer in the cache is read when the hub cannot be reached.
    from huggingface_hub import constants

    sha = "0" * 40
    snapshot = pathlib.Path(constants.HF_HUB_CACHE) / "models--someone--cached" / "snapshots" / sha
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer.json").write_bytes((trained / "tok" / "tokenizer.json").read_bytes())
    hub_at(f"http://127.0.0.1:{_closed_port()}")
    assert load_tokenizer("someone/cached", sha) is load_tokenizer(str(trained / "tok"))
