"""The file viewer: streamed JSON-lines pages, parquet row groups, token shards, text, JSON."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import zstandard

from marin_lab.browser.errors import BadRequestError, NotFoundError
from marin_lab.browser.metrics import read_metrics, read_results
from marin_lab.browser.paths import Roots
from marin_lab.browser.preview import preview

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from browser_fixtures import SECRET_VALUE, XSS_TEXT, build_prefix  # noqa: E402

# Unit tests read files in many temporary folders: let the browser read the whole disk here; the
# confinement itself is tested in test_browser_paths.py and test_browser_confinement.py.
ROOTS = Roots.of(["/"])


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return build_prefix(tmp_path_factory.mktemp("preview"))


def _all_pages(url: str, limit: int) -> list[dict]:
    items, cursor, pages = [], None, 0
    while True:
        page = preview(ROOTS, url, cursor, limit)
        items.extend(page["items"])
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            return items
        assert pages < 1000, "pagination does not end"


@pytest.mark.parametrize("name", ["plain.jsonl", "docs-00000.jsonl.gz", "docs-00001.jsonl.zst"])
def test_jsonl_pages_cover_every_line_once_in_order(fx, name):
    items = _all_pages(str(fx.raw / "data" / name), limit=7)
    assert len(items) == 121  # 120 documents and one broken line
    assert [i["line"] for i in items] == list(range(121))
    assert items[3]["value"]["text"] == XSS_TEXT  # data comes back as data, escaped by the page
    assert "not valid JSON" in items[10]["error"] and items[10]["raw"].startswith('{"id": "broken"')
    assert items[11]["value"]["id"] == "doc-0010"


@pytest.mark.parametrize("suffix", [".jsonl.zst", ".jsonl.gz"])
def test_first_page_of_a_compressed_file_does_not_read_the_rest(tmp_path, suffix):
    # Everything after the first documents is garbage: reading the whole stream would fail.
    rng = np.random.default_rng(0)
    docs = "".join(json.dumps({"id": str(i), "text": rng.bytes(1000).hex()}) + "\n" for i in range(3000)).encode()
    compressed = (
        zstandard.ZstdCompressor().compress(docs) if suffix.endswith("zst") else gzip.compress(docs, compresslevel=1)
    )
    path = tmp_path / f"shard{suffix}"
    path.write_bytes(compressed + b"\xde\xad\xbe\xef" * 500_000)
    page = preview(ROOTS, str(path), None, 10)
    assert [i["value"]["id"] for i in page["items"]] == [str(i) for i in range(10)]
    assert page["next_cursor"] is not None and "error" not in page
    # Walking on reaches the damage and reports it instead of failing.
    cursor = page["next_cursor"]
    while cursor is not None:
        page = preview(ROOTS, str(path), cursor, 500)
        cursor = page["next_cursor"]
    assert "cannot be decompressed" in page["error"]


def test_bad_cursors_are_bad_requests(fx):
    url = str(fx.raw / "data" / "plain.jsonl")
    for cursor in ["abc", "1:x", "-5:0"]:
        with pytest.raises(BadRequestError):
            preview(ROOTS, url, cursor, 5)
    with pytest.raises(BadRequestError):
        preview(ROOTS, str(fx.raw / "data" / "docs-00001.jsonl.zst"), "99999999:0", 5)


def test_missing_file_is_not_found(fx):
    with pytest.raises(NotFoundError):
        preview(ROOTS, str(fx.raw / "nope.jsonl"))


def test_parquet_pages_walk_row_groups(fx):
    url = str(fx.raw / "data" / "table.parquet")
    first = preview(ROOTS, url, None, 30)
    assert first["num_row_groups"] == 3 and first["num_rows"] == 120
    assert [c["name"] for c in first["schema"]] == ["id", "text", "n"]
    assert first["next_cursor"] == "0:30"
    rows = _all_pages(url, 30)
    assert [r["n"] for r in rows] == list(range(120))


def test_token_shard_is_decoded_with_the_cache_tokenizer(fx):
    url = str(fx.tokenize / "train" / "shard-00000.tokens.npy")
    page = preview(ROOTS, url, None, 4)
    assert page["kind"] == "tokens" and page["documents"] == 40
    assert page["items"][0]["text"] == "Document 0: the quick brown fox jumps over lazy dog. <eos>"
    assert page["items"][0]["pieces"][-1] == "<eos>"
    assert page["next_cursor"] == "4"
    last = preview(ROOTS, url, "38", 4)
    assert [d["document"] for d in last["items"]] == [38, 39] and last["next_cursor"] is None
    offsets = np.load(fx.tokenize / "train" / "shard-00000.offsets.npy")
    assert page["items"][1]["tokens"] == offsets[2] - offsets[1]


def test_npy_array_pages(fx):
    page = preview(ROOTS, str(fx.tokenize / "train" / "shard-00000.offsets.npy"), None, 5)
    assert page["kind"] == "npy" and page["dtype"] == "int64" and page["items"][0] == 0


def test_json_file_is_parsed_and_redacted(fx):
    page = preview(ROOTS, str(fx.raw / ".executor_info"))
    assert page["kind"] == "json" and page["value"]["name"] == "raw/docs"
    assert SECRET_VALUE not in json.dumps(page)


def test_corrupt_json_falls_back_to_text_with_a_note(fx):
    page = preview(ROOTS, str(fx.corrupt / ".executor_info"))
    assert page["kind"] == "text" and "corrupt" in page["error"]
    assert page["text"].startswith('{"name": "report/summary"')


def test_text_pages_split_at_line_ends_and_never_split_a_character(tmp_path):
    line = ("é" * 40 + "\n") * 3000  # ~246 KB, multi-byte characters
    path = tmp_path / "notes.txt"
    path.write_text(line)
    text, cursor = "", None
    while True:
        page = preview(ROOTS, str(path), cursor)
        assert page["kind"] == "text" and "\ufffd" not in page["text"]
        text += page["text"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert text == line


def test_text_view_hides_secret_assignments(fx):
    page = preview(ROOTS, str(fx.raw / "notes.txt"))
    assert "should-not-show" not in page["text"] and XSS_TEXT in page["text"]


def test_binary_file_is_shown_as_hex(tmp_path):
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 4)
    page = preview(ROOTS, str(tmp_path / "blob.bin"))
    assert page["kind"] == "binary" and page["hex"].startswith("00000000  00 01 02")


def test_directory_listing_sorts_folders_first(fx):
    page = preview(ROOTS, str(fx.raw))
    names = [e["name"] for e in page["items"]]
    assert names[0] == "data" and ".executor_info" in names and page["is_step"] is True
    assert preview(ROOTS, str(fx.raw / "data"))["is_step"] is False
    assert all(e["path"].startswith(str(fx.raw)) for e in page["items"])


def test_metrics_series_and_results(fx):
    m = read_metrics(ROOTS, str(fx.train))
    assert m["state"] == "ok" and m["rows"] == 100 and m["bad_lines"] == 1
    assert m["series"]["loss"][0][0] == 1 and len(m["series"]["tokens_per_s"]) == 100
    assert read_metrics(ROOTS, str(fx.evaluate))["state"] == "missing"
    assert read_results(ROOTS, str(fx.evaluate))["value"]["tasks"]["copy"]["accuracy"] == 0.5


def test_metrics_are_downsampled_but_keep_the_last_step(tmp_path):
    rows = "".join(json.dumps({"step": s, "loss": 1.0 / (s + 1)}) + "\n" for s in range(5000))
    (tmp_path / "metrics.jsonl").write_text(rows)
    loss = read_metrics(ROOTS, str(tmp_path))["series"]["loss"]
    assert len(loss) <= 1001 and loss[-1][0] == 4999


def test_float8_statistics_are_plotted_and_bounded(tmp_path, monkeypatch):
    import marin_lab.browser.metrics as bm

    rows = [
        {
            "step": s,
            "loss": 2.0,
            "fp8/saturated": 0.0,
            "fp8/layer00/amax_x": 3.0 + s,
            "fp8/layer01/amax_x": 1.0,
            "fp8/layer02/amax_x": 1.0,
            "other": 1.0,
        }
        for s in range(1, 4)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    series = read_metrics(ROOTS, str(tmp_path))["series"]
    assert series["fp8/layer00/amax_x"] == [[1, 4.0], [2, 5.0], [3, 6.0]] and "fp8/saturated" in series
    assert "other" not in series
    monkeypatch.setattr(bm, "MAX_FP8_SERIES", 2)
    assert len([k for k in read_metrics(ROOTS, str(tmp_path))["series"] if k.startswith("fp8/")]) == 2


def test_paging_forward_in_a_compressed_file_resumes_the_open_stream(fx):
    url = str(fx.raw / "data" / "docs-00001.jsonl.zst")
    first = preview(ROOTS, url, None, 10)
    second = preview(ROOTS, url, first["next_cursor"], 10)
    assert second["resumed"] is True and [i["line"] for i in second["items"]] == list(range(10, 20))
    # The same cursor asked again (a reload) decodes from the start and gives the same page.
    again = preview(ROOTS, url, first["next_cursor"], 10)
    assert again["resumed"] is False and again["items"] == second["items"]


def test_a_line_longer_than_the_cap_is_shown_cut(tmp_path, monkeypatch):
    import marin_lab.browser.preview_jsonl as pj

    monkeypatch.setattr(pj, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "x" * 5000}) + "\n" + json.dumps({"id": "b", "text": "y"}) + "\n")
    page = preview(ROOTS, str(path), None, 10)
    assert "shown cut" in page["items"][0]["error"] and len(page["items"][0]["raw"]) == 1000
    assert page["items"][1]["value"]["id"] == "b" and page["next_cursor"] is None
