"""The browser's storage layer: confined opens, special files refused, bounded work per page."""

from __future__ import annotations

import gzip
import json
import os
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marin_lab.browser import metrics as metrics_mod
from marin_lab.browser import preview_jsonl
from marin_lab.browser.errors import ForbiddenPathError, NotRegularFileError
from marin_lab.browser.metrics import read_metrics
from marin_lab.browser.paths import Roots
from marin_lab.browser.preview import preview
from marin_lab.browser.storage import list_dir, load_json, open_file

OUTSIDE_TEXT = "OUTSIDE THE ROOTS"


@pytest.fixture
def tree(tmp_path):
    root, outside = tmp_path / "prefix", tmp_path / "outside"
    (root / "step-00000001").mkdir(parents=True)
    outside.mkdir()
    (outside / "record.json").write_text(json.dumps({"name": OUTSIDE_TEXT}))
    (root / "step-00000001" / "inside.json").write_text(json.dumps({"name": "inside"}))
    return root, outside, Roots.of([str(root)])


def test_a_symlinked_file_inside_a_step_that_leaves_the_roots_is_not_read(tree):
    root, outside, roots = tree
    link = root / "step-00000001" / ".executor_info"
    os.symlink(outside / "record.json", link)
    loaded = load_json(roots, str(link))
    assert loaded.state == "corrupt" and "outside the browser's roots" in loaded.error
    assert OUTSIDE_TEXT not in json.dumps(loaded.as_json())
    with pytest.raises(ForbiddenPathError):
        open_file(roots, str(link))


def test_a_symlink_that_stays_inside_the_roots_is_followed(tree):
    root, _, roots = tree
    os.symlink(root / "step-00000001" / "inside.json", root / "step-00000001" / "alias.json")
    assert load_json(roots, str(root / "step-00000001" / "alias.json")).value == {"name": "inside"}


def test_a_folder_swapped_for_a_symlink_after_the_path_check_is_caught_at_open(tree):
    root, outside, roots = tree
    (outside / "inside.json").write_text(json.dumps({"name": OUTSIDE_TEXT}))
    target = str(root / "step-00000001" / "inside.json")
    roots.resolve(target)  # the folder's real path is now remembered for a few seconds
    os.rename(root / "step-00000001", root / "moved")
    os.symlink(outside, root / "step-00000001")
    with pytest.raises(ForbiddenPathError, match="outside the browser's roots"):
        open_file(roots, target)


def test_a_fifo_is_refused_without_being_opened(tree):
    root, _, roots = tree
    fifo = root / "step-00000001" / "metrics.jsonl"
    os.mkfifo(fifo)
    # Opening a FIFO for reading blocks until a writer comes: each of these would hang if it did.
    with pytest.raises(NotRegularFileError, match="named pipe"):
        preview(roots, str(fifo))
    assert load_json(roots, str(fifo)).state == "corrupt"
    assert read_metrics(roots, str(root / "step-00000001"))["state"] == "corrupt"
    entry = next(e for e in list_dir(roots, str(root / "step-00000001")) if e["name"] == "metrics.jsonl")
    assert entry["type"] == "other"


def test_a_listing_shows_a_link_out_of_the_roots_as_a_link_without_its_size(tree):
    root, outside, roots = tree
    os.symlink(outside / "record.json", root / "step-00000001" / "escape.json")
    entry = next(e for e in list_dir(roots, str(root / "step-00000001")) if e["name"] == "escape.json")
    assert entry == {"name": "escape.json", "type": "link", "size": 0}


def test_blank_lines_count_towards_a_pages_work_budget(tmp_path):
    blank = preview_jsonl.PAGE_WORK_LINES * 3
    path = tmp_path / "blank.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n" * blank + b'{"id": "last", "text": "x"}\n', compresslevel=1))
    roots = Roots.of([str(tmp_path)])
    page = preview(roots, str(path), None, 10)
    assert page["items"] == [] and "stopped after reading" in page["notice"] and page["next_cursor"]
    pages, cursor, items = 1, page["next_cursor"], []
    while cursor:
        page = preview(roots, str(path), cursor, 10)
        items += page["items"]
        cursor, pages = page["next_cursor"], pages + 1
    assert [i["value"]["id"] for i in items] == ["last"] and items[0]["line"] == blank
    assert pages >= 3


def test_hostile_json_lines_are_shown_not_failed(tmp_path):
    path = tmp_path / "hostile.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n" + '{"id": "s", "text": "\\ud800"}\n')
    page = preview(Roots.of([str(tmp_path)]), str(path), None, 10)
    assert "nested too deeply" in page["items"][0]["error"]
    assert page["items"][1]["value"]["text"] == "\ud800"


def test_a_large_metrics_file_is_sampled_in_bounded_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics_mod, "SCAN_BYTES", 256 * 1024)
    monkeypatch.setattr(metrics_mod, "WINDOWS", 16)
    rows = "".join(json.dumps({"step": s, "loss": 1.0 / (s + 1), "tokens_per_s": 1e4}) + "\n" for s in range(150_000))
    (tmp_path / "metrics.jsonl").write_text(rows)
    size = (tmp_path / "metrics.jsonl").stat().st_size
    tracemalloc.start()
    try:
        m = read_metrics(Roots.of([str(tmp_path)]), str(tmp_path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert m["sampled"]["bytes_read"] <= 256 * 1024 < size
    loss = m["series"]["loss"]
    assert loss[0][0] == 0 and loss[-1][0] == 149_999 and len(loss) <= metrics_mod.MAX_POINTS + 1
    assert peak < size / 4, (peak, size)


def test_a_parquet_page_decodes_a_few_rows_not_the_whole_row_group(tmp_path):
    rng = np.random.default_rng(0)
    n = 24_000  # a 24 MB row group; reading it whole costs at least that
    table = pa.table({"id": list(range(n)), "text": [rng.bytes(500).hex() for _ in range(n)]})
    pq.write_table(table, tmp_path / "one-group.parquet", row_group_size=n)
    base = pa.default_memory_pool()
    proxy = pa.proxy_memory_pool(base)
    pa.set_memory_pool(proxy)
    try:
        page = preview(Roots.of([str(tmp_path)]), str(tmp_path / "one-group.parquet"), "0:18000", 5)
    finally:
        pa.set_memory_pool(base)
    assert [r["id"] for r in page["items"]] == list(range(18000, 18005)) and page["next_cursor"] == "0:18005"
    group_bytes = pq.ParquetFile(tmp_path / "one-group.parquet").metadata.row_group(0).total_byte_size
    assert proxy.max_memory() < group_bytes / 3, (proxy.max_memory(), group_bytes)


def test_parquet_rows_too_big_for_a_page_get_a_clear_message(tmp_path, monkeypatch):
    from marin_lab.browser import preview_arrays

    monkeypatch.setattr(preview_arrays, "PAGE_DECODE_BYTES", 10_000)
    pq.write_table(pa.table({"text": ["x" * 50_000] * 3}), tmp_path / "wide.parquet")
    page = preview(Roots.of([str(tmp_path)]), str(tmp_path / "wide.parquet"), None, 5)
    assert page["items"] == [] and "read" in page["error"] and "with pyarrow" in page["error"]
