"""Reading and writing document shards, and the bad-input policy."""

from __future__ import annotations

import gzip
import json

import pytest

from marin_lab.io.documents import (
    BadRecordError,
    NoShardsError,
    ReadStats,
    list_shards,
    read_documents,
    write_documents,
)

DOCS = [{"id": f"doc-{i}", "text": f"Grüße, document {i}. " * (i + 1), "metadata": {"n": i}} for i in range(50)]


@pytest.mark.parametrize("ext", ["jsonl", "jsonl.gz", "jsonl.zst"])
def test_round_trip_and_deterministic_bytes(tmp_path, ext):
    a, b = tmp_path / f"a.{ext}", tmp_path / f"b.{ext}"
    assert write_documents(str(a), DOCS) == len(DOCS)
    write_documents(str(b), iter(DOCS))
    assert a.read_bytes() == b.read_bytes()
    assert list(read_documents(str(a))) == DOCS


def test_keys_sorted_and_unicode_kept(tmp_path):
    path = tmp_path / "x.jsonl"
    write_documents(str(path), [{"text": "é", "id": "1"}])
    assert path.read_text(encoding="utf-8") == '{"id": "1", "text": "é"}\n'


def test_memory_filesystem(tmp_path):
    write_documents("memory://docs/test/a.jsonl.zst", DOCS[:3])
    write_documents("memory://docs/test/sub/b.jsonl.gz", DOCS[3:5])
    shards = list_shards("memory://docs/test")
    assert shards == ["memory:///docs/test/a.jsonl.zst", "memory:///docs/test/sub/b.jsonl.gz"]
    assert [d["id"] for s in shards for d in read_documents(s)] == [d["id"] for d in DOCS[:5]]


BAD_LINES = [
    (b'{"id": "1", "text": "ok"}\n{"id": "2", "text": \n', "bad_json", 2),
    (b'{"id": "1"}\n', "missing_text", 1),
    (b'{"id": "1", "text": 5}\n', "missing_text", 1),
    (b'{"text": "no id"}\n', "missing_id", 1),
    (b"[1, 2]\n", "not_an_object", 1),
    (b'{"id": "1", "text": "ok"}\n\n{"id": "2", "text": "\xff\xfe"}\n', "bad_utf8", 3),
]


@pytest.mark.parametrize("data,reason,line", BAD_LINES)
def test_bad_record_raises_with_file_and_line(tmp_path, data, reason, line):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(data)
    with pytest.raises(BadRecordError) as info:
        list(read_documents(str(path)))
    assert info.value.reason == reason
    assert info.value.line == line
    assert f"{path}:{line}" in str(info.value)
    assert "on_bad_record='skip'" in str(info.value)


@pytest.mark.parametrize("data,reason,line", BAD_LINES)
def test_bad_record_skip_is_counted(tmp_path, data, reason, line):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(data)
    stats = ReadStats()
    docs = list(read_documents(str(path), on_bad_record="skip", stats=stats))
    assert stats.skipped == 1
    assert stats.skip_reasons == {reason: 1}
    assert stats.read == len(docs) == data.count(b'"ok"')
    assert stats.examples == [f"{path}:{line}: {reason}"]


@pytest.mark.parametrize("ext", ["jsonl.gz", "jsonl.zst"])
def test_truncated_compressed_stream(tmp_path, ext):
    many = [{"id": str(i), "text": f"line {i} " * 20} for i in range(5000)]
    whole = tmp_path / f"whole.{ext}"
    write_documents(str(whole), many)
    cut = tmp_path / f"cut.{ext}"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(BadRecordError, match="truncated_stream"):
        list(read_documents(str(cut)))
    stats = ReadStats()
    got = list(read_documents(str(cut), on_bad_record="skip", stats=stats))
    assert 0 < len(got) < len(many)
    assert got == many[: len(got)]
    assert stats.skip_reasons == {"truncated_stream": 1}


def test_multi_member_gzip_reads_all(tmp_path):
    path = tmp_path / "multi.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"id": "a", "text": "1"}\n') + gzip.compress(b'{"id": "b", "text": "2"}\n'))
    assert [d["id"] for d in read_documents(str(path))] == ["a", "b"]


