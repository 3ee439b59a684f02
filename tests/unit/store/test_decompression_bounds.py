"""Regression: a small compressed shard that expands enormously is decoded in bounded pieces, by
every reader (data steps and the browser), for every codec; a truncated stream is an error."""

from __future__ import annotations

import gzip
import tracemalloc

import pytest
import zstandard

from marin_lab.browser.paths import Roots
from marin_lab.browser.preview import preview
from marin_lab.io.compression import compress, compression_of, open_decompressed
from marin_lab.io.documents import BadRecordError, ReadStats, read_documents

EXPANDED = 32 * 1024 * 1024
# Far below the expanded size (and below one input chunk's expansion, which is all of it here):
# what the reader holds is a few 1 MiB reads and one 64 KiB line.
PEAK_LIMIT = 12 * 1024 * 1024
_LINE = b" " * (64 * 1024 - 1) + b"\n"  # blank lines: skipped, so nothing is kept per line


def _bomb(path, codec: str) -> int:
    data = _LINE * (EXPANDED // len(_LINE)) + b'{"id": "last", "text": "still read"}\n'
    blob = (
        zstandard.ZstdCompressor(level=3).compress(data)
        if codec == "zstd"
        else gzip.compress(data, compresslevel=6, mtime=0)
    )
    path.write_bytes(blob)
    return len(blob)


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
@pytest.mark.parametrize("codec,suffix", [("zstd", ".jsonl.zst"), ("gzip", ".jsonl.gz")])
def test_a_decompression_bomb_is_read_in_bounded_memory(tmp_path, codec, suffix):
    path = tmp_path / f"bomb{suffix}"
    size = _bomb(path, codec)
    assert size < EXPANDED // 500  # a real bomb: hundreds of times smaller than what it holds
    docs: list[dict] = []
    peak = _peak(lambda: docs.extend(read_documents(str(path))))
    assert [d["id"] for d in docs] == ["last"]
    assert peak < PEAK_LIMIT, f"{codec}: peak {peak / 2**20:.1f} MiB while reading a bomb"


@pytest.mark.parametrize("codec,suffix", [("zstd", ".jsonl.zst"), ("gzip", ".jsonl.gz")])
def test_the_browser_pages_a_bomb_in_bounded_memory(tmp_path, codec, suffix):
    path = tmp_path / f"bomb{suffix}"
    _bomb(path, codec)
    roots = Roots.of([str(tmp_path)])
    pages: list[dict] = []
    peak = _peak(lambda: pages.append(preview(roots, str(path), limit=5)))
    assert pages[0]["kind"] == "jsonl"
    assert peak < PEAK_LIMIT + 4 * 1024 * 1024, f"{codec}: peak {peak / 2**20:.1f} MiB for one page"


@pytest.mark.parametrize("suffix", [".jsonl.zst", ".jsonl.gz"])
def test_a_truncated_stream_is_a_bad_record_not_a_short_shard(tmp_path, suffix):
    data = b"".join(b'{"id": "%d", "text": "document number %d"}\n' % (i, i) for i in range(20_000))
    blob = compress(data, compression_of(suffix))
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(BadRecordError, match=r"cut\.jsonl\.\w+:\d+: bad record \(truncated_stream\)"):
        list(read_documents(str(path)))
    stats = ReadStats()
    got = list(read_documents(str(path), on_bad_record="skip", stats=stats))
    assert stats.skip_reasons == {"truncated_stream": 1} and 0 < len(got) < 20_000


def test_concatenated_zstd_frames_read_whole(tmp_path):
    one = b'{"id": "a", "text": "x"}\n'
    two = b'{"id": "b", "text": "y"}\n'
    path = tmp_path / "two.jsonl.zst"
    path.write_bytes(compress(one, "zstd") + compress(two, "zstd"))
    assert [d["id"] for d in read_documents(str(path))] == ["a", "b"]
    with open_decompressed(open(path, "rb"), "zstd") as stream:
        assert stream.read() == one + two
