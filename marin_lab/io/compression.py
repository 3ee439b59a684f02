"""Compressed files (gzip `.gz`, zstd `.zst`/`.zstd`): the one place that reads and writes them.

Reading streams in bounded pieces, whatever the compression ratio: both codecs decode at most the
bytes a `read` asks for (the standard library's `max_length` contract, which `gzip` and
`backports.zstd` — the backport of Python 3.14's `compression.zstd` — both keep). So a small file
that expands enormously (a "zip bomb") costs memory in proportion to what the reader holds, never
to the expanded size nor to a whole input chunk's expansion. A stream that ends inside a frame or
member raises `EOFError`, so a truncated upload never reads as a shorter, valid file; every
decoding failure is one of `DECODE_ERRORS`.

Writing is deterministic (same bytes in, same bytes out): gzip without a timestamp, single-threaded
zstd at level 3 (the `zstandard` binding, whose output earlier shards were written with).
"""

from __future__ import annotations

import gzip
import io
import zlib
from typing import IO

import zstandard
from backports import zstd as stdlib_zstd

__all__ = ["DECODE_ERRORS", "READ_CHUNK", "compress", "compression_of", "open_decompressed"]

READ_CHUNK = 1 << 20
"""What one read of a decompressed stream asks for: the most a codec expands at a time."""
DECODE_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error, stdlib_zstd.ZstdError)
"""What reading a damaged or truncated compressed stream raises."""
_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}


def compression_of(name: str) -> str | None:
    """'gzip', 'zstd' or None (not compressed), from the file name's extension."""
    for suffix, codec in _SUFFIXES.items():
        if name.endswith(suffix):
            return codec
    return None


def open_decompressed(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    """A buffered stream of the decompressed bytes of `raw` (closing it closes `raw` too)."""
    if compression == "gzip":
        # A BufferedIOBase is a binary file object at runtime; typeshed does not derive it from IO[bytes].
        return _Closing(gzip.GzipFile(fileobj=raw, mode="rb"), raw)  # type: ignore[return-value]
    if compression == "zstd":
        # ZstdFile buffers 8 KiB at a time, which made reading lines ~3x slower than before; the
        # same decompressor behind a 1 MiB buffer reads as fast, with the same bound.
        return io.BufferedReader(_ZstdReader(raw), READ_CHUNK)
    if compression is not None:
        raise ValueError(f"unknown compression {compression!r}; expected gzip, zstd or None")
    # The raw files passed here (fsspec's, open()'s) have readinto, which IO[bytes] does not declare.
    return raw if isinstance(raw, io.BufferedIOBase) else io.BufferedReader(raw, READ_CHUNK)  # type: ignore[type-var]


class _Closing(io.BufferedIOBase):
    """A decompressing stream that also closes the file beneath it (GzipFile and ZstdFile leave a
    file object they were given open)."""

    def __init__(self, stream: io.BufferedIOBase, raw: IO[bytes]):
        self._stream, self._raw = stream, raw

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        return self._stream.read(-1 if size is None else size)

    def read1(self, size: int = -1) -> bytes:
        return self._stream.read1(size)

    def readinto(self, buffer) -> int:
        return self._stream.readinto(buffer)

    def readline(self, size: int | None = -1) -> bytes:
        return self._stream.readline(-1 if size is None else size)

    def peek(self, size: int = 0) -> bytes:
        return self._stream.peek(size)  # type: ignore[attr-defined]

    def close(self) -> None:
        if not self.closed:
            try:
                self._stream.close()
            finally:
                self._raw.close()
                super().close()


class _ZstdReader(io.RawIOBase):
    """zstd frames (one or many, as concatenated files hold) decoded at most `len(buffer)` bytes
    per read; EOFError when the input ends inside a frame."""

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self._decompressor = stdlib_zstd.ZstdDecompressor()
        self._input_left = b""  # input past the end of the last frame

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        with memoryview(buffer) as view, view.cast("B") as out:
            data = self._read(len(out))
            out[: len(data)] = data
        return len(data)

    def _read(self, size: int) -> bytes:
        while True:
            d = self._decompressor
            if d.eof:
                block = d.unused_data or self._input_left or self._raw.read(READ_CHUNK)
                self._input_left = b""
                if not block:
                    return b""
                self._decompressor = d = stdlib_zstd.ZstdDecompressor()
            elif d.needs_input:
                block = self._raw.read(READ_CHUNK)
                if not block:
                    raise EOFError("zstd stream ended before the end of its last frame")
            else:
                block = b""
            data = d.decompress(block, size)
            if data:
                return data

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def compress(data: bytes, compression: str | None) -> bytes:
    """`data` compressed deterministically (see the module docstring)."""
    if compression == "gzip":
        # Level 5, not zlib's default 6: on JSON-lines text it writes ~1% more bytes and compresses
        # ~1.5x faster (measured, docs/benchmarks.md); compressing at 6 was ~30% of a dedup step.
        return gzip.compress(data, compresslevel=5, mtime=0)
    if compression == "zstd":
        return zstandard.ZstdCompressor(level=3, threads=0).compress(data)
    return data
