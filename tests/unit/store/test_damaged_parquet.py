"""Regression: a damaged uncompressed Parquet page is one line naming the file and row, and with
on_bad_record='skip' the damaged part is skipped and counted while the rest is read."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marin_lab.io.documents import BadRecordError, ReadStats, read_documents

ROWS, GROUP = 3000, 1000


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "docs.parquet"
    table = pa.table({"id": [f"d{i}" for i in range(ROWS)], "text": [f"text number {i:05d} " * 4 for i in range(ROWS)]})
    pq.write_table(table, path, compression="none", row_group_size=GROUP, data_page_size=4096)
    return path


def _damage(path, at: int, length: int) -> None:
    data = bytearray(path.read_bytes())
    data[at : at + length] = b"\xff" * length
    path.write_bytes(bytes(data))


def _text_column_start(path, group: int) -> int:
    meta = pq.ParquetFile(path).metadata.row_group(group)
    column = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == "text")
    return column.data_page_offset


def test_damaged_page_structure_names_the_file_and_rows_and_skip_reads_the_rest(shard):
    # Length prefixes of the middle group's strings overwritten: the page cannot be decoded.
    _damage(shard, _text_column_start(shard, 1) + 200, 64)
    with pytest.raises(BadRecordError) as caught:
        list(read_documents(str(shard)))
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"{shard}:1001: bad record (bad_parquet): row group 1 (rows 1001-2000)")
    stats = ReadStats()
    docs = list(read_documents(str(shard), on_bad_record="skip", stats=stats))
    assert [d["id"] for d in docs] == [f"d{i}" for i in range(GROUP)] + [f"d{i}" for i in range(2 * GROUP, ROWS)]
    assert stats.skipped == GROUP and stats.skip_reasons == {"bad_parquet": GROUP} and stats.read == 2 * GROUP


def test_damaged_string_bytes_name_the_row_instead_of_a_unicode_traceback(shard):
    data = shard.read_bytes()
    at = data.index(b"text number 01500 ") + 5  # inside row 1501's text, past its length prefix
    _damage(shard, at, 3)
    with pytest.raises(
        BadRecordError,
        match=rf"{shard.name}:1501: bad record \(bad_parquet\): row 1501 holds a "
        "string that is not UTF-8",
    ):
        list(read_documents(str(shard)))
    stats = ReadStats()
    docs = list(read_documents(str(shard), on_bad_record="skip", stats=stats))
    assert len(docs) == ROWS - 1 and "d1500" not in {d["id"] for d in docs}
    assert stats.skip_reasons == {"bad_parquet": 1} and stats.examples == [f"{shard}:1501: bad_parquet"]