def test_empty_shard_reads_nothing(tmp_path):
    for ext in ["jsonl", "jsonl.gz", "jsonl.zst"]:
        write_documents(str(tmp_path / f"e.{ext}"), [])
        stats = ReadStats()
        assert list(read_documents(str(tmp_path / f"e.{ext}"), stats=stats)) == []
        assert stats.read == stats.skipped == 0


def test_bad_on_bad_record_value(tmp_path):
    with pytest.raises(ValueError, match="on_bad_record"):
        list(read_documents(str(tmp_path / "x.jsonl"), on_bad_record="ignore"))


def test_list_shards_sorted_recursive_skips_hidden_and_markers(tmp_path):
    for rel in [
        "b/2.jsonl.gz",
        "a.jsonl.zst",
        "b/1.jsonl",
        ".hidden.jsonl",
        "c/x.txt",
        "a.jsonl.zst.done",
        ".tmp/z.jsonl",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert list_shards(str(tmp_path)) == [
        str(tmp_path / "a.jsonl.zst"),
        str(tmp_path / "b/1.jsonl"),
        str(tmp_path / "b/2.jsonl.gz"),
    ]
    assert list_shards(str(tmp_path / "a.jsonl.zst")) == [str(tmp_path / "a.jsonl.zst")]
    assert list_shards(str(tmp_path), patterns=("*.txt",)) == [str(tmp_path / "c/x.txt")]


def test_list_shards_none_is_a_clear_error(tmp_path):
    with pytest.raises(NoShardsError, match="no document shards"):
        list_shards(str(tmp_path))
    with pytest.raises(NoShardsError, match="missing"):
        list_shards(str(tmp_path / "missing"))


def test_zstd_multiple_frames_and_large_shard(tmp_path):
    import os

    import zstandard

    # Hex of random bytes barely compresses, so the file spans several 1 MiB reads.
    big = [{"id": str(i), "text": os.urandom(20_000).hex()} for i in range(80)]
    path = tmp_path / "big.jsonl.zst"
    write_documents(str(path), big)
    assert path.stat().st_size > 1 << 20
    assert list(read_documents(str(path))) == big
    frames = tmp_path / "frames.jsonl.zst"
    cctx = zstandard.ZstdCompressor()
    frames.write_bytes(cctx.compress(b'{"id": "a", "text": "1"}\n') + cctx.compress(b'{"id": "b", "text": "2"}\n'))
    assert [d["id"] for d in read_documents(str(frames))] == ["a", "b"]


@pytest.mark.parametrize("ext", ["jsonl", "jsonl.gz", "jsonl.zst"])
def test_read_lines_gives_the_lines_read_document_lines_numbers(tmp_path, ext):
    """`read_lines` (the copying pass of dedup) and `read_document_lines` agree on every line's
    number and bytes, across pieces: a line longer than `READ_CHUNK`, blank lines, CRLF and a
    last line without a newline."""
    import os

    from marin_lab.io.compression import READ_CHUNK
    from marin_lab.io.documents import compress_for, read_document_lines, read_lines

    lines = [json.dumps({"id": str(i), "text": os.urandom(300).hex() * (i % 3 + 1)}) for i in range(3000)]
    lines[5] = json.dumps({"id": "long", "text": "x" * (3 * READ_CHUNK)})  # spans four pieces
    lines[7] = ""
    lines[9] = lines[9] + "\r"
    path = tmp_path / f"s.{ext}"
    path.write_bytes(compress_for(str(path), "\n".join(lines).encode()))  # no newline at the end
    raw = list(read_lines(str(path)))
    assert raw == [line.encode() for line in lines]
    numbered = list(read_document_lines(str(path)))
    assert len(numbered) == len(lines) - 1
    for line in numbered:
        assert line.raw == raw[line.number - 1] and line.text == line.raw.decode()
        assert line.doc == json.loads(line.raw)


def test_read_lines_stops_at_damage_after_the_lines_before_it(tmp_path):
    from marin_lab.io.compression import DECODE_ERRORS
    from marin_lab.io.documents import read_lines

    many = [{"id": str(i), "text": f"line {i} " * 20} for i in range(5000)]
    whole = tmp_path / "whole.jsonl.gz"
    write_documents(str(whole), many)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    got = []
    with pytest.raises(DECODE_ERRORS):
        for line in read_lines(str(cut)):
            got.append(line)
    readable = list(read_documents(str(cut), on_bad_record="skip"))
    assert len(got) >= len(readable) > 0
    assert [json.loads(line) for line in got[: len(readable)]] == readable
